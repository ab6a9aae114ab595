"""Huey: real ``huey_consumer`` processes (Redis storage) on a real redis-server broker.

Three consumers start at once, each with a Huey instance (a queue) of its own: ``reader``
(two worker threads: rows, leases, progress), ``crash`` (SIGKILLed) and ``drain`` (one
worker process, ``-k process``; SIGINT, Huey's graceful signal, during a task), and
``drained`` (two worker threads; a drain request during a task).
"""

from __future__ import annotations

import os
import signal
import socket
from typing import Any

import pytest
import redis
from huey import RedisHuey
from huey import signals as huey_signals
from waiting import wait_until

from integrations.conftest import WorkerSpecs
from integrations.lifecycle import (
    HeldTasks,
    Presence,
    check_drains,
    check_killed,
    event_cursor,
    events_since,
    said_draining_then_left,
    wait_active,
    wait_one_ttl,
    wait_progress,
    wait_refreshed,
)
from integrations.workers import WorkerProcess, python_tool, worker_env
from redis_presence import ConsumerPresence, PresenceReporter, RedisPresenceRegistry
from redis_presence.integrations.huey import DEFAULT_GROUP, install

pytestmark = [pytest.mark.redis_server, pytest.mark.slow]

PREFIX = "it-huey"
INTERVAL_MS = 200
TTL_MS = 2_000
"""An idle worker beats at each blocking read (Huey's Redis storage: 1 s)."""
WORKERS = {
    "reader": ["-w", "2"],
    "crash": ["-w", "1"],
    "drain": ["-w", "1", "-k", "process"],
    "drained": ["-w", "2"],
}


def queue(name: str) -> str:
    return f"huey-{name}"


def worker_specs(broker_url: str, presence_url: str) -> WorkerSpecs:
    env = worker_env(broker_url, presence_url, PREFIX, INTERVAL_MS)
    return {
        name: (
            [python_tool("huey_consumer"), "huey_app.huey", *options],
            {**env, "RP_HUEY_NAME": queue(name)},
        )
        for name, options in WORKERS.items()
    }


def producer(broker_url: str, name: str) -> RedisHuey:
    """An instance enqueueing ``huey_app.hold`` on worker `name`'s queue: the task's
    identifier is its module and name, so the stand-in says it is ``huey_app``'s."""
    huey = RedisHuey(queue(name), url=broker_url, results=False)

    def hold(token: str) -> None:  # pragma: no cover - runs in the consumer
        raise AssertionError

    hold.__module__ = "huey_app"
    huey.task()(hold)
    return huey


def enqueue_hold(broker_url: str, name: str) -> str:
    token = HeldTasks.token()
    huey = producer(broker_url, name)
    huey.enqueue(huey._registry.string_to_task("huey_app.hold")(args=(token,)))
    return token


def rows_by_consumer(presence: Presence, name: str) -> dict[str, ConsumerPresence]:
    """consumer -> row, of `name`'s queue."""
    return {row.consumer: row for row in presence.rows(ttl_ms=TTL_MS) if row.queue == queue(name)}


def rows_of(presence: Presence, name: str) -> dict[str, tuple[int, str]]:
    """consumer -> (lease_count, state) of the rows of `name`'s queue."""
    return {
        consumer: (row.lease_count, row.state.value)
        for consumer, row in rows_by_consumer(presence, name).items()
    }


def wait_rows(presence: Presence, worker: WorkerProcess, name: str, count: int) -> set[str]:
    rows = wait_active(
        lambda: rows_by_consumer(presence, name), count, worker=worker, what=f"rows of {name}"
    )
    return set(rows)


def test_a_row_per_worker_thread_with_its_task_as_lease(
    workers: dict[str, WorkerProcess], presence: Presence, broker_url: str, held: HeldTasks
) -> None:
    worker = workers["reader"]
    consumers = wait_rows(presence, worker, "reader", 2)
    prefix = f"{socket.gethostname()}:{worker.pid}/"
    assert consumers == {f"{prefix}Worker-1", f"{prefix}Worker-2"}
    rows = [row for row in presence.rows() if row.queue == queue("reader")]
    assert {row.group for row in rows} == {DEFAULT_GROUP}
    assert [row.capacity for row in rows] == [1, 1]  # a task at a time per worker
    wait_refreshed(lambda: rows_by_consumer(presence, "reader"))

    token = enqueue_hold(broker_url, "reader")
    held.wait_started(token)

    def leases() -> list[int]:
        return sorted(lease for lease, state in rows_of(presence, "reader").values())

    wait_until(lambda: leases() == [0, 1], timeout_s=10, what="the running task as a lease")
    (busy,) = [c for c, (lease, _) in rows_of(presence, "reader").items() if lease]
    # The task runs for more than a TTL: its worker's row stays active, without progress.
    wait_one_ttl(presence, TTL_MS)
    assert rows_of(presence, "reader")[busy] == (1, "active")
    assert presence.row(queue("reader"), busy).last_progress_ns is None  # type: ignore[union-attr]

    released_ns = presence.server_now_ns()
    held.release(token)
    wait_progress(
        lambda: presence.row(queue("reader"), busy, ttl_ms=TTL_MS), released_ns, lease_count=0
    )
    assert rows_of(presence, "reader")[busy] == (0, "active")


def test_sigkill_goes_stale_then_expired_on_time(
    workers: dict[str, WorkerProcess], presence: Presence
) -> None:
    worker = workers["crash"]
    (consumer,) = wait_rows(presence, worker, "crash", 1)
    check_killed(
        presence,
        worker.kill,
        {consumer: {queue("crash")}},
        interval_ms=1_000 + INTERVAL_MS,  # a beat per blocking read of 1 s
        ttl_ms=TTL_MS,
    )


def test_graceful_shutdown_deregisters_after_the_running_task(
    workers: dict[str, WorkerProcess], presence: Presence, broker_url: str, held: HeldTasks
) -> None:
    worker = workers["drain"]
    (consumer,) = wait_rows(presence, worker, "drain", 1)
    assert not consumer.startswith(f"{socket.gethostname()}:{worker.pid}/")  # its own process
    token = enqueue_hold(broker_url, "drain")
    held.wait_started(token)
    wait_until(
        lambda: rows_of(presence, "drain").get(consumer, (0, ""))[0] == 1,
        timeout_s=10,
        what="the task as a lease",
    )
    cursor = event_cursor(presence)

    def kept_draining() -> bool:  # until the task is done, saying draining
        wait_until(
            lambda: (
                (row := rows_by_consumer(presence, "drain").get(consumer)) is not None
                and row.draining
                and row.lease_count == 1
            ),
            timeout_s=10,
            what="the busy worker's row to say draining",
            seen=lambda: rows_by_consumer(presence, "drain"),
        )
        return True

    check_drains(
        presence,
        worker,
        held,
        token,
        consumer=consumer,
        stop=lambda: os.kill(worker.pid, signal.SIGINT),  # Huey's graceful signal
        began="Shutting down gracefully",
        kept=kept_draining,
    )
    kinds = events_since(presence, cursor, consumer)
    assert said_draining_then_left(kinds[queue("drain")]), kinds


def test_a_drain_request_stops_the_consumer_gracefully(
    workers: dict[str, WorkerProcess], presence: Presence, broker_url: str, held: HeldTasks
) -> None:
    """`request_drain` on the idle worker's row: the consumer shuts down gracefully (every
    worker drains), the busy worker finishes its task, and the consumer exits 0."""
    worker = workers["drained"]
    consumers = wait_rows(presence, worker, "drained", 2)
    token = enqueue_hold(broker_url, "drained")
    held.wait_started(token)
    wait_until(
        lambda: sorted(lease for lease, _ in rows_of(presence, "drained").values()) == [0, 1],
        timeout_s=10,
        what="the task as a lease",
    )
    (idle,) = [c for c, (lease, _) in rows_of(presence, "drained").items() if not lease]
    cursor = event_cursor(presence)
    assert presence.registry.request_drain(queue("drained"), DEFAULT_GROUP, idle)
    worker.wait_logged("Shutting down gracefully", what="the graceful shutdown to begin")
    held.release(token)
    assert worker.wait(30) == 0, worker.log_tail()
    assert rows_of(presence, "drained") == {}
    for consumer in consumers:
        kinds = events_since(presence, cursor, consumer)[queue("drained")]
        assert said_draining_then_left(kinds), (consumer, kinds)


def test_install_checks_its_arguments_where_the_instance_is_defined() -> None:
    huey = RedisHuey("rp-args", url="redis://h:6379/0")
    with pytest.raises(ValueError, match="interval_ms must be in"):
        install(huey, url="redis://h:6379/0", interval_ms=0)
    with pytest.raises(TypeError, match=r"huey must be a huey\.Huey"):
        install(object(), url="redis://h:6379/0")
    install(huey, url="redis://h:6379/0")
    with pytest.raises(ValueError, match="already installed"):
        install(huey, url="redis://h:6379/0")


def test_a_task_costs_its_worker_two_beats(
    presence_url: str, presence_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The task path of a worker, in process: the dequeue that returns the task beats
    (lease 1), its start signal adds none, its end beats (progress); an empty read beats
    once. Then what they wrote is the row a consumer's worker shows."""
    huey = RedisHuey("rp-beats", url=presence_url, results=False)
    install(huey, url=presence_url, prefix=f"{PREFIX}-beats", interval_ms=3_600_000)
    beats: list[tuple[int, bool]] = []
    real_beat = PresenceReporter.beat

    def counted(self: PresenceReporter, *args: Any, **kwargs: Any) -> None:
        beats.append((args[3], kwargs.get("progressed", False)))
        real_beat(self, *args, **kwargs)

    monkeypatch.setattr(PresenceReporter, "beat", counted)
    dequeue: Any = huey.dequeue
    task = object()
    dequeue._dequeue = lambda: task
    assert dequeue() is task
    huey._emit(huey_signals.SIGNAL_EXECUTING, task)
    huey._emit(huey_signals.SIGNAL_COMPLETE, task)
    assert beats == [(1, False), (0, True)]
    dequeue._dequeue = lambda: None
    assert dequeue() is None
    assert beats == [(1, False), (0, True), (0, False)]
    reporter = dequeue._presence._reporter
    try:
        assert reporter.flush() == 1
        registry = RedisPresenceRegistry(presence_client, prefix=f"{PREFIX}-beats")
        (row,) = registry.snapshot()
        assert (row.queue, row.group, row.lease_count) == ("rp-beats", DEFAULT_GROUP, 0)
        assert row.consumer.endswith(":" + str(os.getpid()) + "/MainProcess")
        assert row.last_progress_ns is not None
    finally:
        dequeue._presence._stopping.set()  # its ticker thread ends
        reporter.close()
        reporter.registry.close()

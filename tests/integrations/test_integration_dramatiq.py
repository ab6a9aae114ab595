"""Dramatiq: real ``dramatiq`` worker processes on a real redis-server broker.

As for Celery, three workers start at once, each reading queues of its own: ``reader``
(rows and leases), ``crash`` (its worker process is SIGKILLed) and ``drain`` (SIGTERM to
the ``dramatiq`` main process: a warm shutdown).
"""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import Iterator

import dramatiq
import pytest
from dramatiq.brokers.redis import RedisBroker
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
    wait_progress,
    wait_refreshed,
)
from integrations.workers import WorkerProcess, python_tool, worker_env
from redis_presence import ConsumerPresence
from redis_presence.integrations.dramatiq import DEFAULT_GROUP, PresenceMiddleware

pytestmark = [pytest.mark.redis_server, pytest.mark.slow]

PREFIX = "it-dramatiq"
INTERVAL_MS = 200
TTL_MS = 1_000
NAMES = ("reader", "crash", "drain")


def queues(name: str) -> set[str]:
    """What a worker reading ``<name>-a`` and ``<name>-b`` reads: each queue and its
    delay queue, one consumer thread (and one row) each."""
    return {f"{name}-{part}{dq}" for part in "ab" for dq in ("", ".DQ")}


def worker_specs(broker_url: str, presence_url: str) -> WorkerSpecs:
    command = [python_tool("dramatiq"), "dramatiq_app", "--processes", "1", "--threads", "2"]
    env = worker_env(broker_url, presence_url, PREFIX, INTERVAL_MS)
    return {name: ([*command, "--queues", f"{name}-a", f"{name}-b"], env) for name in NAMES}


@pytest.fixture(scope="module")
def producer(broker_url: str) -> Iterator[RedisBroker]:
    broker = RedisBroker(url=broker_url)  # type: ignore[no-untyped-call]
    try:
        yield broker
    finally:
        broker.close()


def rows_of(presence: Presence, name: str) -> dict[str, ConsumerPresence]:
    """queue -> row of worker `name`."""
    return {row.queue: row for row in presence.rows() if row.queue in queues(name)}


def wait_rows(presence: Presence, worker: WorkerProcess, name: str) -> str:
    """Wait for every row of worker `name` to be active; its consumer (``host:pid``)."""
    rows = wait_active(
        lambda: rows_of(presence, name), queues(name), worker=worker, what=f"rows of {name}"
    )
    (consumer,) = {row.consumer for row in rows.values()}
    return consumer


def hold(producer: RedisBroker, queue: str, delay_ms: int | None = None) -> str:
    token = HeldTasks.token()
    actor = f"hold_{queue.replace('-', '_')}"
    message: dramatiq.Message[None] = dramatiq.Message(
        queue_name=queue, actor_name=actor, args=(token,), kwargs={}, options={}
    )
    producer.enqueue(message, delay=delay_ms)
    return token


def test_a_row_per_consumer_thread_kept_active(
    workers: dict[str, WorkerProcess], presence: Presence
) -> None:
    consumer = wait_rows(presence, workers["reader"], "reader")
    host, _, pid = consumer.rpartition(":")
    assert host == socket.gethostname()
    assert pid.isdigit()
    rows = [row for row in presence.rows() if row.queue in queues("reader")]
    assert {row.group for row in rows} == {DEFAULT_GROUP}
    assert all(row.lease_count == 0 for row in rows)
    assert [row.capacity for row in rows] == [2] * 4  # --threads 2
    wait_refreshed(lambda: rows_of(presence, "reader"))
    assert all(row.state.value == "active" for row in rows_of(presence, "reader").values())


def test_lease_count_follows_long_messages(
    workers: dict[str, WorkerProcess],
    presence: Presence,
    producer: RedisBroker,
    held: HeldTasks,
) -> None:
    wait_rows(presence, workers["reader"], "reader")

    def leases() -> dict[str, int]:
        rows = rows_of(presence, "reader").items()
        return {queue: row.lease_count for queue, row in rows if row.lease_count}

    running = [hold(producer, "reader-a"), hold(producer, "reader-a")]
    delayed = hold(producer, "reader-b", delay_ms=2_000)  # waits for its ETA in the worker
    wait_until(
        lambda: leases() == {"reader-a": 2, "reader-b.DQ": 1}, timeout_s=20, what="2 + 1 delayed"
    )
    for token in running:
        held.wait_started(token)

    def progress() -> dict[str, int | None]:
        return {r.queue: r.last_progress_ns for r in presence.rows() if r.queue in queues("reader")}

    before = progress()
    released_ns = presence.server_now_ns()
    held.release(running[0])
    # The acknowledged message is progress on its queue's row, not on the other's.
    wait_progress(lambda: rows_of(presence, "reader").get("reader-a"), released_ns)
    assert progress().get("reader-b") == before.get("reader-b")
    # Past its ETA the delayed message moves to reader-b, where a free thread runs it.
    held.wait_started(delayed)
    wait_until(lambda: leases() == {"reader-a": 1, "reader-b": 1}, timeout_s=20, what="1 + 1")
    held.release(running[1])
    held.release(delayed)
    wait_until(lambda: leases() == {}, timeout_s=20, what="no leases")


def test_sigkill_goes_stale_then_expired_on_time(
    workers: dict[str, WorkerProcess], presence: Presence
) -> None:
    worker = workers["crash"]
    consumer = wait_rows(presence, worker, "crash")
    pid = int(consumer.rpartition(":")[2])
    assert pid != worker.pid  # the worker process, not the `dramatiq` supervisor
    check_killed(
        presence,
        lambda: os.kill(pid, signal.SIGKILL),
        {consumer: queues("crash")},
        interval_ms=INTERVAL_MS,
        ttl_ms=TTL_MS,
    )


def test_warm_shutdown_says_draining_then_deregisters_after_running_messages(
    workers: dict[str, WorkerProcess],
    presence: Presence,
    producer: RedisBroker,
    held: HeldTasks,
) -> None:
    worker = workers["drain"]
    consumer = wait_rows(presence, worker, "drain")
    token = hold(producer, "drain-a")
    held.wait_started(token)
    cursor = event_cursor(presence)

    def kept_draining() -> bool:
        # Dramatiq keeps its consumer threads until the running message is done: so do the
        # rows, saying draining.
        wait_until(
            lambda: all(row.draining for row in rows_of(presence, "drain").values()),
            timeout_s=10,
            what="the rows to say draining",
            seen=lambda: rows_of(presence, "drain"),
        )
        return set(rows_of(presence, "drain")) == queues("drain")

    check_drains(
        presence,
        worker,
        held,
        token,
        consumer=consumer,
        began="Stopping worker process",
        kept=kept_draining,
    )
    kinds = events_since(presence, cursor, consumer)
    assert set(kinds) == queues("drain"), kinds
    assert all(said_draining_then_left(k) for k in kinds.values()), kinds


def test_middleware_checks_its_arguments_where_the_broker_is_defined() -> None:
    with pytest.raises(ValueError, match="interval_ms must be in"):
        PresenceMiddleware(url="redis://h:6379/0", interval_ms=3_600_001)
    with pytest.raises(TypeError, match="url must be a str"):
        PresenceMiddleware(url=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="group must be a non-empty string"):
        PresenceMiddleware(url="redis://h:6379/0", group="")
    assert PresenceMiddleware(url="redis://h:6379/0", group="billing").group == "billing"

"""Taskiq: real ``taskiq worker`` processes on taskiq-redis brokers and a real redis-server.

Six workers start at once, each reading a queue of its own: ``reader``, ``crash``,
``drain`` and ``drained`` on ``ListQueueBroker`` set up as the docs say (rows and leases,
and an idle worker lives on; SIGKILL of the worker process; SIGTERM to ``taskiq worker``,
a warm shutdown; a drain request), ``default`` on ``ListQueueBroker`` with redis-py's
default socket timeout (its idle worker process dies and is restarted: the middleware
warns), ``stream`` on ``RedisStreamBroker`` (its consumer group and consumer name are the
row's).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket

import pytest
from taskiq_redis import ListQueueBroker, RedisStreamBroker
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
from integrations.workers import WorkerProcess, python_tool, started_workers, worker_env
from redis_presence import ConsumerPresence
from redis_presence.integrations.taskiq import DEFAULT_GROUP, SCHEDULER_GROUP, PresenceMiddleware

pytestmark = [pytest.mark.redis_server, pytest.mark.slow]

PREFIX = "it-taskiq"
INTERVAL_MS = 200
TTL_MS = 1_000
KINDS = {
    "reader": "list",
    "crash": "list",
    "drain": "list",
    "drained": "list",
    "default": "list-default",
    "stream": "stream",
}
STREAM_GROUP = "rp-stream-group"
MAX_ASYNC_TASKS = 7


def queue(name: str) -> str:
    return f"taskiq-{name}"


def worker_specs(broker_url: str, presence_url: str) -> WorkerSpecs:
    env = worker_env(broker_url, presence_url, PREFIX, INTERVAL_MS)
    command = [
        python_tool("taskiq"),
        "worker",
        "taskiq_app:broker",
        "--workers",
        "1",
        "--max-async-tasks",
        str(MAX_ASYNC_TASKS),
    ]
    return {
        name: (command, {**env, "RP_NAME": queue(name), "RP_TASKIQ_BROKER": kind})
        for name, kind in KINDS.items()
    }


def send_hold(broker_url: str, name: str) -> str:
    """Send the ``hold`` task to worker `name`'s queue, as a producer would."""
    token = HeldTasks.token()
    producer: ListQueueBroker | RedisStreamBroker
    if KINDS[name] == "stream":
        producer = RedisStreamBroker(broker_url, queue_name=queue(name))
    else:
        producer = ListQueueBroker(broker_url, queue_name=queue(name))

    @producer.task(task_name="hold")
    async def hold(token: str) -> None:  # pragma: no cover - runs in the worker
        raise AssertionError

    async def send() -> None:
        await producer.startup()
        try:
            await hold.kiq(token)
        finally:
            await producer.shutdown()

    asyncio.run(send())
    return token


def row_of(presence: Presence, name: str) -> ConsumerPresence | None:
    rows = [row for row in presence.rows(ttl_ms=TTL_MS) if row.queue == queue(name)]
    live = [row for row in rows if row.state.value == "active"]
    return live[0] if len(live) == 1 else None


def live_rows(presence: Presence, name: str) -> dict[str, ConsumerPresence]:
    """consumer -> row of `name`'s queue, while exactly one is active (else none)."""
    row = row_of(presence, name)
    return {} if row is None else {row.consumer: row}


def wait_row(presence: Presence, worker: WorkerProcess, name: str) -> ConsumerPresence:
    rows = wait_active(lambda: live_rows(presence, name), 1, worker=worker, what=f"{name}'s row")
    (row,) = rows.values()
    return row


SOCKET_TIMEOUT_S = 5
"""redis-py's default socket timeout (8.x)."""
WARNING = "redis_presence.integrations.taskiq][WARNING"
"""How the middleware's warning starts in a ``taskiq worker`` log (its logging format)."""
RESTARTED = "restarted with pid"
"""What taskiq's process manager logs when it restarts a dead worker process."""


def test_an_idle_worker_set_up_as_documented_is_never_restarted(
    workers: dict[str, WorkerProcess], presence: Presence
) -> None:
    """``ListQueueBroker`` waits on a ``BRPOP`` with no timeout: with redis-py's default
    socket timeout an idle worker process died every 5 s and taskiq restarted it (rows
    under a new ``host:pid`` each time); set up as the docs say, it lives on, unwarned."""
    worker = workers["reader"]
    row = wait_row(presence, worker, "reader")
    since_ns = presence.server_now_ns()

    def same_process() -> None:
        worker.check_alive()
        log = worker.log.read_text(errors="replace")
        assert "is dead" not in log, worker.log_tail()
        assert RESTARTED not in log, worker.log_tail()
        now = row_of(presence, "reader")
        assert now is None or now.consumer == row.consumer, (row.consumer, now)

    wait_until(
        lambda: presence.server_now_ns() - since_ns > (SOCKET_TIMEOUT_S + 1.5) * 1e9,
        timeout_s=SOCKET_TIMEOUT_S + 20,
        what="an idle worker's wait to outlast redis-py's default socket timeout",
        alive=same_process,
    )
    same_process()
    now = row_of(presence, "reader")
    assert now is not None
    assert (now.consumer, now.registered_at_ns) == (row.consumer, row.registered_at_ns)
    assert WARNING not in worker.log.read_text(errors="replace")


def test_with_the_default_socket_timeout_the_middleware_warns_once_naming_the_setting(
    workers: dict[str, WorkerProcess],
) -> None:
    worker = workers["default"]

    def restarted() -> bool:
        return RESTARTED in worker.log.read_text(errors="replace")

    # What the warning foretells: the idle worker process dies and taskiq restarts it.
    wait_until(restarted, timeout_s=SOCKET_TIMEOUT_S + 30, what="a restart", seen=worker.log_tail)
    log = worker.log.read_text(errors="replace")
    assert "TimeoutError" in log
    warnings = [line for line in log.splitlines() if WARNING in line]
    assert warnings, worker.log_tail()
    assert len(warnings) <= 1 + log.count(RESTARTED)  # once per worker process
    assert "its BRPOP waits with no timeout" in warnings[0]
    assert "create the broker with socket_timeout=None" in warnings[0]
    assert WARNING not in workers["stream"].log.read_text(errors="replace")


def test_rows_leases_and_progress_of_a_real_worker(
    workers: dict[str, WorkerProcess], presence: Presence, broker_url: str, held: HeldTasks
) -> None:
    worker = workers["reader"]
    row = wait_row(presence, worker, "reader")
    host, _, pid = row.consumer.rpartition(":")
    assert host == socket.gethostname()
    assert int(pid) != worker.pid  # the worker process, not its manager
    assert row.group == DEFAULT_GROUP
    assert row.lease_count == 0
    assert (row.capacity, row.draining) == (MAX_ASYNC_TASKS, False)
    # Idle (a BRPOP without timeout under the wrapper): the wrapper beats anyway.
    wait_refreshed(lambda: live_rows(presence, "reader"))

    token = send_hold(broker_url, "reader")
    held.wait_started(token)

    def leases() -> int | None:
        found = row_of(presence, "reader")
        return None if found is None else found.lease_count

    wait_until(lambda: leases() == 1, timeout_s=10, what="the running task as a lease")
    wait_one_ttl(presence, TTL_MS)
    running = row_of(presence, "reader")
    assert running is not None
    assert (running.lease_count, running.last_progress_ns) == (1, None)

    released_ns = presence.server_now_ns()
    held.release(token)
    wait_progress(lambda: row_of(presence, "reader"), released_ns, lease_count=0)


def test_a_stream_broker_reports_its_group_and_consumer(
    workers: dict[str, WorkerProcess], presence: Presence
) -> None:
    row = wait_row(presence, workers["stream"], "stream")
    assert (row.group, row.consumer) == (STREAM_GROUP, f"{queue('stream')}-consumer")


def test_sigkill_goes_stale_then_expired_on_time(
    workers: dict[str, WorkerProcess], presence: Presence
) -> None:
    row = wait_row(presence, workers["crash"], "crash")
    check_killed(
        presence,
        lambda: os.kill(int(row.consumer.rpartition(":")[2]), signal.SIGKILL),
        {row.consumer: {queue("crash")}},
        interval_ms=INTERVAL_MS,
        ttl_ms=TTL_MS,
    )


def test_warm_shutdown_deregisters_after_the_running_task(
    workers: dict[str, WorkerProcess], presence: Presence, broker_url: str, held: HeldTasks
) -> None:
    worker = workers["drain"]
    row = wait_row(presence, worker, "drain")
    token = send_hold(broker_url, "drain")
    held.wait_started(token)
    wait_until(
        lambda: (row_of(presence, "drain") or row).lease_count == 1,
        timeout_s=10,
        what="the task as a lease",
    )
    cursor = event_cursor(presence)

    def kept_draining() -> bool:  # until the task is done, saying draining
        wait_until(
            lambda: (
                (found := row_of(presence, "drain")) is not None
                and found.draining
                and found.lease_count == 1
            ),
            timeout_s=10,
            what="the row to say draining",
            seen=lambda: row_of(presence, "drain"),
        )
        return True

    check_drains(
        presence,
        worker,
        held,
        token,
        consumer=row.consumer,
        began="Waiting for 1 running tasks",
        kept=kept_draining,
        gone_within_s=10,
    )
    kinds = events_since(presence, cursor, row.consumer)
    assert said_draining_then_left(kinds[queue("drain")]), kinds


def test_a_drain_request_stops_the_worker_process_and_taskiq_replaces_it(
    workers: dict[str, WorkerProcess], presence: Presence, broker_url: str, held: HeldTasks
) -> None:
    worker = workers["drained"]
    row = wait_row(presence, worker, "drained")
    token = send_hold(broker_url, "drained")
    held.wait_started(token)
    cursor = event_cursor(presence)
    assert presence.registry.request_drain(queue("drained"), row.group, row.consumer)
    wait_until(
        lambda: (
            (found := row_of(presence, "drained")) is not None
            and found.consumer == row.consumer
            and found.draining
            and found.lease_count == 1
        ),
        timeout_s=10,
        what="the row to say draining, its task still running",
        seen=lambda: row_of(presence, "drained"),
    )
    held.release(token)

    def replaced() -> ConsumerPresence | None:
        found = row_of(presence, "drained")
        if found is None or found.consumer == row.consumer:
            return None
        return found if found.state.value == "active" else None

    new = wait_until(
        replaced,
        timeout_s=30,
        what="a new worker process in the drained one's place",
        alive=worker.check_alive,
        seen=presence.rows,
    )
    assert not new.draining
    assert presence.rows(consumer=row.consumer) == []
    kinds = events_since(presence, cursor, row.consumer)[queue("drained")]
    assert kinds[0] == "drain_requested", kinds
    assert said_draining_then_left(kinds), kinds


def test_the_scheduler_is_a_consumer_of_group_scheduler(
    broker_url: str, presence_url: str, presence: Presence, tmp_path_factory: pytest.TempPathFactory
) -> None:
    env = worker_env(broker_url, presence_url, PREFIX, INTERVAL_MS)
    command = [python_tool("taskiq"), "scheduler", "taskiq_app:scheduler"]
    specs = {"scheduler": (command, {**env, "RP_NAME": queue("sched")})}
    with started_workers(specs, logs=tmp_path_factory.mktemp("taskiq-scheduler")) as started:
        process = started["scheduler"]
        consumer = f"{socket.gethostname()}:{process.pid}"

        def progressed() -> ConsumerPresence | None:
            found = presence.row(queue("sched"), consumer, ttl_ms=TTL_MS)
            if found is None or found.last_progress_ns is None:
                return None
            return found

        row = wait_until(progressed, timeout_s=30, what="the scheduler's row, with progress")
        assert (row.group, row.state.value) == (SCHEDULER_GROUP, "active")
        first = row.last_progress_ns
        wait_until(
            lambda: (progressed() or row).last_progress_ns != first,  # a task sent each second
            timeout_s=10,
            what="more progress",
        )
        os.kill(process.pid, signal.SIGINT)  # taskiq scheduler's graceful stop
        process.wait(20)
        assert presence.rows(consumer=consumer) == []


def test_middleware_checks_its_arguments_where_the_broker_is_defined() -> None:
    with pytest.raises(ValueError, match="interval_ms must be in"):
        PresenceMiddleware(url="redis://h:6379/0", interval_ms=0)
    with pytest.raises(TypeError, match="url must be a str"):
        PresenceMiddleware(url=None)  # type: ignore[arg-type]
    assert PresenceMiddleware(url="redis://h:6379/0", group="billing").group == "billing"

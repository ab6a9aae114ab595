"""RQ: real ``rq worker -w redis_presence.integrations.rq.PresenceWorker`` processes on a
real redis-server broker, configured from the environment only (as with django-rq).

Six workers start at once, each reading queues of its own: ``reader`` (rows, leases,
progress), ``crash`` (SIGKILLed), ``drain`` (SIGTERM during a job: a warm shutdown, its
rows draining until the job ends), ``drained`` (a drain request during a job), ``sched``
(``--with-scheduler``: its scheduler process is a consumer of group ``scheduler``) and
``own`` (no ``REDIS_PRESENCE_URL``: presence goes to the worker's own Redis, the broker).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
import redis
from rq import Queue
from rq.job import Job, JobStatus
from waiting import wait_until

from integrations.conftest import WorkerSpecs
from integrations.lifecycle import (
    HeldTasks,
    Presence,
    check_killed,
    event_cursor,
    events_since,
    said_draining_then_left,
    wait_active,
    wait_one_ttl,
    wait_progress,
    wait_refreshed,
)
from integrations.workers import WorkerProcess, python_tool
from redis_presence import ConsumerPresence
from redis_presence.integrations.rq import (
    DEFAULT_GROUP,
    PUBSUB_READ_S,
    SCHEDULER_GROUP,
    PresenceWorker,
)

pytestmark = [pytest.mark.redis_server, pytest.mark.slow]

PREFIX = "it-rq"
INTERVAL_MS = 200
TTL_MS = 3_000
"""RQ watches a running job with a whole-second alarm: a beat at least once a second."""
NAMES = ("reader", "crash", "drain", "drained", "sched", "own")


def queues(name: str) -> set[str]:
    return {f"{name}-a", f"{name}-b"}


def consumer(name: str) -> str:
    return f"rq-{name}"


def worker_specs(broker_url: str, presence_url: str) -> WorkerSpecs:
    env = {
        "RP_BROKER_URL": broker_url,
        "REDIS_PRESENCE_URL": presence_url,
        "REDIS_PRESENCE_PREFIX": PREFIX,
        "REDIS_PRESENCE_INTERVAL_MS": str(INTERVAL_MS),
    }
    command = [
        python_tool("rq"),
        "worker",
        "--url",
        broker_url,
        "-w",
        "redis_presence.integrations.rq.PresenceWorker",
    ]
    return {
        name: (
            [
                *command,
                *(["--with-scheduler"] if name == "sched" else []),
                "-n",
                consumer(name),
                *sorted(queues(name)),
            ],
            env if name != "own" else {**env, "REDIS_PRESENCE_URL": ""},  # empty: unset
        )
        for name in NAMES
    }


@pytest.fixture(scope="module")
def broker(broker_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(broker_url)
    try:
        yield client
    finally:
        client.close()


def rows_by_queue(presence: Presence, name: str) -> dict[str, ConsumerPresence]:
    """queue -> row of worker `name`."""
    return {row.queue: row for row in presence.rows(consumer=consumer(name), ttl_ms=TTL_MS)}


def rows_of(presence: Presence, name: str) -> dict[str, tuple[int, str]]:
    """queue -> (lease_count, state) of worker `name`'s rows."""
    return {
        queue: (row.lease_count, row.state.value)
        for queue, row in rows_by_queue(presence, name).items()
    }


def wait_rows(presence: Presence, worker: WorkerProcess, name: str) -> None:
    what = f"rows of {name}"
    wait_active(lambda: rows_by_queue(presence, name), queues(name), worker=worker, what=what)


def hold(broker: redis.Redis, queue: str) -> str:
    """Enqueue a job that runs until the test releases it; its token is also its job id."""
    token = HeldTasks.token()
    Queue(queue, connection=broker).enqueue("rq_jobs.hold", token, job_timeout=120, job_id=token)
    return token


def test_rows_leases_and_progress_of_a_real_worker(
    workers: dict[str, WorkerProcess], presence: Presence, broker: redis.Redis, held: HeldTasks
) -> None:
    worker = workers["reader"]
    wait_rows(presence, worker, "reader")
    rows = presence.rows(consumer=consumer("reader"), ttl_ms=TTL_MS)
    assert {row.group for row in rows} == {DEFAULT_GROUP}
    assert [row.capacity for row in rows] == [1, 1]  # one job at a time
    assert not any(row.draining for row in rows)
    wait_refreshed(lambda: rows_by_queue(presence, "reader"))

    token = hold(broker, "reader-a")
    held.wait_started(token)
    wait_until(
        lambda: (
            rows_of(presence, "reader") == {"reader-a": (1, "active"), "reader-b": (0, "active")}
        ),
        timeout_s=10,
        what="the running job as a lease",
        seen=lambda: rows_of(presence, "reader"),
    )
    # The job runs for more than a TTL: the rows stay active meanwhile.
    wait_one_ttl(presence, TTL_MS)
    assert rows_of(presence, "reader") == {"reader-a": (1, "active"), "reader-b": (0, "active")}
    assert presence.row("reader-a", consumer("reader")).last_progress_ns is None  # type: ignore[union-attr]

    released_ns = presence.server_now_ns()
    held.release(token)
    wait_progress(
        lambda: presence.row("reader-a", consumer("reader"), ttl_ms=TTL_MS),
        released_ns,
        lease_count=0,
        what="the finished job as progress",
    )
    other = presence.row("reader-b", consumer("reader"))
    assert other is not None
    assert other.last_progress_ns is None


def test_sigkill_goes_stale_then_expired_on_time(
    workers: dict[str, WorkerProcess], presence: Presence
) -> None:
    worker = workers["crash"]
    wait_rows(presence, worker, "crash")
    rows = {consumer("crash"): queues("crash")}
    check_killed(presence, worker.kill, rows, interval_ms=INTERVAL_MS, ttl_ms=TTL_MS)


def test_a_warm_shutdown_says_draining_until_the_held_job_finishes_then_leaves(
    workers: dict[str, WorkerProcess], presence: Presence, broker: redis.Redis, held: HeldTasks
) -> None:
    """The rows say draining when the warm shutdown begins, keep the running job's lease
    (and stay active) while it runs, and leave when the worker's loop ends: before RQ's
    own teardown waits for its pub/sub thread."""
    worker = workers["drain"]
    wait_rows(presence, worker, "drain")
    token = hold(broker, "drain-b")
    held.wait_started(token)
    busy = {"drain-a": (0, "active"), "drain-b": (1, "active")}
    wait_until(lambda: rows_of(presence, "drain") == busy, timeout_s=10, what="the job as a lease")
    cursor = event_cursor(presence)
    worker.send_sigterm()
    wait_until(
        lambda: all(row.draining for row in rows_by_queue(presence, "drain").values()),
        timeout_s=20,
        what="the rows to say draining when the warm shutdown begins",
        alive=worker.check_alive,
        seen=lambda: rows_by_queue(presence, "drain"),
    )
    # The worker still holds the job (it waits for the release): the rows stay, beaten.
    wait_one_ttl(presence, TTL_MS)
    assert rows_of(presence, "drain") == busy
    assert worker.poll() is None
    job = Job.fetch(token, connection=broker)
    assert job.get_status() == JobStatus.STARTED
    held.release(token)
    assert worker.wait(30) == 0, worker.log_tail()
    assert job.get_status(refresh=True) == JobStatus.FINISHED
    assert presence.rows(consumer=consumer("drain")) == []
    kinds = events_since(presence, cursor, consumer("drain"))
    assert set(kinds) == queues("drain"), kinds
    assert all(said_draining_then_left(k) for k in kinds.values()), kinds


def test_a_drain_request_stops_the_worker_after_its_job(
    workers: dict[str, WorkerProcess], presence: Presence, broker: redis.Redis, held: HeldTasks
) -> None:
    """`request_drain` on one row: the worker takes no new job, finishes the one it runs
    and exits 0; both its rows said draining (the request acknowledged), then left."""
    worker = workers["drained"]
    wait_rows(presence, worker, "drained")
    token = hold(broker, "drained-a")
    held.wait_started(token)
    cursor = event_cursor(presence)
    assert presence.registry.request_drain("drained-b", DEFAULT_GROUP, consumer("drained"))
    wait_until(
        lambda: all(
            row.draining and not row.drain_requested
            for row in rows_by_queue(presence, "drained").values()
        ),
        timeout_s=20,
        what="the rows to say draining",
        alive=worker.check_alive,
        seen=lambda: rows_by_queue(presence, "drained"),
    )
    waiting = hold(broker, "drained-b")  # never taken: the worker stops after its job
    assert rows_of(presence, "drained") == {"drained-a": (1, "active"), "drained-b": (0, "active")}
    held.release(token)
    assert worker.wait(30) == 0, worker.log_tail()
    assert Job.fetch(waiting, connection=broker).get_status() == JobStatus.QUEUED
    assert presence.rows(consumer=consumer("drained")) == []
    kinds = events_since(presence, cursor, consumer("drained"))
    assert kinds["drained-b"][0] == "drain_requested", kinds
    assert set(kinds) == queues("drained"), kinds
    assert all(said_draining_then_left(k) for k in kinds.values()), kinds


def test_the_scheduler_is_a_consumer_of_group_scheduler(
    workers: dict[str, WorkerProcess], presence: Presence
) -> None:
    worker = workers["sched"]
    wait_rows(presence, worker, "sched")

    def scheduler_rows() -> dict[str, str]:
        return {
            row.queue: row.consumer
            for row in presence.rows(ttl_ms=TTL_MS)
            if row.group == SCHEDULER_GROUP and row.queue in queues("sched")
        }

    wait_until(
        lambda: set(scheduler_rows()) == queues("sched"),
        timeout_s=20,
        what="the scheduler's rows",
        alive=worker.check_alive,
    )
    (scheduler,) = set(scheduler_rows().values())
    _, _, pid = scheduler.rpartition(":")
    assert pid.isdigit()
    assert int(pid) != worker.pid  # the scheduler's own process
    row = presence.row("sched-a", scheduler, ttl_ms=TTL_MS)
    assert row is not None
    assert row.state.value == "active"
    assert row.last_progress_ns is not None  # each finished tick
    assert (row.capacity, row.draining) == (None, False)
    cursor = event_cursor(presence)
    assert worker.terminate(30) == 0, worker.log_tail()
    assert presence.rows(consumer=scheduler) == []
    kinds = events_since(presence, cursor, scheduler)
    assert set(kinds) == queues("sched"), kinds
    assert all(said_draining_then_left(k) for k in kinds.values()), kinds
    assert presence.rows(consumer=consumer("sched")) == []


def test_without_a_url_presence_goes_to_the_workers_own_redis(
    workers: dict[str, WorkerProcess], control: redis.Redis, presence: Presence
) -> None:
    in_broker = Presence(control, PREFIX)
    wait_rows(in_broker, workers["own"], "own")
    assert presence.rows(consumer=consumer("own")) == []


def test_configured_checks_its_arguments_where_the_worker_class_is_defined() -> None:
    with pytest.raises(ValueError, match="interval_ms must be in"):
        PresenceWorker.configured(url="redis://h:6379/0", interval_ms=0)
    with pytest.raises(ValueError, match="group must be a non-empty string"):
        PresenceWorker.configured(url="redis://h:6379/0", group="")
    worker_class = PresenceWorker.configured(url="redis://h:6379/0", group="billing")
    assert issubclass(worker_class, PresenceWorker)
    assert worker_class.presence_group == "billing"


def test_the_pubsub_thread_stops_within_one_short_read(broker: redis.Redis) -> None:
    """RQ's own pub/sub thread reads for 60 s at a time and redis-py 8.2's ``stop()`` waits
    for that read, so a worker's teardown sometimes took a minute after SIGTERM (before:
    the real workers above sometimes outlived ``terminate(30)``). `PresenceWorker` reads
    `PUBSUB_READ_S` at a time: its unsubscribe returns within a few of those."""
    worker = PresenceWorker(["pubsub-q"], connection=broker, name=f"pubsub-{uuid.uuid4().hex}")
    for _ in range(3):
        worker.subscribe()
        thread = worker.pubsub_thread
        assert thread is not None
        assert thread.sleep_time == PUBSUB_READ_S
        started = time.monotonic()
        worker.unsubscribe()
        assert not thread.is_alive()
        assert time.monotonic() - started < 10 * PUBSUB_READ_S  # RQ's own: up to 60 s

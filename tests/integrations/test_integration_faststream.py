"""FastStream: real ``faststream run`` processes on RabbitMQ, NATS and FastStream's Redis broker.

RabbitMQ (127.0.0.1:5672, guest/guest) and NATS (127.0.0.1:4222) are the machine's own
services: the tests use queue and subject names of their own (with a per-run prefix, and
auto-deleted RabbitMQ queues), skip with the reason where a service is absent, and fail
instead under ``REDIS_PRESENCE_REQUIRE_BROKERS=1`` (``.ci/run``). The Redis broker is the
integration tests' own redis-server. Per broker, four workers start at once: ``reader``
(rows, leases), ``crash`` (SIGKILL), ``drain`` (SIGTERM) and ``drained`` (a drain
request on one subscriber's row).
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from waiting import wait_until

from integrations.conftest import NATS_PORT, RABBITMQ_PORT, listening
from integrations.lifecycle import (
    HeldTasks,
    Presence,
    check_killed,
    event_cursor,
    events_since,
    said_draining_then_left,
    wait_active,
    wait_progress,
    wait_refreshed,
)
from integrations.workers import (
    REQUIRE_BROKERS_ENV,
    WorkerProcess,
    python_tool,
    require_broker,
    started_workers,
    worker_env,
)
from redis_presence import ConsumerPresence
from redis_presence.integrations.faststream import DEFAULT_GROUP, PresenceMiddleware

pytestmark = [pytest.mark.redis_server, pytest.mark.slow]

PREFIX = "it-faststream"
INTERVAL_MS = 200
TTL_MS = 1_000
NAMES = ("reader", "crash", "drain", "drained")
RUN = f"rp-it-{uuid.uuid4().hex[:8]}-"
RABBITMQ_URL = f"amqp://guest:guest@127.0.0.1:{RABBITMQ_PORT}/"
NATS_URL = f"nats://127.0.0.1:{NATS_PORT}"
HOST_PID = object()
"""Stands for the worker's ``host:pid`` in an expected row."""


@dataclass(frozen=True)
class Kind:
    """One broker: how to reach it and which rows its two subscribers get."""

    name: str
    group_a: str
    group_b: str
    consumer_a: object  # HOST_PID, or the Redis stream's consumer name
    run: str  # prefix of the queue names: this run's and this broker's own

    def queue(self, worker: str, part: str) -> str:
        return f"{self.run}{worker}-{part}"

    def expected(self, worker: str, host_pid: str) -> set[tuple[str, str, str]]:
        consumer_a = host_pid if self.consumer_a is HOST_PID else f"{worker}-consumer"
        return {
            (self.queue(worker, "a"), self.group_a, consumer_a),
            (self.queue(worker, "b"), self.group_b, host_pid),
        }


KINDS = {
    "redis": Kind("redis", "rp-stream-group", DEFAULT_GROUP, "stream consumer", f"{RUN}redis-"),
    "rabbit": Kind("rabbit", DEFAULT_GROUP, DEFAULT_GROUP, HOST_PID, f"{RUN}rabbit-"),
    "nats": Kind("nats", "rp-workers", "rp-workers", HOST_PID, f"{RUN}nats-"),
}


@pytest.fixture(scope="module", params=list(KINDS))
def kind(request: pytest.FixtureRequest) -> Kind:
    kind: Kind = KINDS[request.param]
    if kind.name == "rabbit":
        require_broker(
            "RabbitMQ", listening(RABBITMQ_PORT), f"nothing on 127.0.0.1:{RABBITMQ_PORT}"
        )
    if kind.name == "nats":
        require_broker("NATS", listening(NATS_PORT), f"nothing listens on 127.0.0.1:{NATS_PORT}")
    return kind


@pytest.fixture(scope="module")
def faststream_broker_url(kind: Kind, broker_url: str) -> str:
    return {"redis": broker_url, "rabbit": RABBITMQ_URL, "nats": NATS_URL}[kind.name]


@pytest.fixture(scope="module")
def workers(  # the shared fixture's, for the broker of this module's `kind`
    kind: Kind,
    faststream_broker_url: str,
    broker_url: str,
    presence_url: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, WorkerProcess]]:
    argv = [python_tool("faststream"), "run", "faststream_app:app"]
    env = worker_env(faststream_broker_url, presence_url, PREFIX, INTERVAL_MS)
    env.update(RP_BROKER=kind.name, RP_RUN=kind.run, RP_CONTROL_URL=broker_url)
    specs = {name: (argv, {**env, "RP_NAME": name}) for name in NAMES}
    with started_workers(specs, logs=tmp_path_factory.mktemp(f"fs-{kind.name}")) as started:
        yield started


def host_pid(worker: WorkerProcess) -> str:
    return f"{socket.gethostname()}:{worker.pid}"


def rows_of(
    presence: Presence, kind: Kind, name: str
) -> dict[tuple[str, str, str], ConsumerPresence]:
    queues = {kind.queue(name, "a"), kind.queue(name, "b")}
    return {
        (row.queue, row.group, row.consumer): row for row in presence.rows() if row.queue in queues
    }


def wait_rows(presence: Presence, kind: Kind, worker: WorkerProcess, name: str) -> None:
    expected = kind.expected(name, host_pid(worker))
    wait_active(
        lambda: rows_of(presence, kind, name),
        expected,
        worker=worker,
        what=f"{kind.name} rows of {name}: {sorted(expected)}",
    )


def publish(kind: Kind, url: str, queue: str, token: str) -> None:
    async def send() -> None:
        if kind.name == "redis":
            from faststream.redis import RedisBroker

            async with RedisBroker(url) as broker:
                if queue.endswith("-a"):
                    await broker.publish(token, stream=queue)
                else:
                    await broker.publish(token, list=queue)
        elif kind.name == "rabbit":
            from faststream.rabbit import RabbitBroker

            async with RabbitBroker(url) as broker:
                await broker.publish(token, queue=queue)
        else:
            from faststream.nats import NatsBroker

            async with NatsBroker(url) as broker:
                await broker.publish(token, queue)

    asyncio.run(send())


def test_a_row_per_subscriber_kept_active(
    kind: Kind, workers: dict[str, WorkerProcess], presence: Presence
) -> None:
    worker = workers["reader"]
    wait_rows(presence, kind, worker, "reader")
    wait_refreshed(lambda: rows_of(presence, kind, "reader"))
    rows = rows_of(presence, kind, "reader").values()
    assert all(row.lease_count == 0 and not row.draining for row in rows)
    # The Redis list subscriber is a concurrent one (max_workers=2); the others have no
    # concurrency setting a middleware can read.
    capacities = {row.queue: row.capacity for row in rows}
    queue_b = kind.queue("reader", "b")
    expected_b = 2 if kind.name == "redis" else None
    assert capacities == {kind.queue("reader", "a"): None, queue_b: expected_b}


def test_lease_count_follows_a_long_handler(
    kind: Kind,
    workers: dict[str, WorkerProcess],
    presence: Presence,
    held: HeldTasks,
    faststream_broker_url: str,
) -> None:
    worker = workers["reader"]
    wait_rows(presence, kind, worker, "reader")
    queue_a = kind.queue("reader", "a")

    def leases() -> dict[str, int]:
        return {q: row.lease_count for (q, _, _), row in rows_of(presence, kind, "reader").items()}

    token = HeldTasks.token()
    publish(kind, faststream_broker_url, queue_a, token)
    held.wait_started(token)
    wait_until(lambda: leases().get(queue_a) == 1, timeout_s=20, what="a lease on queue a")
    assert leases()[kind.queue("reader", "b")] == 0

    def progress() -> dict[str, int | None]:
        rows = rows_of(presence, kind, "reader").items()
        return {q: row.last_progress_ns for (q, _, _), row in rows}

    before = progress()
    released_ns = presence.server_now_ns()
    held.release(token)
    wait_until(lambda: leases().get(queue_a) == 0, timeout_s=20, what="the lease to go")

    def row_a() -> ConsumerPresence | None:
        rows = rows_of(presence, kind, "reader")
        return next((row for (q, _, _), row in rows.items() if q == queue_a), None)

    # The handled message is progress on its subscriber's row, not on the other's.
    wait_progress(row_a, released_ns, what="progress on a")
    assert progress()[kind.queue("reader", "b")] == before[kind.queue("reader", "b")]


def test_sigkill_goes_stale_then_expired_on_time(
    kind: Kind, workers: dict[str, WorkerProcess], presence: Presence
) -> None:
    worker = workers["crash"]
    wait_rows(presence, kind, worker, "crash")
    expected = kind.expected("crash", host_pid(worker))
    rows = {consumer: {q for q, _, c in expected if c == consumer} for _, _, consumer in expected}
    check_killed(presence, worker.kill, rows, interval_ms=INTERVAL_MS, ttl_ms=TTL_MS)


def test_sigterm_says_draining_then_deregisters_every_row(
    kind: Kind, workers: dict[str, WorkerProcess], presence: Presence
) -> None:
    worker = workers["drain"]
    wait_rows(presence, kind, worker, "drain")
    cursor = event_cursor(presence)
    assert worker.terminate(30) == 0, worker.log_tail()
    assert rows_of(presence, kind, "drain") == {}
    for _, _, consumer in kind.expected("drain", host_pid(worker)):
        kinds = events_since(presence, cursor, consumer)
        assert kinds, consumer
        assert all(said_draining_then_left(k) for k in kinds.values()), kinds


def test_a_drain_request_stops_that_subscriber_alone(
    kind: Kind,
    workers: dict[str, WorkerProcess],
    presence: Presence,
    held: HeldTasks,
    faststream_broker_url: str,
) -> None:
    worker = workers["drained"]
    wait_rows(presence, kind, worker, "drained")
    queue_a, queue_b = kind.queue("drained", "a"), kind.queue("drained", "b")
    keys = rows_of(presence, kind, "drained")
    ((_, group, consumer),) = [key for key in keys if key[0] == queue_b]
    cursor = event_cursor(presence)
    assert presence.registry.request_drain(queue_b, group, consumer)
    wait_until(
        lambda: {key[0] for key in rows_of(presence, kind, "drained")} == {queue_a},
        timeout_s=20,
        what="the drained subscriber's row to leave",
        alive=worker.check_alive,
        seen=lambda: rows_of(presence, kind, "drained"),
    )
    assert events_since(presence, cursor, consumer)[queue_b] == [
        "drain_requested",
        "draining",
        "left",
    ]
    # The other subscriber still reads: a message to it is handled.
    token = HeldTasks.token()
    publish(kind, faststream_broker_url, queue_a, token)
    held.wait_started(token)
    held.release(token)
    ((row_a),) = rows_of(presence, kind, "drained").values()
    assert (row_a.queue, row_a.draining) == (queue_a, False)


def test_middleware_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="interval_ms must be in"):
        PresenceMiddleware(url="redis://h:6379/0", interval_ms=-1)
    with pytest.raises(ValueError, match="prefix"):
        PresenceMiddleware(url="redis://h:6379/0", prefix="")
    presence = PresenceMiddleware(url="redis://h:6379/0")
    with pytest.raises(TypeError, match="app must be a FastStream application"):
        presence.install(object())  # type: ignore[arg-type]


def test_an_absent_broker_skips_locally_and_fails_under_the_ci_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # bound once, never listened on: nothing accepts there
    assert not listening(port)
    monkeypatch.delenv(REQUIRE_BROKERS_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="RabbitMQ is not reachable"):
        require_broker("RabbitMQ", listening(port), f"nothing listens on 127.0.0.1:{port}")
    monkeypatch.setenv(REQUIRE_BROKERS_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match=f"{REQUIRE_BROKERS_ENV}=1 forbids skipping"):
        require_broker("RabbitMQ", listening(port), f"nothing listens on 127.0.0.1:{port}")
    require_broker("RabbitMQ", True, "")  # present: neither

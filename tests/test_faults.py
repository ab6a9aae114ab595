"""Faults on real servers: crash and restart with and without AOF, lost scripts, lost links."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from servers import MakeRedisServer, RedisServer
from waiting import wait_until

from redis_presence import (
    BeatReply,
    PresenceConnectionError,
    PresenceError,
    PresenceState,
    RedisPresenceRegistry,
)
from redis_presence.scripts import SCRIPT_NAMES, script

MS = 1_000_000
T0 = 1_796_000_000_123_456_000
WAIT_S = 10.0

pytestmark = pytest.mark.timeout(60)


def fast_client(server: RedisServer, **kwargs: Any) -> redis.Redis:
    """A client that fails at once instead of retrying (redis-py retries by default)."""
    options: dict[str, Any] = {
        "retry": Retry(NoBackoff(), 0),
        "socket_connect_timeout": 2,
        "socket_timeout": 2,
    }
    return server.client(**(options | kwargs))


@pytest.fixture
def aof_server(make_redis_server: MakeRedisServer) -> RedisServer:
    return make_redis_server(appendonly=True)


def server_time_ns(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return (int(seconds) * 1_000_000 + int(micros)) * 1_000


def wait_until_fsynced(client: redis.Redis, acknowledged_ns: int) -> None:
    """Wait until the server's clock is a second past `acknowledged_ns` and the AOF is written
    and synced (``appendfsync everysec`` syncs once a second)."""

    def synced() -> bool:
        info = client.info("persistence")
        return (
            server_time_ns(client) > acknowledged_ns + 1_000 * MS
            and info["aof_last_write_status"] == "ok"
            and int(info.get("aof_buffer_length", 0)) == 0
            and int(info.get("aof_pending_bio_fsync", 0)) == 0
        )

    wait_until(
        synced,
        timeout_s=WAIT_S,
        what="the AOF to be written and a second to pass on the server's clock",
    )


def test_acknowledged_heartbeats_survive_a_crash_with_aof(aof_server: RedisServer) -> None:
    with fast_client(aof_server) as client:
        assert client.config_get("appendfsync") == {"appendfsync": "everysec"}
        registry = RedisPresenceRegistry(client)
        registry.heartbeat("orders", "billing", "w1", 5, now_ns=T0 - 40_000 * MS)
        registry.heartbeat("orders", "billing", "w1", 7, now_ns=T0 - 3)  # registered earlier
        registry.heartbeat("orders", "billing", "w2", 2**32 - 1, now_ns=T0 - 45_000 * MS)
        registry.heartbeat("orders", "audit", "w3", 0, now_ns=T0 - 90_000 * MS)
        registry.heartbeat_many([("mail", "send", f"m{i}", i) for i in range(50)], now_ns=T0)
        registry.heartbeat("mail", "send", "server-clock", 1)  # stamped by Redis' TIME
        registry.deregister("mail", "send", "m49")
        acknowledged = server_time_ns(client)
        before = registry.snapshot(now_ns=T0)
        counts = registry.count_active_by_group(now_ns=T0)
        wait_until_fsynced(client, acknowledged)

    aof_server.kill()  # SIGKILL: no shutdown, no final flush
    aof_server.restart()

    with fast_client(aof_server) as client:
        registry = RedisPresenceRegistry(client)
        after = registry.snapshot(now_ns=T0)
        assert after == before
        assert len(after) == 53
        rows = {row.consumer: row for row in after}
        assert (rows["w1"].registered_at_ns, rows["w1"].last_heartbeat_ns) == (
            T0 - 40_000 * MS,
            T0 - 3,
        )
        assert rows["w1"].lease_count == 7
        assert rows["w2"].lease_count == 2**32 - 1
        assert rows["w3"].state is PresenceState.EXPIRED
        assert "m49" not in rows
        assert registry.count_active_by_group(now_ns=T0) == counts
        assert registry.prune_expired(now_ns=T0) == 1  # scripts reload after the restart


def test_without_persistence_a_crash_forgets_everything(
    make_redis_server: MakeRedisServer,
) -> None:
    """What the README says is lost without AOF: every row, until the next beat."""
    server = make_redis_server()  # appendonly no, save ""
    with fast_client(server) as client:
        registry = RedisPresenceRegistry(client)
        registry.heartbeat("orders", "billing", "w1", 3, now_ns=T0)
    server.kill()
    server.restart()
    with fast_client(server) as client:
        registry = RedisPresenceRegistry(client)
        assert registry.snapshot(now_ns=T0) == []
        assert registry.count_active_by_group(now_ns=T0) == {}
        registry.heartbeat("orders", "billing", "w1", 3, now_ns=T0 + MS)
        (row,) = registry.snapshot(now_ns=T0 + MS)
        assert row.registered_at_ns == T0 + MS  # the registration time is lost


def test_every_operation_works_on_its_next_call_after_a_restart(
    aof_server: RedisServer,
) -> None:
    """A restart empties the script cache and breaks every pooled connection; each operation
    (the read-only ones too) recovers on its very next call, with no retry configured."""
    client = fast_client(aof_server)
    registry = RedisPresenceRegistry(client)
    read_only = RedisPresenceRegistry(client, read_only=True)
    registry.heartbeat("orders", "billing", "old", now_ns=T0 - 90_000 * MS)
    registry.heartbeat("orders", "billing", "w1", 1, now_ns=T0)
    shas = [script(name).sha for name in SCRIPT_NAMES]
    operations: list[tuple[str, Callable[[], object], object]] = [
        (
            "heartbeat",
            lambda: registry.heartbeat("orders", "billing", "w2", now_ns=T0),
            BeatReply(drain_requested=False),
        ),
        ("heartbeat_many", lambda: registry.heartbeat_many([("q", "g", "c", 0)], T0), 1),
        ("snapshot", lambda: len(registry.snapshot(now_ns=T0)), 4),
        ("count", lambda: registry.count_active_by_group(now_ns=T0)[("orders", "billing")], 2),
        ("len", lambda: len(registry), 4),
        ("read-only snapshot", lambda: len(read_only.snapshot(now_ns=T0)), 4),
        ("read-only count", lambda: read_only.count_active_by_group(now_ns=T0)[("q", "g")], 1),
        ("prune_expired", lambda: registry.prune_expired(now_ns=T0), 1),
        ("deregister", lambda: registry.deregister("q", "g", "c"), True),
    ]
    try:
        for name, operation, expected in operations:
            aof_server.restart()
            with aof_server.client() as admin:
                assert admin.script_exists(*shas) == [False] * len(shas)
            assert operation() == expected, name
        assert [row.consumer for row in registry.snapshot(now_ns=T0)] == ["w1", "w2"]
    finally:
        client.close()


class HeartbeatStream(threading.Thread):
    """A broker's loop: beat one consumer as fast as possible, recording every outcome."""

    def __init__(self, registry: RedisPresenceRegistry) -> None:
        super().__init__(daemon=True)
        self.registry = registry
        self.stop = threading.Event()
        self.acked = 0
        self.last_acked_lease = -1
        self.errors: list[BaseException] = []

    def run(self) -> None:
        lease = 0
        while not self.stop.is_set():
            lease += 1
            try:
                self.registry.heartbeat("orders", "billing", "streamer", lease, now_ns=T0)
            except BaseException as exc:  # anything but PresenceConnectionError fails the test
                self.errors.append(exc)
                time.sleep(0.005)
                continue
            self.acked += 1
            self.last_acked_lease = lease


def test_sigkill_mid_stream_raises_connection_error_then_recovers(
    aof_server: RedisServer,
) -> None:
    client = fast_client(aof_server)
    stream = HeartbeatStream(RedisPresenceRegistry(client))
    stream.start()
    try:
        wait_until(lambda: stream.acked >= 50, timeout_s=WAIT_S, what="the stream to get going")
        aof_server.kill()
        wait_until(
            lambda: len(stream.errors) >= 3,
            timeout_s=WAIT_S,
            what="the stream to see the server gone",
        )
        acked_while_down = stream.acked
        aof_server.restart()
        wait_until(
            lambda: stream.acked >= acked_while_down + 50,
            timeout_s=WAIT_S,
            what="the stream to recover",
        )
    finally:
        stream.stop.set()
        stream.join(WAIT_S)
    assert not stream.is_alive()
    assert stream.errors, "the kill went unnoticed"
    wrong = [e for e in stream.errors if not isinstance(e, PresenceConnectionError)]
    assert not wrong, f"expected only PresenceConnectionError, got {wrong[:3]!r}"
    assert all("cannot reach Redis" in str(e) for e in stream.errors)
    with aof_server.client() as check:
        (row,) = RedisPresenceRegistry(check).snapshot(now_ns=T0)
    assert row.lease_count == stream.last_acked_lease  # the last acknowledged beat is stored
    client.close()


def test_every_operation_raises_connection_error_while_redis_is_down(
    make_redis_server: MakeRedisServer,
) -> None:
    server = make_redis_server()
    client = fast_client(server)
    registry = RedisPresenceRegistry(client)
    read_only = RedisPresenceRegistry(client, read_only=True)
    registry.heartbeat("orders", "billing", "w1", now_ns=T0)
    server.kill()
    operations: dict[str, Callable[[], object]] = {
        "heartbeat": lambda: registry.heartbeat("orders", "billing", "w1"),
        "heartbeat_many": lambda: registry.heartbeat_many([("q", "g", "c", 0)]),
        "snapshot": registry.snapshot,
        "count": registry.count_active_by_group,
        "prune": registry.prune_expired,
        "deregister": lambda: registry.deregister("orders", "billing", "w1"),
        "len": lambda: len(registry),
        "read-only snapshot": read_only.snapshot,
    }
    for name, operation in operations.items():
        with pytest.raises(PresenceConnectionError, match="cannot reach Redis") as info:
            operation()
        assert isinstance(info.value, PresenceError), name
        assert isinstance(info.value.__cause__, redis.ConnectionError), name
    server.restart()
    registry.heartbeat("orders", "billing", "w1", now_ns=T0)
    assert len(registry) == 1
    client.close()


@pytest.fixture
def stopped_later(request: pytest.FixtureRequest) -> Iterator[list[int]]:
    """Pids to SIGCONT at teardown, so a failed test never leaves a frozen server behind."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        os.kill(pid, signal.SIGCONT)


def test_a_frozen_server_times_out_as_connection_error(
    make_redis_server: MakeRedisServer, stopped_later: list[int]
) -> None:
    server = make_redis_server()
    client = fast_client(server, socket_timeout=0.3)
    registry = RedisPresenceRegistry(client)
    registry.heartbeat("orders", "billing", "w1", now_ns=T0)
    assert server.pid is not None
    stopped_later.append(server.pid)
    os.kill(server.pid, signal.SIGSTOP)  # alive, listening, never answering
    started = time.monotonic()
    with pytest.raises(PresenceConnectionError, match=r"(?i)timeout|timed out") as info:
        registry.heartbeat("orders", "billing", "w1", now_ns=T0 + MS)
    assert time.monotonic() - started < 5
    assert isinstance(info.value.__cause__, redis.TimeoutError)
    os.kill(server.pid, signal.SIGCONT)
    registry.heartbeat("orders", "billing", "w1", 2, now_ns=T0 + 2 * MS)
    (row,) = registry.snapshot(now_ns=T0 + 2 * MS)
    assert row.lease_count == 2
    client.close()

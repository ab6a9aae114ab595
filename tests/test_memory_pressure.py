"""Memory pressure (issue 16, item 3), on real servers started with a small ``maxmemory``.

Under ``noeviction`` a full server refuses every write that needs memory (``OOM``) and
serves every read: each read of the library and the CLI still answers, each write raises
`PresenceOutOfMemoryError` (CLI exit 7) and changes nothing. Under an ``allkeys-*`` policy,
which may evict any key, every registry logs one warning when it finds the policy.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
from backends import dump
from binaries import DEBIAN_REDIS, VERSION_MATRIX, ServerBuild, need_binary
from cli_invoke import invoke, one_error_line
from clusters import RedisClusterProcesses
from conftest import RUN_COUNTS
from redis.backoff import NoBackoff
from redis.retry import Retry
from servers import MakeRedisServer, RedisServer
from test_security import ACL_BROKER, BROKER_PASSWORD, BROKER_USER

from redis_presence import (
    AsyncRedisPresenceRegistry,
    PresenceError,
    PresenceOutOfMemoryError,
    PresenceReporter,
    PresenceState,
    RedisPresenceRegistry,
)
from redis_presence.plans import Limits

MS = 1_000_000
T0 = 1_796_000_000_123_456_000
MAXMEMORY = "4mb"
BALLAST_STEP = 256 * 1024

pytestmark = pytest.mark.timeout(60)


def no_retry(server: RedisServer, **kwargs: Any) -> redis.Redis:
    return server.client(retry=Retry(NoBackoff(), 0), socket_timeout=5, **kwargs)


def fill_memory(client: redis.Redis) -> int:
    """Grow a ballast key until the server refuses the next write (OOM); returns its size."""
    size = 0
    while True:
        try:
            client.setrange("ballast", size, "x")
        except redis.exceptions.OutOfMemoryError:
            return size
        size += BALLAST_STEP
        assert size < 64 * 1024 * 1024, "the server never ran out of memory"


def seed(registry: RedisPresenceRegistry) -> None:
    """Active, stale and expired consumers in several groups (one larger than a page)."""
    registry.heartbeat_many(
        [
            (q, g, f"w{i}", i)
            for q in ("orders", "mail")
            for g in ("billing", "audit")
            for i in range(6)
        ],
        now_ns=T0,
    )
    registry.heartbeat("orders", "billing", "stale", 1, now_ns=T0 - 45_000 * MS)
    registry.heartbeat("mail", "audit", "expired", 2, now_ns=T0 - 90_000 * MS)


def out_of_memory(server: RedisServer) -> None:
    with no_retry(server) as client, pytest.raises(redis.exceptions.OutOfMemoryError):
        client.set("probe", "x")


@pytest.fixture(scope="module")
def full_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One server for the module, with presence in it, then filled to its maxmemory; the
    tests here only read or try writes that it refuses, so its state never changes."""
    need_binary("redis-server")
    args = ["--maxmemory", MAXMEMORY, "--maxmemory-policy", "noeviction"]
    with RedisServer(dir=tmp_path_factory.mktemp("redis-full"), extra_args=args) as server:
        with no_retry(server) as client:
            seed(RedisPresenceRegistry(client))
            fill_memory(client)
        yield server


@pytest.fixture
def full(full_server: RedisServer) -> Iterator[redis.Redis]:
    """A client of the full server, checked to be out of memory right now."""
    out_of_memory(full_server)
    with no_retry(full_server) as client:
        yield client


EXPECTED_ROWS = 26
EXPECTED_COUNTS = {
    ("mail", "audit"): 6,
    ("mail", "billing"): 6,
    ("orders", "audit"): 6,
    ("orders", "billing"): 6,
}


def test_every_read_works_while_redis_is_out_of_memory(full: redis.Redis) -> None:
    small = Limits(groups=1, consumers=2, rows=3)  # every page, HSCAN and window boundary
    for registry in (
        RedisPresenceRegistry(full),
        RedisPresenceRegistry(full, read_only=True),
        RedisPresenceRegistry(full, limits=small),
    ):
        rows = registry.snapshot(now_ns=T0)
        assert len(rows) == EXPECTED_ROWS
        states = {row.consumer: row.state for row in rows if not row.consumer.startswith("w")}
        assert states == {"stale": PresenceState.STALE, "expired": PresenceState.EXPIRED}
        assert sorted(registry.iter_snapshot(now_ns=T0)) == rows
        assert registry.snapshot(now_ns=T0, queue="mail", group="audit") == [
            row for row in rows if (row.queue, row.group) == ("mail", "audit")
        ]
        assert registry.count_active_by_group(now_ns=T0) == EXPECTED_COUNTS
        assert registry.count_active_by_group(now_ns=T0, queue="orders") == {
            k: v for k, v in EXPECTED_COUNTS.items() if k[0] == "orders"
        }
        assert registry.count_active("orders", "billing", now_ns=T0) == 6
        assert len(registry) == EXPECTED_ROWS
        assert len(registry.snapshot()) == EXPECTED_ROWS  # the server's clock
        RUN_COUNTS["memory pressure: reads answered by a server out of memory"] += 8


def test_async_reads_work_while_redis_is_out_of_memory(full_server: RedisServer) -> None:
    out_of_memory(full_server)

    async def read() -> tuple[int, int, dict[tuple[str, str], int], int]:
        client = redis.asyncio.Redis(host=full_server.host, port=full_server.port)
        async with AsyncRedisPresenceRegistry(client) as registry:
            rows = await registry.snapshot(now_ns=T0)
            streamed = [row async for row in registry.iter_snapshot(now_ns=T0)]
            counts = await registry.count_active_by_group(now_ns=T0)
            size = await registry.size()
        await client.aclose()
        return len(rows), len(streamed), counts, size

    assert asyncio.run(read()) == (EXPECTED_ROWS, EXPECTED_ROWS, EXPECTED_COUNTS, EXPECTED_ROWS)
    RUN_COUNTS["memory pressure: reads answered by a server out of memory"] += 4


def test_cli_reads_work_while_redis_is_out_of_memory(full_server: RedisServer) -> None:
    out_of_memory(full_server)
    at = ["--url", full_server.url, "--now-ns", str(T0)]
    listed = invoke([*at, "ls", "--format", "json"])
    assert listed.exit_code == 0, listed.output
    assert len(json.loads(listed.stdout)) == EXPECTED_ROWS
    table = invoke([*at, "ls", "--state", "stale"])
    assert table.exit_code == 0, table.output
    assert "stale" in table.stdout
    counts = invoke([*at, "counts", "--format", "json"])
    assert counts.exit_code == 0, counts.output
    assert {(c["queue"], c["group"]): c["active"] for c in json.loads(counts.stdout)} == (
        EXPECTED_COUNTS
    )
    watch = invoke([*at, "watch", "--iterations", "1", "--interval", "0.1"])
    assert watch.exit_code == 0, watch.output
    assert "expired" in watch.stdout
    assert watch.stderr == ""
    dry = invoke([*at, "prune", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "would prune 1 expired" in dry.stdout
    RUN_COUNTS["memory pressure: reads answered by a server out of memory"] += 5


def test_every_write_is_refused_as_out_of_memory_and_changes_nothing(full: redis.Redis) -> None:
    registry = RedisPresenceRegistry(full)
    before = dump(full)
    writes: dict[str, Callable[[], object]] = {
        "heartbeat (new consumer)": lambda: registry.heartbeat("orders", "billing", "new", 1, T0),
        "heartbeat (known consumer)": lambda: registry.heartbeat("orders", "billing", "w1", 9, T0),
        "heartbeat (server clock)": lambda: registry.heartbeat("orders", "billing", "w1", 9),
        "heartbeat (new group)": lambda: registry.heartbeat("new", "group", "w1", 0, T0),
        "heartbeat_many": lambda: registry.heartbeat_many([("orders", "audit", "x", 1)], T0),
        "heartbeat_many of 1,500 (two calls)": lambda: registry.heartbeat_many(
            [("orders", "billing", f"n{i}", 0) for i in range(1_500)], T0
        ),
    }
    for name, write in writes.items():
        with pytest.raises(PresenceOutOfMemoryError) as info:
            write()
        assert isinstance(info.value, PresenceError), name
        message = str(info.value)
        assert "out of memory" in message, name
        assert "nothing was written" in message, name
        assert isinstance(info.value.__cause__, redis.exceptions.OutOfMemoryError), name
        assert dump(full) == before, name
        RUN_COUNTS[
            "memory pressure: writes refused as PresenceOutOfMemoryError, store unchanged"
        ] += 1


def test_a_reporter_keeps_its_beats_while_redis_is_out_of_memory(full: redis.Redis) -> None:
    before = dump(full)
    with PresenceReporter(RedisPresenceRegistry(full), interval_ms=3_600_000) as reporter:
        reporter.beat("orders", "billing", "w1", 3)
        with pytest.raises(PresenceOutOfMemoryError):
            reporter.flush()
        assert reporter.pending == 1  # kept for the next attempt
        assert dump(full) == before
        reporter.deregister("orders", "billing", "w1")  # what close() would write: nothing
    RUN_COUNTS["memory pressure: writes refused as PresenceOutOfMemoryError, store unchanged"] += 1


def test_an_async_write_is_refused_as_out_of_memory(full_server: RedisServer) -> None:
    out_of_memory(full_server)

    async def beat() -> None:
        client = redis.asyncio.Redis(host=full_server.host, port=full_server.port)
        try:
            await AsyncRedisPresenceRegistry(client).heartbeat("orders", "billing", "x", 0, T0)
        finally:
            await client.aclose()

    with pytest.raises(PresenceOutOfMemoryError, match="out of memory"):
        asyncio.run(beat())
    RUN_COUNTS["memory pressure: writes refused as PresenceOutOfMemoryError, store unchanged"] += 1


def test_cli_write_out_of_memory_is_one_line_and_exit_7(full_server: RedisServer) -> None:
    out_of_memory(full_server)
    result = invoke(["--url", full_server.url, "heartbeat", "orders", "billing", "new"])
    line = one_error_line(result)
    assert result.exit_code == 7
    assert line.startswith("Error: Redis is out of memory and refused the write")
    assert "reads still work" in line
    RUN_COUNTS["memory pressure: writes refused as PresenceOutOfMemoryError, store unchanged"] += 1


def test_deregister_and_prune_still_work_out_of_memory_and_free_it(
    make_redis_server: MakeRedisServer,
) -> None:
    """Both only remove (ZREM, HDEL, DEL are not refused under OOM), so an operator can
    still clean up a full server."""
    server = make_redis_server(extra_args=["--maxmemory", MAXMEMORY])
    with no_retry(server) as client:
        registry = RedisPresenceRegistry(client)
        seed(registry)
        fill_memory(client)
        out_of_memory(server)
        assert registry.deregister("orders", "billing", "w1") is True
        assert registry.prune_expired(now_ns=T0) == 1
        assert len(registry) == EXPECTED_ROWS - 2
        with pytest.raises(PresenceOutOfMemoryError):
            registry.heartbeat("orders", "billing", "w1", now_ns=T0)
        client.delete("ballast")
        registry.heartbeat("orders", "billing", "w1", now_ns=T0)  # memory is back
        assert len(registry) == EXPECTED_ROWS - 1


# -- an evicting policy -------------------------------------------------------------------


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "redis_presence" and r.levelno == logging.WARNING
    ]


def calls(client: redis.Redis, *commands: str) -> list[int]:
    """How often each command ran (read in one INFO, which counts itself only afterwards)."""
    stats = client.info("commandstats")
    return [int(stats.get(f"cmdstat_{command}", {}).get("calls", 0)) for command in commands]


@pytest.fixture
def evicting(make_redis_server: MakeRedisServer) -> RedisServer:
    return make_redis_server(
        extra_args=["--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"]
    )


def test_a_registry_warns_once_of_an_evicting_policy(
    evicting: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="redis_presence")
    with no_retry(evicting) as client:
        registry = RedisPresenceRegistry(client)
        assert warnings_of(caplog) == []  # checked lazily: nothing sent yet
        for i in range(50):
            registry.heartbeat("orders", "billing", f"w{i}", now_ns=T0)
        registry.snapshot(now_ns=T0)
        registry.count_active_by_group(now_ns=T0)
        (warning,) = warnings_of(caplog)
        assert "maxmemory-policy allkeys-lru" in warning
        assert f"{evicting.host}:{evicting.port}/0" in warning
        assert "noeviction" in warning
        assert "redis-presence doctor" in warning
        # One CONFIG GET for the registry's whole life; never one per heartbeat.
        assert calls(client, "config|get", "info") == [1, 0]
        RedisPresenceRegistry(client).heartbeat("orders", "billing", "w1", now_ns=T0)
        assert len(warnings_of(caplog)) == 2  # one per registry
    RUN_COUNTS["memory pressure: evicting policies found and warned of"] += 1


def test_an_async_registry_warns_once_of_an_evicting_policy(
    evicting: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="redis_presence")

    async def beat() -> None:
        client = redis.asyncio.Redis(host=evicting.host, port=evicting.port)
        async with AsyncRedisPresenceRegistry(client) as registry:
            await asyncio.gather(
                *(registry.heartbeat("orders", "billing", f"w{i}", now_ns=T0) for i in range(20))
            )
            assert await registry.size() == 20
        await client.aclose()

    asyncio.run(beat())
    (warning,) = warnings_of(caplog)
    assert "allkeys-lru" in warning
    RUN_COUNTS["memory pressure: evicting policies found and warned of"] += 1


def test_the_check_falls_back_to_info_and_stays_silent_without_either_right(
    evicting: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="redis_presence")
    with no_retry(evicting) as admin:
        admin.execute_command(*shlex.split(ACL_BROKER))
        admin.execute_command(*shlex.split(ACL_BROKER.replace(BROKER_USER, "with-info") + " +info"))
    # A broker may run neither CONFIG GET nor INFO: no check, no error, no warning.
    with no_retry(evicting, username=BROKER_USER, password=BROKER_PASSWORD) as client:
        broker = RedisPresenceRegistry(client)
        broker.heartbeat("orders", "billing", "w1", now_ns=T0)
        broker.heartbeat("orders", "billing", "w2", now_ns=T0)
        assert broker.deregister("orders", "billing", "w2") is True
        assert warnings_of(caplog) == []
    # With INFO (and still no CONFIG): found through INFO memory.
    with no_retry(evicting, username="with-info", password=BROKER_PASSWORD) as client:
        RedisPresenceRegistry(client).heartbeat("orders", "billing", "w1", now_ns=T0)
        (warning,) = warnings_of(caplog)
        assert "allkeys-lru" in warning
    RUN_COUNTS["memory pressure: evicting policies found and warned of"] += 1


@pytest.mark.parametrize("policy", ["noeviction", "volatile-lru", "volatile-ttl"])
def test_policies_that_keep_presence_keys_give_no_warning(
    make_redis_server: MakeRedisServer, caplog: pytest.LogCaptureFixture, policy: str
) -> None:
    caplog.set_level(logging.WARNING, logger="redis_presence")
    server = make_redis_server(extra_args=["--maxmemory", "64mb", "--maxmemory-policy", policy])
    with no_retry(server) as client:
        registry = RedisPresenceRegistry(client)
        registry.heartbeat("orders", "billing", "w1", now_ns=T0)
        assert calls(client, "config|get") == [1]  # it did look
    assert warnings_of(caplog) == []


def test_the_check_can_be_turned_off(
    evicting: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="redis_presence")
    with no_retry(evicting) as client:
        registry = RedisPresenceRegistry(client)
        registry.policy_check.due = False
        registry.heartbeat("orders", "billing", "w1", now_ns=T0)
        assert calls(client, "config|get") == [0]
    assert warnings_of(caplog) == []


def test_the_check_waits_for_an_answered_operation(
    make_redis_server: MakeRedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """While Redis is down no check is sent (no second failing round trip per call); the
    first operation Redis answers afterwards makes it."""
    caplog.set_level(logging.WARNING, logger="redis_presence")
    server = make_redis_server(
        extra_args=["--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lfu"]
    )
    with no_retry(server) as client:
        registry = RedisPresenceRegistry(client)
        server.kill()
        for _ in range(3):
            with pytest.raises(PresenceError):
                registry.heartbeat("orders", "billing", "w1", now_ns=T0)
        assert registry.policy_check.due
        server.restart()
        registry.heartbeat("orders", "billing", "w1", now_ns=T0)
        assert not registry.policy_check.due
    (warning,) = warnings_of(caplog)
    assert "allkeys-lfu" in warning


@pytest.mark.parametrize("build", [DEBIAN_REDIS, *VERSION_MATRIX], ids=lambda b: b.name)
def test_out_of_memory_on_each_server_of_the_version_matrix(
    build: ServerBuild, tmp_path: Path
) -> None:
    """The same answers from Redis 7.0, Redis 8 and Valkey 9 (README: Tested versions)."""
    args = ["--maxmemory", MAXMEMORY, "--maxmemory-policy", "noeviction"]
    with (
        RedisServer(dir=tmp_path, binary=build.need(), extra_args=args) as server,
        no_retry(server) as client,
    ):
        registry = RedisPresenceRegistry(client)
        seed(registry)
        fill_memory(client)
        before = dump(client)
        assert len(registry.snapshot(now_ns=T0)) == EXPECTED_ROWS
        assert registry.count_active_by_group(now_ns=T0) == EXPECTED_COUNTS
        assert len(registry) == EXPECTED_ROWS
        with pytest.raises(PresenceOutOfMemoryError):
            registry.heartbeat("orders", "billing", "new", 1, now_ns=T0)
        with pytest.raises(PresenceOutOfMemoryError):
            registry.heartbeat_many([("mail", "send", "x", 0)], now_ns=T0)
        assert dump(client) == before
        assert registry.prune_expired(now_ns=T0) == 1
    RUN_COUNTS["memory pressure: reads answered by a server out of memory"] += 3
    RUN_COUNTS["memory pressure: writes refused as PresenceOutOfMemoryError, store unchanged"] += 2


def test_a_cluster_registry_checks_the_node_of_its_index(
    redis_cluster: RedisClusterProcesses, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="redis_presence")
    client = redis_cluster.client()
    node = client.get_node_from_key("presence:groups")  # type: ignore[no-untyped-call]
    node_client = client.get_redis_connection(node)
    node_client.config_set("maxmemory-policy", "allkeys-lru")
    try:
        RedisPresenceRegistry(client).heartbeat("orders", "billing", "w1", now_ns=T0)
    finally:
        node_client.config_set("maxmemory-policy", "noeviction")  # the session's cluster
        client.close()
    (warning,) = warnings_of(caplog)
    assert (
        f"Redis at the Redis Cluster node {node.name} runs with maxmemory-policy allkeys-lru"
        in warning
    )
    RUN_COUNTS["memory pressure: evicting policies found and warned of"] += 1

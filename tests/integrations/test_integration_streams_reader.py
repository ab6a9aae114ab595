"""`StreamReader` / `AsyncStreamReader` on real redis-servers and a real Redis Cluster, and a
real consumer process (``apps/stream_consumer.py``) that polls, dies and stops.

Round trips are counted on the client's connections: a pipeline is one write of all its
commands (`send_packed_command`), a lone command one write too.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.cluster
from clusters import RedisClusterProcesses
from servers import RedisServer
from waiting import wait_until

from integrations.conftest import WorkerSpecs
from integrations.lifecycle import Presence, check_killed, wait_active
from integrations.workers import WorkerProcess
from redis_presence import AsyncRedisPresenceRegistry, ConsumerPresence, RedisPresenceRegistry
from redis_presence.integrations.streams import AsyncStreamReader, StreamReader
from redis_presence.keys import encode_name

pytestmark = pytest.mark.redis_server

PREFIX = "it-reader"
GROUP = "readers"
TTL_MS = 1_000
BLOCK_MS = 100


class Counting(redis.Connection):
    """A connection that counts its writes: one per command, one per pipeline."""

    writes = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        type(self).writes += 1
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call]


class AsyncCounting(redis.asyncio.Connection):
    writes = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        type(self).writes += 1
        await super().send_packed_command(command, check_health)


@pytest.fixture
def counted(redis_server: RedisServer, redis_url: str) -> Iterator[redis.Redis]:
    """A client of the (flushed) session server whose connections count their writes."""
    pool = redis.ConnectionPool(
        connection_class=type("Counted", (Counting,), {"writes": 0}),
        host=redis_server.host,
        port=redis_server.port,
    )
    client = redis.Redis(connection_pool=pool)
    client.xgroup_create("orders", GROUP, id="0", mkstream=True)
    try:
        yield client
    finally:
        client.close()


def writes(client: Any) -> int:
    """Writes so far on the connections of `client`'s pool."""
    return int(client.connection_pool.connection_class.writes)


def test_every_read_beats_in_the_same_round_trip_and_leases_follow_acks(
    counted: redis.Redis,
) -> None:
    registry = RedisPresenceRegistry(counted, prefix=PREFIX)
    reader = StreamReader(registry, "orders", GROUP, "c1", block_ms=0, ttl_ms=TTL_MS)
    reader.read()  # loads the heartbeat script once
    # A beat with progress is a call of heartbeat_many.lua: load it once too (the script
    # cache is the server's, so another prefix's beat does it).
    RedisPresenceRegistry(counted, prefix="warm-up").heartbeat("q", "g", "c", progressed=True)
    before = writes(counted)
    assert reader.read() == []  # an empty read: still a beat
    assert writes(counted) - before == 1
    (row,) = registry.snapshot(ttl_ms=TTL_MS)
    assert (row.queue, row.group, row.consumer, row.lease_count) == ("orders", GROUP, "c1", 0)
    assert row.state.value == "active"

    ids = [counted.xadd("orders", {"n": n}) for n in range(3)]
    before = writes(counted)
    entries = reader.read(count=10)
    assert writes(counted) - before == 1
    assert [entry_id for entry_id, _ in entries] == ids
    assert reader.lease_count == 3
    reader.read()  # this read's beat carries the 3 leases
    assert registry.snapshot()[0].lease_count == 3
    assert registry.snapshot()[0].last_progress_ns is None  # nothing acknowledged yet
    assert reader.ack(*ids[:2]) == 2
    assert reader.lease_count == 1
    acked_ns = registry.clock_ns()
    before = writes(counted)
    reader.read()  # this read's beat carries the leases and the progress of the acks
    assert writes(counted) - before == 1
    (row,) = registry.snapshot()
    assert row.lease_count == 1
    assert row.last_progress_ns is not None
    assert row.last_progress_ns >= acked_ns // 1000 * 1000
    progressed_ns = row.last_progress_ns
    reader.read()  # no ack since: no new progress
    assert registry.snapshot()[0].last_progress_ns == progressed_ns
    # Its own pending entries again (after a restart, or entries a reaper moved to it).
    assert [entry_id for entry_id, _ in reader.read(pending=True)] == ids[2:]
    assert reader.ack(ids[2]) == 1
    reader.read()
    assert registry.snapshot()[0].lease_count == 0
    # No XPENDING was ever sent for the leases.
    assert "cmdstat_xpending" not in counted.info("commandstats")
    reader.close()
    assert len(registry) == 0


def test_a_blocking_read_waits_and_the_block_rule_is_checked(counted: redis.Redis) -> None:
    registry = RedisPresenceRegistry(counted, prefix=PREFIX)
    reader = StreamReader(registry, "orders", GROUP, "c1", block_ms=BLOCK_MS, ttl_ms=TTL_MS)
    started = time.monotonic()
    assert reader.read() == []  # waited for entries that never came
    assert time.monotonic() - started >= BLOCK_MS / 1000
    with pytest.raises(ValueError, match=r"block_ms must be in \[0, .* = 500\]"):
        StreamReader(registry, "orders", GROUP, "c1", block_ms=501, ttl_ms=TTL_MS)
    with pytest.raises(ValueError, match=r"block_ms must be in \[0, .* = 200\]"):
        StreamReader(
            registry, "orders", GROUP, "c", block_ms=201, ttl_ms=TTL_MS, beat_interval_ms=300
        )
    with pytest.raises(ValueError, match=r"beat_interval_ms must be in \[0, ttl_ms // 2 = 500\)"):
        StreamReader(registry, "orders", GROUP, "c1", ttl_ms=TTL_MS, beat_interval_ms=500)
    with pytest.raises(ValueError, match="block_ms must be in"):
        reader.read(block_ms=-1)
    with pytest.raises(TypeError, match="block_ms must be an int"):
        reader.read(block_ms=True)
    with pytest.raises(ValueError, match="count must be a positive int"):
        reader.read(count=0)
    with pytest.raises(ValueError, match="consumer must be a non-empty string"):
        StreamReader(registry, "orders", GROUP, "")
    timed = RedisPresenceRegistry(redis.Redis(socket_timeout=1))  # never connects here
    with pytest.raises(ValueError, match=r"shorter than the client's socket_timeout \(1 s\)"):
        StreamReader(timed, "orders", GROUP, "c1", block_ms=1_000, ttl_ms=30_000)
    with pytest.raises(TypeError, match="registry must be a RedisPresenceRegistry"):
        StreamReader(object(), "orders", GROUP, "c1")  # type: ignore[arg-type]


def test_a_beat_interval_lets_hot_reads_skip_the_beat(counted: redis.Redis) -> None:
    registry = RedisPresenceRegistry(counted, prefix=PREFIX)
    interval_ms = 400
    reader = StreamReader(
        registry, "orders", GROUP, "c1", block_ms=0, ttl_ms=TTL_MS, beat_interval_ms=interval_ms
    )

    def beats() -> int:
        # A beat is an FCALL (EVALSHA without functions); the first one on a server without
        # the library fails once ("Function not found") before it is loaded: not a beat.
        stats = counted.info("commandstats")
        return sum(
            int(stats.get(f"cmdstat_{c}", {}).get("calls", 0))
            - int(stats.get(f"cmdstat_{c}", {}).get("failed_calls", 0))
            for c in ("fcall", "evalsha")
        )

    counted.config_resetstat()
    started = time.monotonic()
    reader.read()  # the first read always beats
    assert beats() == 1
    reader.read()
    reader.read()
    if time.monotonic() - started < interval_ms / 1000:  # a machine this slow proves nothing
        assert beats() == 1
    wait_until(lambda: reader.read() is not None and beats() == 2, timeout_s=10, what="a beat")
    assert time.monotonic() - started >= interval_ms / 1000
    (row,) = registry.snapshot(ttl_ms=TTL_MS)
    assert row.state.value == "active"


def test_the_async_reader_beats_in_the_same_round_trip(
    redis_server: RedisServer, redis_url: str
) -> None:
    async def scenario() -> None:
        pool = redis.asyncio.ConnectionPool(
            connection_class=type("Counted", (AsyncCounting,), {"writes": 0}),
            host=redis_server.host,
            port=redis_server.port,
        )
        client = redis.asyncio.Redis(connection_pool=pool)
        await client.xgroup_create("orders", GROUP, id="0", mkstream=True)
        registry = AsyncRedisPresenceRegistry(client, prefix=PREFIX)
        reader = AsyncStreamReader(registry, "orders", GROUP, "a1", block_ms=0, ttl_ms=TTL_MS)
        await reader.read()
        before = writes(client)
        assert await reader.read() == []
        assert writes(client) - before == 1
        entry_id = await client.xadd("orders", {"n": 1})
        assert [e for e, _ in await reader.read()] == [entry_id]
        await reader.read()
        (row,) = await registry.snapshot()
        assert (row.consumer, row.lease_count, row.state.value) == ("a1", 1, "active")
        assert await reader.ack(entry_id) == 1
        await reader.read()
        assert (await registry.snapshot())[0].lease_count == 0
        await reader.aclose()
        assert await registry.size() == 0
        await client.aclose()
        await pool.aclose()  # a pool we made ourselves: the client leaves it open

    asyncio.run(scenario())


@pytest.mark.slow
@pytest.mark.parametrize("where", ["same node", "different nodes"])
def test_on_a_cluster(
    redis_cluster: RedisClusterProcesses,
    cluster_client: redis.cluster.RedisCluster,
    where: str,
) -> None:
    def node(key: str) -> str:
        return str(cluster_client.get_node_from_key(key).name)  # type: ignore[no-untyped-call]

    def beat_key(stream: str) -> str:
        return f"{PREFIX}:{{{encode_name(stream)}}}:{GROUP}:hb"

    streams = (f"{{n{i}}}orders" for i in range(100))
    if where == "same node":  # no hash tag of its own: the stream shares presence's slot
        stream = "orders"
        assert node(stream) == node(beat_key(stream))
    else:
        stream = next(s for s in streams if node(s) != node(beat_key(s)))
    cluster_client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    entry_id = cluster_client.xadd(stream, {"n": 1})
    registry = RedisPresenceRegistry(cluster_client, prefix=PREFIX)
    reader = StreamReader(registry, stream, GROUP, "c1", block_ms=0, ttl_ms=TTL_MS)
    assert [e for e, _ in reader.read()] == [entry_id]
    assert reader.read() == []
    (row,) = registry.snapshot()
    assert (row.queue, row.consumer, row.lease_count) == (stream, "c1", 1)

    async def concurrently() -> None:
        client = redis_cluster.async_client()
        aregistry = AsyncRedisPresenceRegistry(client, prefix=PREFIX)
        areader = AsyncStreamReader(aregistry, stream, GROUP, "a1", block_ms=0, ttl_ms=TTL_MS)
        second = await client.xadd(stream, {"n": 2})
        assert [e for e, _ in await areader.read()] == [second]
        await areader.read()
        rows = {r.consumer: r.lease_count for r in await aregistry.snapshot()}
        assert rows == {"a1": 1, "c1": 1}
        await client.aclose()

    asyncio.run(concurrently())


# -- a real consumer process -------------------------------------------------------------


def worker_specs(broker_url: str, presence_url: str) -> WorkerSpecs:
    """Three consumer processes, each reading a stream of its own on the presence server."""
    argv = [sys.executable, "stream_consumer.py"]
    env = {
        "RP_PRESENCE_URL": presence_url,
        "RP_PREFIX": PREFIX,
        "RP_GROUP": GROUP,
        "RP_BLOCK_MS": str(BLOCK_MS),
        "RP_TTL_MS": str(TTL_MS),
    }
    return {
        name: (argv, {**env, "RP_STREAM": f"{name}-stream", "RP_CONSUMER": name})
        for name in ("poller", "crash", "drain")
    }


def wait_row(presence: Presence, consumer: WorkerProcess, name: str) -> None:
    def rows() -> dict[str, ConsumerPresence]:
        return {row.queue: row for row in presence.rows(consumer=name, ttl_ms=TTL_MS)}

    wait_active(rows, 1, worker=consumer, what=f"{name} to be active", timeout_s=30)


def test_a_consumer_polling_an_empty_stream_stays_active(
    workers: dict[str, WorkerProcess], presence: Presence
) -> None:
    process = workers["poller"]
    wait_row(presence, process, "poller")
    (row,) = presence.rows(consumer="poller", ttl_ms=TTL_MS)
    assert (row.queue, row.group) == ("poller-stream", GROUP)
    seen = row.last_heartbeat_ns
    for _ in range(5):  # every empty read beats again; it never goes stale

        def fresher(seen: int = seen) -> int | None:
            (now,) = presence.rows(consumer="poller", ttl_ms=TTL_MS)
            assert now.state.value == "active"
            return now.last_heartbeat_ns if now.last_heartbeat_ns > seen else None

        seen = wait_until(fresher, timeout_s=10, what="a fresher beat")
    assert presence.rows(consumer="poller")[0].lease_count == 0


def test_a_sigkilled_consumer_goes_stale_then_expired_on_time(
    workers: dict[str, WorkerProcess], presence: Presence
) -> None:
    process = workers["crash"]
    wait_row(presence, process, "crash")
    rows = {"crash": {"crash-stream"}}
    check_killed(presence, process.kill, rows, interval_ms=BLOCK_MS, ttl_ms=TTL_MS)


def test_a_stopped_consumer_deregisters(
    workers: dict[str, WorkerProcess], presence: Presence
) -> None:
    process = workers["drain"]
    wait_row(presence, process, "drain")
    assert process.terminate(30) == 0, process.log_tail()
    assert presence.rows(consumer="drain") == []

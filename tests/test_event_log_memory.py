"""A new queue's event log is compacted when its first entry creates it (`compact_log` in
lua/lib.lua): since Redis 7.0 a stream's first node preallocates 4 KB, most of what a queue
of one consumer costs (docs/performance.md, case 7). The scripts `COPY` the log to a scratch
key of its slot (`P:{Q}:events.copy`, not in KEYS) and `RENAME` the copy back, which keep
every field the event readers check for a trim (`XINFO STREAM`: length, entries-added,
max-deleted-entry-id, first entry, last-generated-id); a role that may not run either still
beats and logs the same entries, uncompacted, and leaves no scratch key behind.

Real servers: Debian's Redis 7, and Redis 8 and Valkey 9 of the version matrix; a
three-master cluster of each for the scratch key that is not in KEYS.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from binaries import REDIS_8, VALKEY_9, ServerBuild
from clusters import RedisClusterProcesses
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry
from servers import MakeRedisServer, RedisServer

from redis_presence import EventKind, RedisPresenceRegistry
from redis_presence.keys import EVENTS_COPY_SUFFIX, Keyspace

pytestmark = [pytest.mark.redis_server, pytest.mark.timeout(60)]

MS = 1_000_000
T0 = 1_796_000_000_123_456_000
KEYS = Keyspace("presence")
COMPACT_BELOW_B = 1_500
"""A compacted log of one entry weighs 700 to 820 bytes by `MEMORY USAGE` (280 on Valkey);
an uncompacted one 4,300 to 4,750."""
SERVERS = [
    pytest.param("redis_client", id="redis-7"),
    pytest.param("redis8_client", id="redis-8"),
    pytest.param("valkey9_client", id="valkey-9"),
]
WRITERS = [*SERVERS, pytest.param("cluster_client", id="cluster")]
"""On a Redis Cluster the scripts compact the same way; the caller lists the log."""
# The broker's line of an earlier release: no +copy +rename.
OLD_BROKER = (
    "~presence:* resetchannels -@all +evalsha +fcall +script|load +function|load +select +type "
    "+time +exists +get +hget +hset +zadd +zscore +zcard +zrange +set +zrem +hdel +del +xadd "
    "+pexpire"
)


def log_of(queue: str) -> str:
    return KEYS.group(queue, "g").events


def scratch_keys(client: redis.Redis | RedisCluster) -> list[bytes]:
    """Every scratch copy of a log left on the server (or on each node of a cluster)."""
    return list(client.scan_iter(match=f"*{EVENTS_COPY_SUFFIX}", count=1000))


def entry_ids(client: Any, key: str) -> list[Any]:
    """The ids of a log's entries, oldest first."""
    return [entry_id for entry_id, _ in client.xrange(key)]


def size(client: redis.Redis | RedisCluster, key: str) -> int:
    used = client.memory_usage(key, samples=0)
    assert used is not None, f"{key} is missing"
    return int(used)


def stream_info(client: redis.Redis, key: str) -> dict[str, Any]:
    """`XINFO STREAM` as the event readers use it, with the first entry's id."""
    info = client.xinfo_stream(key)
    fields = ("length", "entries-added", "max-deleted-entry-id", "recorded-first-entry-id")
    found = {name: info[name] for name in fields}
    found["last-generated-id"] = info["last-generated-id"]
    found["first-entry"] = info["first-entry"][0] if info["first-entry"] else None
    found["last-entry"] = info["last-entry"][0] if info["last-entry"] else None
    return found


def calls(client: redis.Redis, command: str) -> int:
    stats = client.info("commandstats").get(f"cmdstat_{command}")
    return int(stats["calls"]) if stats else 0


@pytest.fixture(params=SERVERS)
def client(request: pytest.FixtureRequest) -> redis.Redis:
    """A flushed client of each server of the matrix."""
    found: redis.Redis = request.getfixturevalue(request.param)
    return found


@pytest.fixture(params=WRITERS)
def writer(request: pytest.FixtureRequest) -> redis.Redis:
    """A flushed client of each server of the matrix, and of the session's cluster."""
    found: redis.Redis = request.getfixturevalue(request.param)
    return found


def test_a_new_queue_s_log_is_compacted_by_every_logging_script(writer: redis.Redis) -> None:
    client = writer
    registry = RedisPresenceRegistry(client)
    _, cursor = registry.changes(now_ns=T0 - MS)
    registry.heartbeat("one", "g", "w1", now_ns=T0)  # heartbeat.lua (or its function)
    registry.heartbeat_many([("many", "g", "w1", 0), ("many", "g", "w2", 0)], now_ns=T0)
    for queue in ("one", "many"):
        assert size(client, log_of(queue)) < COMPACT_BELOW_B, queue
        assert 0 < client.pttl(log_of(queue)) <= 86_400_000  # the TTL is set after RENAME
    # Later entries go into the compacted node, growing it by their own size.
    before = size(client, log_of("one"))
    registry.heartbeat("one", "g", "w2", now_ns=T0 + MS)
    assert registry.deregister("one", "g", "w1") is True
    assert before < size(client, log_of("one")) < COMPACT_BELOW_B
    events, _ = registry.changes(cursor, now_ns=T0 + 2 * MS)
    assert sorted((e.kind, e.queue, e.consumer) for e in events) == [
        (EventKind.JOINED, "many", "w1"),
        (EventKind.JOINED, "many", "w2"),
        (EventKind.JOINED, "one", "w1"),
        (EventKind.JOINED, "one", "w2"),
        (EventKind.LEFT, "one", "w1"),
    ]
    assert scratch_keys(client) == []


def node_calls(client: RedisCluster, command: str) -> int:
    stats = client.info("commandstats", target_nodes=client.PRIMARIES)
    return sum(int(s.get(f"cmdstat_{command}", {}).get("calls", 0)) for s in stats.values())


def _cluster_of(build: ServerBuild, factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    with RedisClusterProcesses(factory.mktemp(build.name), binary=build.need()) as processes:
        client = processes.client()
        try:
            yield client
        finally:
            client.close()


@pytest.fixture(scope="module")
def redis8_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """A client of a three-master Redis 8 cluster, for this module."""
    yield from _cluster_of(REDIS_8, tmp_path_factory)


@pytest.fixture(scope="module")
def valkey9_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """A client of a three-master Valkey 9 cluster, for this module."""
    yield from _cluster_of(VALKEY_9, tmp_path_factory)


@pytest.fixture(
    params=["cluster_client", "redis8_cluster", "valkey9_cluster"],
    ids=["redis-7", "redis-8", "valkey-9"],
)
def clustered(request: pytest.FixtureRequest) -> RedisCluster:
    """A flushed client of the session's Redis 7 cluster, or of a Redis 8 or Valkey 9 one."""
    found: RedisCluster = request.getfixturevalue(request.param)
    found.flushall(target_nodes=found.PRIMARIES)
    return found


@pytest.mark.parametrize("by", ["fcall", "evalsha"])
def test_a_script_may_copy_to_a_key_of_its_slot_not_in_keys_on_a_cluster(
    clustered: RedisCluster, by: str
) -> None:
    """The scratch copy is not declared in KEYS (a script cannot know beforehand that it will
    create the log): Redis Cluster (7 and 8) and Valkey's let a script, and a function, touch
    an undeclared key of the slot of its keys."""
    cluster_client = clustered
    registry = RedisPresenceRegistry(cluster_client)
    if by == "evalsha":
        registry.functions.refuse("this test sends the heartbeats by EVALSHA")
    cluster_client.config_resetstat(target_nodes=cluster_client.PRIMARIES)
    for queue in ("a", "b", "c"):
        registry.heartbeat(queue, "g", "w1", now_ns=T0)
        assert size(cluster_client, log_of(queue)) < COMPACT_BELOW_B, queue
        assert 0 < cluster_client.pttl(log_of(queue)) <= 86_400_000
    assert node_calls(cluster_client, by) >= 3
    assert node_calls(cluster_client, "fcall" if by == "evalsha" else "evalsha") == 0
    assert (node_calls(cluster_client, "copy"), node_calls(cluster_client, "rename")) == (3, 3)
    assert scratch_keys(cluster_client) == []


def test_only_the_entry_that_creates_a_log_compacts_it(redis_client: redis.Redis) -> None:
    registry = RedisPresenceRegistry(redis_client)
    registry.heartbeat("q", "g", "w1", now_ns=T0)
    redis_client.config_resetstat()
    registry.heartbeat("q", "g", "w1", now_ns=T0 + MS)  # a known consumer: logs nothing
    assert (calls(redis_client, "exists"), calls(redis_client, "copy")) == (0, 0)
    registry.heartbeat("q", "g", "w2", now_ns=T0 + MS)  # joins a queue whose log exists
    # EXISTS of the log, and of the epoch marker (mark_epoch): no COPY.
    assert (calls(redis_client, "exists"), calls(redis_client, "copy")) == (2, 0)
    assert calls(redis_client, "rename") == 0
    registry.heartbeat("new", "g", "w1", now_ns=T0 + MS)  # creates a log
    assert (calls(redis_client, "copy"), calls(redis_client, "rename")) == (1, 1)
    assert calls(redis_client, "del") == 0


def test_a_scratch_key_already_there_is_left_alone(redis_client: redis.Redis) -> None:
    """COPY never replaces: a key already at the scratch name (nothing of ours) stays, and
    the log stays as XADD made it."""
    redis_client.set(KEYS.queue_events_copy("q"), "not ours")
    RedisPresenceRegistry(redis_client).heartbeat("q", "g", "w1", now_ns=T0)
    assert redis_client.get(KEYS.queue_events_copy("q")) == b"not ours"
    assert size(redis_client, log_of("q")) > COMPACT_BELOW_B
    assert redis_client.xlen(log_of("q")) == 1


def test_copy_and_rename_keep_what_the_readers_check_for_a_trim(client: redis.Redis) -> None:
    """The server property the compaction rests on, on a log with trimmed and deleted
    entries: a copy of a stream carries every field `changes` compares, and RENAME moves
    it whole (with the copy's TTL: the scripts set the log's after it)."""
    key = log_of("q")
    for i in range(12):
        client.xadd(key, {"k": "joined", "g": "x", f"c{i}": "1 2 3 4"})
    ids = entry_ids(client, key)
    client.xdel(key, ids[3], ids[-1])
    client.xtrim(key, maxlen=6, approximate=False)
    before = stream_info(client, key)
    assert before["max-deleted-entry-id"] == ids[-1]
    assert before["entries-added"] == 12
    assert before["length"] == 6
    copy = key + EVENTS_COPY_SUFFIX
    assert client.copy(key, copy) is True
    assert stream_info(client, copy) == before
    assert client.rename(copy, key) is True
    assert client.exists(copy) == 0
    assert stream_info(client, key) == before
    assert entry_ids(client, key) == ids[5:-1]


def test_a_compacted_log_reads_as_an_uncompacted_one(
    client: redis.Redis, make_redis_server: MakeRedisServer
) -> None:
    """The same writes with and without the compaction (an ACL user of an earlier release's
    line) leave logs whose `XINFO STREAM` differ only by their ids."""
    compacted = RedisPresenceRegistry(client)
    server = make_redis_server()
    plain = old_broker(server, "")
    for registry in (compacted, plain):
        registry.heartbeat("q", "g", "w1", now_ns=T0)
    with server.client() as admin:
        assert size(client, log_of("q")) < COMPACT_BELOW_B < size(admin, log_of("q"))
        for registry in (compacted, plain):
            registry.heartbeat("q", "g", "w2", now_ns=T0 + MS)
            assert registry.deregister("q", "g", "w1") is True
        infos = []
        for c in (client, admin):
            ids = entry_ids(c, log_of("q"))
            c.xdel(log_of("q"), ids[1])  # what a reader meets as a gap
            infos.append((stream_info(c, log_of("q")), ids))
    for info, ids in infos:
        assert info["length"] == 2
        assert info["entries-added"] == 3
        assert info["first-entry"] == info["recorded-first-entry-id"] == ids[0]
        assert info["last-generated-id"] == info["last-entry"] == ids[2]
        assert info["max-deleted-entry-id"] == ids[1]


def old_broker(server: RedisServer, rules: str) -> RedisPresenceRegistry:
    with server.client() as admin:
        admin.execute_command(*shlex.split(f"ACL SETUSER old reset on >pw {OLD_BROKER} {rules}"))
    client = server.client(username="old", password="pw", retry=Retry(NoBackoff(), 0))
    return RedisPresenceRegistry(client)


@pytest.mark.parametrize("rules", ["", "+copy", "+rename"], ids=["neither", "copy", "rename"])
def test_a_role_without_copy_or_rename_still_beats_and_logs(
    make_redis_server: MakeRedisServer, rules: str
) -> None:
    server = make_redis_server()
    registry = old_broker(server, rules)
    reader = RedisPresenceRegistry(server.client())
    _, cursor = reader.changes(now_ns=T0 - MS)
    registry.heartbeat("q", "g", "w1", now_ns=T0)
    registry.heartbeat_many([("q2", "g", "w1", 0)], now_ns=T0)
    with server.client() as admin:
        for queue in ("q", "q2"):
            assert size(admin, log_of(queue)) > COMPACT_BELOW_B  # left as XADD made it
            assert 0 < admin.pttl(log_of(queue)) <= 86_400_000
        assert calls(admin, "rename") == 0  # refused, or not tried after a refused COPY
        # With +copy alone the copy was made, then deleted when RENAME was refused.
        assert calls(admin, "copy") == (2 if rules == "+copy" else 0)
        assert scratch_keys(admin) == []
    events, _ = reader.changes(cursor, now_ns=T0 + MS)
    assert sorted((e.kind, e.queue, e.consumer) for e in events) == [
        (EventKind.JOINED, "q", "w1"),
        (EventKind.JOINED, "q2", "w1"),
    ]

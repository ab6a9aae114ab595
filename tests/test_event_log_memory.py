"""A new queue's event log is compacted when its first entry creates it (`compact_log` in
lua/lib.lua): since Redis 7.0 a stream's first node preallocates 4 KB, most of what a queue
of one consumer costs (docs/performance.md, case 7). The scripts rewrite the log with `DUMP`
and `RESTORE ... REPLACE`, which keep every field the event readers check for a trim
(`XINFO STREAM`: length, entries-added, max-deleted-entry-id, first entry, last-generated-id);
a role that may not run either still beats and logs the same entries, uncompacted.

Real servers: Debian's Redis 7, and Redis 8 and Valkey 9 of the version matrix.
"""

from __future__ import annotations

import shlex
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from servers import MakeRedisServer, RedisServer

from redis_presence import EventKind, RedisPresenceRegistry
from redis_presence.keys import Keyspace

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
# The broker's line of an earlier release: no +dump +restore.
OLD_BROKER = (
    "~presence:* resetchannels -@all +evalsha +fcall +script|load +function|load +select +type "
    "+time +exists +get +hget +hset +zadd +zscore +zcard +zrange +set +zrem +hdel +del +xadd "
    "+pexpire"
)


def log_of(queue: str) -> str:
    return KEYS.group(queue, "g").events


def size(client: redis.Redis, key: str) -> int:
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
        assert 0 < client.pttl(log_of(queue)) <= 86_400_000  # the TTL is set after RESTORE
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


def test_only_the_entry_that_creates_a_log_compacts_it(redis_client: redis.Redis) -> None:
    registry = RedisPresenceRegistry(redis_client)
    registry.heartbeat("q", "g", "w1", now_ns=T0)
    redis_client.config_resetstat()
    registry.heartbeat("q", "g", "w1", now_ns=T0 + MS)  # a known consumer: logs nothing
    assert (calls(redis_client, "exists"), calls(redis_client, "dump")) == (0, 0)
    registry.heartbeat("q", "g", "w2", now_ns=T0 + MS)  # joins a queue whose log exists
    # EXISTS of the log, and of the epoch marker (mark_epoch): no DUMP.
    assert (calls(redis_client, "exists"), calls(redis_client, "dump")) == (2, 0)
    registry.heartbeat("new", "g", "w1", now_ns=T0 + MS)  # creates a log
    assert (calls(redis_client, "dump"), calls(redis_client, "restore")) == (1, 1)


def test_dump_and_restore_keep_what_the_readers_check_for_a_trim(client: redis.Redis) -> None:
    """The server property the compaction rests on, on a log with trimmed and deleted
    entries: Redis 7's stream payload carries every field `changes` compares."""
    key = log_of("q")
    for i in range(12):
        client.xadd(key, {"k": "joined", "g": "x", f"c{i}": "1 2 3 4"})
    ids = [entry_id for entry_id, _ in client.xrange(key)]
    client.xdel(key, ids[3], ids[-1])
    client.xtrim(key, maxlen=6, approximate=False)
    before = stream_info(client, key)
    assert before["max-deleted-entry-id"] == ids[-1]
    assert before["entries-added"] == 12
    assert before["length"] == 6
    payload = client.dump(key)
    assert client.restore(key, 0, payload, replace=True) in (b"OK", "OK", True)
    assert stream_info(client, key) == before
    assert [entry_id for entry_id, _ in client.xrange(key)] == ids[5:-1]


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
            ids = [entry_id for entry_id, _ in c.xrange(log_of("q"))]
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


@pytest.mark.parametrize("rules", ["", "+dump", "+restore"], ids=["neither", "dump", "restore"])
def test_a_role_without_dump_or_restore_still_beats_and_logs(
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
        assert calls(admin, "restore") == 0  # refused, or not tried after a refused DUMP
    events, _ = reader.changes(cursor, now_ns=T0 + MS)
    assert sorted((e.kind, e.queue, e.consumer) for e in events) == [
        (EventKind.JOINED, "q", "w1"),
        (EventKind.JOINED, "q2", "w1"),
    ]

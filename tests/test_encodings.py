"""A group's sorted set of heartbeats, and the index of groups, move to Redis's skiplist
encoding at SKIPLIST_AT (64) members (lua/lib.lua, `grown`): updating a member of a listpack
rescans it twice, the most expensive part of a beat in a group of 100 (issue 33 item 1).
Nothing a reader sees changes; a role without ZCARD beats as before, in a listpack."""

from __future__ import annotations

import shlex

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from servers import MakeRedisServer

from redis_presence import RedisPresenceRegistry

pytestmark = [pytest.mark.redis_server, pytest.mark.timeout(60)]

MS = 1_000_000
T0 = 1_750_000_000_000 * MS
HB = "presence:{q}:g:hb"


def encoding(client: redis.Redis, key: str) -> bytes:
    return bytes(client.object("encoding", key))


def test_a_group_of_64_moves_to_a_skiplist_and_reads_the_same(redis_client: redis.Redis) -> None:
    registry = RedisPresenceRegistry(redis_client)
    for i in range(63):
        registry.heartbeat("q", "g", f"w{i:02d}", i, now_ns=T0 + i * MS)
    assert encoding(redis_client, HB) == b"listpack"
    before = [(r.consumer, r.lease_count) for r in registry.snapshot(now_ns=T0 + 63 * MS)]
    registry.heartbeat("q", "g", "w63", 63, now_ns=T0 + 63 * MS)  # the 64th
    assert encoding(redis_client, HB) == b"skiplist"
    rows = registry.snapshot(now_ns=T0 + 63 * MS)
    assert [(r.consumer, r.lease_count) for r in rows] == [*before, ("w63", 63)]
    assert redis_client.zcard(HB) == 64
    assert registry.count_active_by_group(now_ns=T0 + 63 * MS) == {("q", "g"): 64}
    registry.heartbeat("q", "g", "w00", 7, now_ns=T0 + 64 * MS)  # a known consumer
    assert redis_client.zscore(HB, "w00") == (T0 + 64 * MS) // 1000


def test_a_batch_that_grows_groups_past_64_moves_them_and_the_index(
    redis_client: redis.Redis,
) -> None:
    registry = RedisPresenceRegistry(redis_client)
    beats = [(f"q{g:03d}", "g", f"w{i}", 0) for g in range(70) for i in range(3)]
    registry.heartbeat_many(beats, now_ns=T0)
    assert encoding(redis_client, "presence:groups") == b"skiplist"  # 70 groups
    assert encoding(redis_client, "presence:{q000}:g:hb") == b"listpack"  # 3 consumers
    registry.heartbeat_many([("big", "g", f"w{i}", i) for i in range(80)], now_ns=T0)
    assert encoding(redis_client, "presence:{big}:g:hb") == b"skiplist"
    assert len(registry.snapshot(now_ns=T0)) == 70 * 3 + 80
    assert registry.deregister("big", "g", "w0") is True
    assert registry.prune_expired(now_ns=T0 + 10**15) == 70 * 3 + 79
    assert redis_client.exists("presence:groups", "presence:{big}:g:hb") == 0


def test_a_role_without_zcard_beats_in_a_listpack(make_redis_server: MakeRedisServer) -> None:
    server = make_redis_server()
    admin = server.client()
    admin.execute_command(  # type: ignore[no-untyped-call]
        *shlex.split(
            "ACL SETUSER old reset on >pw ~presence:* resetchannels -@all +evalsha +fcall "
            "+script|load +function|load +select +type +time +exists +get +hget +hset +zadd "
            "+zscore +set +zrem +hdel +del +xadd +pexpire"
        )
    )
    client = server.client(username="old", password="pw", retry=Retry(NoBackoff(), 0))
    registry = RedisPresenceRegistry(client)
    registry.heartbeat_many([("q", "g", f"w{i}", 0) for i in range(70)], now_ns=T0)
    registry.heartbeat("q", "g", "w70", now_ns=T0)
    assert encoding(admin, HB) == b"listpack"
    assert admin.zcard(HB) == 71
    client.close()
    admin.close()

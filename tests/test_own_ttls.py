"""The fleet index of the groups' own TTLs, ``P:ttls`` (issue 33 items 3 and 4): kept by
``setting.lua`` with each group's own TTL on a standalone server, seeded by `migrate`, and
read by the whole-fleet readers without a given TTL (``prune_expired()``, the groups nobody
reads) for the least TTL any group may have, so that they pick their candidates from one
range of ``P:oldest`` / ``P:newest`` instead of reading every group's TTL. Against a real
redis-server: what they answer, and what they send (``INFO commandstats``)."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from redis_presence import RedisPresenceRegistry
from redis_presence.errors import PresenceDataError

MS = 1_000_000
GROUPS = 1_500


def _calls(client: redis.Redis) -> dict[str, int]:
    stats: dict[str, Any] = client.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}


def _sent(before: dict[str, int], client: redis.Redis) -> dict[str, int]:
    after = _calls(client)
    return {k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)}


def _fleet(client: redis.Redis, prefix: str, now: int) -> RedisPresenceRegistry:
    """GROUPS groups of one live consumer under a prefix TTL of 30 s; group g0000 has
    its own TTL of 1 s and a consumer 10 s old (expired for it, active for the prefix),
    g0001 its own of 60 s and a consumer 70 s old (active for it, expired for the
    prefix's)."""
    registry = RedisPresenceRegistry(client, prefix=prefix, max_future_ms=None)
    registry.set_ttl(30_000)
    registry.set_ttl(1_000, queue="q", group="g0000")
    registry.set_ttl(60_000, queue="q", group="g0001")
    registry.heartbeat_many([("q", f"g{n:04d}", "live", 0) for n in range(GROUPS)], now_ns=now)
    registry.heartbeat("q", "g0000", "old", now_ns=now - 10_000 * MS)
    registry.heartbeat("q", "g0001", "old", now_ns=now - 70_000 * MS)
    return registry


@pytest.mark.redis_server
def test_setting_lua_keeps_p_ttls_with_each_groups_own_ttl(redis_client: redis.Redis) -> None:
    registry = RedisPresenceRegistry(redis_client, prefix="kt")
    registry.set_ttl(30_000)  # the prefix's: not a group's
    registry.set_ttl(5_000, queue="q", group="a")
    registry.set_ttl(2_000, queue="q", group="b")
    registry.set_stuck_after(1_000, queue="q", group="c")  # a budget: not a TTL
    assert redis_client.zrange("kt:ttls", 0, -1, withscores=True) == [
        (b"kt:{q}:b:c", 2_000.0),
        (b"kt:{q}:a:c", 5_000.0),
    ]
    registry.set_ttl(90_000, queue="q", group="b")  # raised: the index follows
    registry.set_ttl(None, queue="q", group="a")  # forgotten: it leaves the index
    assert redis_client.zrange("kt:ttls", 0, -1, withscores=True) == [(b"kt:{q}:b:c", 90_000.0)]
    # The setting outlives the group's consumers, and so does its entry.
    registry.heartbeat("q", "b", "c1")
    registry.deregister("q", "b", "c1")
    assert redis_client.get("kt:{q}:b:ttl") == b"90000"
    assert redis_client.zscore("kt:ttls", "kt:{q}:b:c") == 90_000.0


@pytest.mark.redis_server
def test_a_p_ttls_of_another_type_refuses_the_setting_unwritten(
    redis_client: redis.Redis,
) -> None:
    registry = RedisPresenceRegistry(redis_client, prefix="wt")
    redis_client.set("wt:ttls", "not a sorted set")
    with pytest.raises(PresenceDataError, match="WRONGTYPE"):
        registry.set_ttl(5_000, queue="q", group="a")
    assert redis_client.get("wt:{q}:a:ttl") is None


@pytest.mark.redis_server
def test_a_prune_with_each_groups_ttl_reads_no_ttl_of_the_fleet(
    redis_client: redis.Redis,
) -> None:
    """prune_expired() with own TTLs among many groups: the group whose own TTL is short
    loses its old consumer, the one whose own TTL is long keeps it, and the prune sends
    no command per group of the fleet (no page of every group by rank, no ZMSCORE)."""
    now = time.time_ns()
    registry = _fleet(redis_client, "pt", now)
    before = _calls(redis_client)
    assert registry.prune_expired(now_ns=now, retention_ms=0) == 1
    sent = _sent(before, redis_client)
    left = {(r.group, r.consumer) for r in registry.snapshot(now_ns=now) if r.group < "g0002"}
    assert left == {("g0000", "live"), ("g0001", "live"), ("g0001", "old")}
    assert sent.get("zmscore", 0) == 0, sent
    assert sent.get("zrange", 0) == 0, sent
    assert sent.get("evalsha", 0) + sent.get("fcall", 0) <= 2, sent
    # Raised, the long TTL keeps it; lowered below its age, the next prune removes it.
    registry.set_ttl(120_000, queue="q", group="g0001")
    assert registry.prune_expired(now_ns=now, retention_ms=0) == 0
    registry.set_ttl(2_000, queue="q", group="g0001")
    assert registry.prune_expired(now_ns=now, retention_ms=0) == 1


@pytest.mark.redis_server
def test_groups_nobody_reads_with_each_groups_ttl_read_no_ttl_of_the_fleet(
    redis_client: redis.Redis,
) -> None:
    now = time.time_ns()
    registry = _fleet(redis_client, "it", now)
    registry.deregister("q", "g0000", "live")  # g0000: only its consumer 10 s old
    registry.deregister("q", "g0001", "live")  # g0001: only its consumer 70 s old
    registry.set_ttl(120_000, queue="q", group="g0001")  # active for its own TTL
    before = _calls(redis_client)
    page = registry.group_page(now_ns=now, attention=True, match=lambda g: g.active == 0)
    sent = _sent(before, redis_client)
    assert [g.group for g in page.groups] == ["g0000"]  # g0001's 120 s keep it read
    assert sent.get("zmscore", 0) == 0, sent
    assert sent.get("zrange", 0) == 0, sent
    assert sent.get("zcard", 0) <= 3 + 2, sent  # fleet_indexes', and the candidates'
    registry.set_ttl(None, queue="q", group="g0001")  # the prefix's 30 s: unread now
    page = registry.group_page(now_ns=now, attention=True, match=lambda g: g.active == 0)
    assert [g.group for g in page.groups] == ["g0000", "g0001"]


@pytest.mark.redis_server
def test_migrate_seeds_p_ttls_before_the_prefix_says_2(redis_client: redis.Redis) -> None:
    """A prefix in mode 1 whose group TTL a version-1 client stored (a plain setting,
    no P:ttls): migrate seeds it, so the prune that follows uses it."""
    now = time.time_ns()
    redis_client.set("mg:protocol", "1")
    registry = RedisPresenceRegistry(redis_client, prefix="mg", max_future_ms=None)
    registry.heartbeat("q", "short", "old", now_ns=now - 10_000 * MS)
    registry.heartbeat("q", "short", "live", now_ns=now)
    registry.heartbeat("q", "spoilt", "live", now_ns=now)
    redis_client.set("mg:{q}:short:ttl", "1000")
    redis_client.set("mg:{q}:spoilt:ttl", "soon")  # not a setting: nothing to seed
    registry.migrate()
    assert redis_client.zrange("mg:ttls", 0, -1, withscores=True) == [(b"mg:{q}:short:c", 1_000.0)]
    redis_client.set("mg:{q}:spoilt:ttl", "30000")
    fresh = RedisPresenceRegistry(redis_client, prefix="mg", max_future_ms=None)  # no cache
    assert fresh.prune_expired(now_ns=now, retention_ms=0) == 1

"""Retention (issue 32 item 5): a prune may keep expired consumers for a while, and what a
prune costs per group it visits (issue 33 item 3)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import redis
from backends import BACKENDS, SMALL_BACKENDS, make_registry

from redis_presence import DEFAULT_RETENTION_TTLS, EventKind, RedisPresenceRegistry

MS = 1_000_000
T0 = 1_796_000_000_123_456_000
TTL = 30_000

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=BACKENDS + SMALL_BACKENDS)
def registry(request: pytest.FixtureRequest) -> Any:
    return make_registry(request, request.param)


def test_the_default_retention_is_sixty_ttls() -> None:
    assert DEFAULT_RETENTION_TTLS == 60


@pytest.mark.parametrize("rest_ns", [0, 1, 999])
@pytest.mark.parametrize("delta_ns", [-1, 0, 1])
def test_retention_is_exact_to_the_nanosecond(registry: Any, rest_ns: int, delta_ns: int) -> None:
    """Kept for `retention_ms` past expiry: removed from (2 ttl + retention + 1) ms on."""
    beat = T0 + rest_ns
    registry.heartbeat("q", "g", "a", now_ns=beat)
    registry.heartbeat("q", "g2", "b", now_ns=beat)
    keep = 45_000
    edge = beat + (2 * TTL + keep + 1) * MS + delta_ns
    gone = delta_ns >= 0
    assert registry.prune_expired(now_ns=edge, ttl_ms=TTL, retention_ms=keep) == (2 if gone else 0)
    assert len(registry) == (0 if gone else 2)


def test_retention_none_is_sixty_ttls_of_each_group(registry: Any) -> None:
    registry.set_ttl(1_000, queue="q", group="fast")
    registry.set_ttl(2_000, queue="q", group="slow")
    registry.heartbeat("q", "fast", "a", now_ns=T0)
    registry.heartbeat("q", "slow", "b", now_ns=T0)
    # fast: 2 s to expire, then 60 s kept; slow: 4 s, then 120 s.
    assert registry.prune_expired(now_ns=T0 + 62_000 * MS, retention_ms=None) == 0
    assert registry.prune_expired(now_ns=T0 + 62_001 * MS, retention_ms=None) == 1
    assert [r.group for r in registry.snapshot(now_ns=T0)] == ["slow"]
    assert registry.prune_expired(now_ns=T0 + 124_001 * MS, retention_ms=None) == 1
    assert len(registry) == 0


def test_retention_zero_is_todays_prune(registry: Any) -> None:
    registry.heartbeat("q", "g", "a", now_ns=T0)
    assert registry.prune_expired(now_ns=T0 + (2 * TTL + 1) * MS, ttl_ms=TTL, retention_ms=0) == 1


def test_a_pruned_event_for_each_consumer_removed_after_its_retention(registry: Any) -> None:
    _, cursor = registry.changes(now_ns=T0)
    registry.heartbeat("q", "g", "old", now_ns=T0)
    registry.heartbeat("q", "g", "young", now_ns=T0 + 10_000 * MS)
    now = T0 + (2 * TTL + 5_000 + 1) * MS
    assert registry.prune_expired(now_ns=now, ttl_ms=TTL, retention_ms=5_000) == 1
    events, _ = registry.changes(cursor, now_ns=now)
    assert [(e.kind, e.consumer, e.at_ns) for e in events][-1] == (EventKind.PRUNED, "old", now)


@pytest.mark.parametrize(
    ("value", "error"),
    [(-1, ValueError), (10**12 + 1, ValueError), ("5", TypeError), (1.5, TypeError)],
)
def test_a_bad_retention_is_refused_naming_it_and_nothing_goes(
    registry: Any, value: object, error: type[Exception]
) -> None:
    registry.heartbeat("q", "g", "a", now_ns=T0)
    with pytest.raises(error, match="retention_ms"):
        registry.prune_expired(now_ns=T0 + 10 * TTL * MS, ttl_ms=TTL, retention_ms=value)
    assert len(registry) == 1


@pytest.mark.parametrize("backend", ["redis", "cluster", "fakeredis"])
def test_prunes_at_once_remove_each_consumer_once(
    request: pytest.FixtureRequest, backend: str
) -> None:
    """Several processes pruning the same fleet at once: every expired consumer goes once,
    with one pruned event, and the counts add up (each script call is atomic)."""
    registry = make_registry(request, backend)
    _, cursor = registry.changes(now_ns=T0)
    beats = [(f"q{i % 7}", f"g{i % 30}", f"c{i}", 0) for i in range(600)]
    registry.heartbeat_many(beats, now_ns=T0)
    registry.heartbeat("q0", "g0", "live", now_ns=T0 + 10 * TTL * MS)
    now = T0 + 10 * TTL * MS
    counts: list[int] = []
    others = [make_registry(request, backend) for _ in range(3)]

    def prune(r: Any) -> None:
        counts.append(r.prune_expired(now_ns=now, ttl_ms=TTL))

    threads = [threading.Thread(target=prune, args=(r,)) for r in others]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sum(counts) == 600
    assert [r.consumer for r in registry.snapshot(now_ns=now)] == ["live"]
    pruned = []
    while True:  # a page of events at a time
        events, cursor = registry.changes(cursor, now_ns=now)
        if not events:
            break
        pruned += [e.consumer for e in events if e.kind is EventKind.PRUNED]
    assert sorted(pruned) == sorted(c for _, _, c, _ in beats)


def _commands(client: redis.Redis) -> int:
    stats: dict[str, Any] = client.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


@pytest.mark.redis_server
def test_a_group_with_nothing_to_remove_costs_one_command(redis_client: redis.Redis) -> None:
    """Issue 33 item 3: 1,000 groups of one live consumer, one of them with 5 expired: the
    prune sends about one server command per group it visits (it sent 8.5 before: seven
    type checks and range reads for every group), besides the index pages and its calls."""
    registry = RedisPresenceRegistry(redis_client, max_future_ms=None)
    groups = [(f"q{i // 100:02d}", f"g{i % 100:02d}") for i in range(1_000)]
    registry.heartbeat_many([(q, g, "live", 0) for q, g in groups], now_ns=T0 + 10 * TTL * MS)
    registry.heartbeat_many([("q00", "g00", f"old{i}", 0) for i in range(5)], now_ns=T0)
    redis_client.config_resetstat()
    before = _commands(redis_client)
    assert registry.prune_expired(now_ns=T0 + 10 * TTL * MS, ttl_ms=TTL) == 5
    sent = _commands(redis_client) - before
    assert sent <= 1.1 * len(groups) + 40, sent


@pytest.mark.redis_server
def test_a_call_writes_at_most_ten_groups_and_the_next_goes_on(
    redis_client: redis.Redis,
) -> None:
    """An index page of 100 groups, every fourth with an expired consumer: one call visits
    the page but writes ten groups (MAX_WRITTEN), and the caller sends the rest again until
    all 25 are pruned: three calls (ten before, of ten groups each)."""
    registry = RedisPresenceRegistry(redis_client, max_future_ms=None)
    live = [("q", f"g{i:03d}", "live", 0) for i in range(100)]
    registry.heartbeat_many(live, now_ns=T0 + 10 * TTL * MS)
    registry.heartbeat_many([("q", f"g{i:03d}", "old", 0) for i in range(0, 100, 4)], now_ns=T0)
    redis_client.config_resetstat()
    assert registry.prune_expired(now_ns=T0 + 10 * TTL * MS, ttl_ms=TTL) == 25
    stats: dict[str, Any] = redis_client.info("commandstats")
    assert int(stats["cmdstat_evalsha"]["calls"]) == 3
    assert len(registry) == 100

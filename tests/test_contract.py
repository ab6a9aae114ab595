"""The presence contract, run unchanged against every backend in `backends.BACKENDS`."""

from __future__ import annotations

import time
from typing import Any

import pytest
from backends import BACKENDS, SMALL_BACKENDS, make_registry

from redis_presence import (
    DEFAULT_PRESENCE_TTL_MS,
    ConsumerPresence,
    PresenceState,
    process_instance,
)

MS = 1_000_000
# A timestamp near today's clock (late 2026): far above 2**53, as every real one is.
T0 = 1_796_000_000_123_456_000
TTL = 30_000

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=BACKENDS + SMALL_BACKENDS)
def registry(request: pytest.FixtureRequest) -> Any:
    return make_registry(request, request.param)


def states(registry: Any, now_ns: int, ttl_ms: int = TTL) -> dict[str, PresenceState]:
    return {row.consumer: row.state for row in registry.snapshot(now_ns=now_ns, ttl_ms=ttl_ms)}


def test_default_ttl_is_thirty_seconds() -> None:
    assert DEFAULT_PRESENCE_TTL_MS == 30_000


def test_first_heartbeat_registers_and_timestamps_round_trip(registry: Any) -> None:
    registry.heartbeat("orders", "billing", "w1", 7, now_ns=T0)
    (row,) = registry.snapshot(now_ns=T0)
    assert row == ConsumerPresence(
        queue="orders",
        group="billing",
        consumer="w1",
        registered_at_ns=T0,
        last_heartbeat_ns=T0,
        last_seen_age_ms=0,
        lease_count=7,
        state=PresenceState.ACTIVE,
        instance=process_instance(),  # this process's: the registry was given none
    )
    assert len(registry) == 1


def test_later_beats_keep_registration_and_store_lease_verbatim(registry: Any) -> None:
    registry.heartbeat("q", "g", "c", 5, now_ns=T0)
    registry.heartbeat("q", "g", "c", 2**32 - 1, now_ns=T0 + 3 * MS + 17)
    registry.heartbeat("q", "g", "c", 0, now_ns=T0 + 9 * MS + 1)
    (row,) = registry.snapshot(now_ns=T0 + 10 * MS)
    assert row.registered_at_ns == T0
    assert row.last_heartbeat_ns == T0 + 9 * MS + 1
    assert row.lease_count == 0
    assert row.last_seen_age_ms == 0  # 999_999 ns is not yet a whole millisecond
    registry.heartbeat("q", "g", "c", 2**32 - 1, now_ns=T0 + 11 * MS)
    assert registry.snapshot(now_ns=T0 + 11 * MS)[0].lease_count == 2**32 - 1


@pytest.mark.parametrize(
    ("age_ns", "state"),
    [
        (0, PresenceState.ACTIVE),
        (TTL * MS, PresenceState.ACTIVE),
        (TTL * MS + MS - 1, PresenceState.ACTIVE),  # age_ms is still exactly ttl
        (TTL * MS + MS, PresenceState.STALE),  # ttl + 1 ms
        (2 * TTL * MS, PresenceState.STALE),
        (2 * TTL * MS + MS - 1, PresenceState.STALE),
        (2 * TTL * MS + MS, PresenceState.EXPIRED),  # 2 ttl + 1 ms
        (10 * TTL * MS, PresenceState.EXPIRED),
    ],
)
def test_rule_boundaries_agree_everywhere(registry: Any, age_ns: int, state: PresenceState) -> None:
    registry.heartbeat("q", "g", "c", now_ns=T0)
    now = T0 + age_ns
    (row,) = registry.snapshot(now_ns=now, ttl_ms=TTL)
    assert row.last_seen_age_ms == age_ns // MS
    assert row.state is state
    assert registry.count_active_by_group(now_ns=now, ttl_ms=TTL) == (
        {("q", "g"): 1} if state is PresenceState.ACTIVE else {}
    )
    assert registry.prune_expired(now_ns=now, ttl_ms=TTL) == (state is PresenceState.EXPIRED)
    assert len(registry) == (0 if state is PresenceState.EXPIRED else 1)


@pytest.mark.parametrize("rest_ns", [0, 1, 500, 999])
@pytest.mark.parametrize("delta_ns", [-1, 0, 1])
def test_rule_is_exact_to_the_nanosecond(registry: Any, rest_ns: int, delta_ns: int) -> None:
    """Heartbeats and readers off whole microseconds still classify exactly."""
    beat = T0 + rest_ns
    registry.heartbeat("q", "g", "active-edge", now_ns=beat)
    registry.heartbeat("q", "g2", "expiry-edge", now_ns=beat)
    active_edge = beat + (TTL + 1) * MS + delta_ns  # first instant of stale is +0
    assert states(registry, active_edge)["active-edge"] is (
        PresenceState.ACTIVE if delta_ns < 0 else PresenceState.STALE
    )
    assert registry.count_active_by_group(now_ns=active_edge, ttl_ms=TTL) == (
        {("q", "g"): 1, ("q", "g2"): 1} if delta_ns < 0 else {}
    )
    expiry_edge = beat + (2 * TTL + 1) * MS + delta_ns
    expired = delta_ns >= 0
    assert states(registry, expiry_edge)["expiry-edge"] is (
        PresenceState.EXPIRED if expired else PresenceState.STALE
    )
    assert registry.prune_expired(now_ns=expiry_edge, ttl_ms=TTL) == (2 if expired else 0)


def test_future_heartbeat_has_age_zero(registry: Any) -> None:
    registry.heartbeat("q", "g", "c", now_ns=T0 + 5_000 * MS)
    (row,) = registry.snapshot(now_ns=T0)
    assert row.last_seen_age_ms == 0
    assert row.state is PresenceState.ACTIVE
    assert registry.count_active_by_group(now_ns=T0) == {("q", "g"): 1}
    assert registry.prune_expired(now_ns=T0) == 0


def test_snapshot_orders_by_queue_group_consumer_and_keeps_expired(registry: Any) -> None:
    beats = [
        ("b", "z", "2", T0),
        ("a", "y", "1", T0 - 100_000 * MS),  # expired
        ("b", "a", "9", T0 - 40_000 * MS),  # stale
        ("a", "y", "0", T0),
        ("é", "g", "c", T0),
        ("a", "y:z", "c", T0),
        ("a:y", "z", "c", T0),
    ]
    for queue, group, consumer, at in beats:
        registry.heartbeat(queue, group, consumer, now_ns=at)
    rows = registry.snapshot(now_ns=T0)
    assert [row.key for row in rows] == sorted((q, g, c) for q, g, c, _ in beats)
    assert [row.state.value for row in rows] == [
        "active",
        "expired",
        "active",
        "active",
        "stale",
        "active",
        "active",
    ]


def test_counts_only_active_and_omit_groups_without_any(registry: Any) -> None:
    for i in range(3):
        registry.heartbeat("orders", "billing", f"w{i}", now_ns=T0)
    registry.heartbeat("orders", "billing", "old", now_ns=T0 - 31_000 * MS)
    registry.heartbeat("orders", "audit", "a1", now_ns=T0 - 45_000 * MS)
    registry.heartbeat("mail", "send", "s1", now_ns=T0 - 1_000 * MS)
    assert registry.count_active_by_group(now_ns=T0, ttl_ms=TTL) == {
        ("orders", "billing"): 3,
        ("mail", "send"): 1,
    }
    assert registry.count_active_by_group(now_ns=T0, ttl_ms=60_000) == {
        ("orders", "billing"): 4,
        ("orders", "audit"): 1,
        ("mail", "send"): 1,
    }


def test_consumer_is_its_snapshot_row_or_none(registry: Any) -> None:
    registry.heartbeat("orders", "billing", "w1", 2, now_ns=T0 - 5_000 * MS)
    registry.heartbeat("orders", "billing", "w1", 2, now_ns=T0 - 1_000 * MS + 7)
    registry.heartbeat("orders", "billing", "w2", now_ns=T0 - 31_000 * MS)
    registry.heartbeat("orders", "audit", "w1", now_ns=T0)
    rows = {
        row.consumer: row
        for row in registry.snapshot(
            now_ns=T0, ttl_ms=TTL, queue="orders", group="billing", stuck_after_ms=2_000
        )
    }
    for name in ("w1", "w2"):
        found = registry.consumer(
            "orders", "billing", name, now_ns=T0, ttl_ms=TTL, stuck_after_ms=2_000
        )
        assert found == rows[name]
    assert rows["w1"].stuck
    assert rows["w2"].state is PresenceState.STALE
    assert registry.consumer("orders", "billing", "w3", now_ns=T0) is None
    assert registry.consumer("orders", "nobody", "w1", now_ns=T0) is None


def test_ttl_sources_are_each_groups_ttl_source(registry: Any) -> None:
    registry.set_ttl(60_000, queue="slow", group="batch")
    pairs = [("slow", "batch"), ("fast", "any"), ("slow", "other")]
    assert registry.ttl_sources(pairs) == {pair: registry.ttl_source(*pair) for pair in pairs}
    registry.set_ttl(5_000)
    assert registry.ttl_sources(pairs) == {
        ("slow", "batch"): (60_000, "group"),
        ("fast", "any"): (5_000, "prefix"),
        ("slow", "other"): (5_000, "prefix"),
    }
    assert registry.ttl_sources([]) == {}


def test_prune_removes_exactly_what_snapshot_calls_expired(registry: Any) -> None:
    ages_ms = [0, 1, 29_999, 30_000, 30_001, 59_999, 60_000, 60_001, 60_002, 120_000]
    for i, age in enumerate(ages_ms):
        registry.heartbeat(f"q{i % 3}", f"g{i % 2}", f"c{i}", now_ns=T0 - age * MS)
    before = registry.snapshot(now_ns=T0, ttl_ms=TTL)
    expired = {row.key for row in before if row.state is PresenceState.EXPIRED}
    assert len(expired) == 3
    assert registry.prune_expired(now_ns=T0, ttl_ms=TTL) == 3
    after = registry.snapshot(now_ns=T0, ttl_ms=TTL)
    assert [row for row in before if row.key not in expired] == after
    assert registry.prune_expired(now_ns=T0, ttl_ms=TTL) == 0


def test_deregister_reports_whether_it_existed(registry: Any) -> None:
    registry.heartbeat("q", "g", "a", now_ns=T0)
    registry.heartbeat("q", "g", "b", now_ns=T0)
    assert registry.deregister("q", "g", "a") is True
    assert registry.deregister("q", "g", "a") is False
    assert registry.deregister("q", "other", "b") is False
    assert [row.consumer for row in registry.snapshot(now_ns=T0)] == ["b"]
    assert registry.deregister("q", "g", "b") is True
    assert registry.snapshot(now_ns=T0) == []
    assert len(registry) == 0
    registry.heartbeat("q", "g", "a", now_ns=T0 + MS)
    (row,) = registry.snapshot(now_ns=T0 + MS)
    assert row.registered_at_ns == T0 + MS  # a new registration after deregistering


def test_len_counts_every_state(registry: Any) -> None:
    assert len(registry) == 0
    registry.heartbeat("q", "g", "active", now_ns=T0)
    registry.heartbeat("q", "g", "stale", now_ns=T0 - 40_000 * MS)
    registry.heartbeat("q", "h", "expired", now_ns=T0 - 90_000 * MS)
    assert len(registry) == 3


def test_heartbeat_many_matches_single_beats(registry: Any) -> None:
    beats = [("q1", "g", f"c{i}", i) for i in range(5)] + [("q2", "h", "x", 1)]
    assert registry.heartbeat_many(beats, now_ns=T0) == 6
    assert registry.heartbeat_many([], now_ns=T0) == 0
    rows = registry.snapshot(now_ns=T0)
    assert [(r.queue, r.group, r.consumer, r.lease_count) for r in rows] == sorted(beats)
    assert all(r.last_heartbeat_ns == T0 for r in rows)


def test_names_are_arbitrary_unicode_and_never_collide(registry: Any) -> None:
    tricky = ["a", "a:b", "a{b}", "{a}", "}", "*", "a|b", "a b", "a\nb", "a\x00b", "ü", "%41", "A"]
    for i, name in enumerate(tricky):
        registry.heartbeat(name, name, name, i, now_ns=T0)
        registry.heartbeat("q", name, "c", i, now_ns=T0)
        registry.heartbeat("q", "g", name, i, now_ns=T0)
    rows = registry.snapshot(now_ns=T0)
    assert len(rows) == len(registry) == 3 * len(tricky)
    by_key = {row.key: row.lease_count for row in rows}
    for i, name in enumerate(tricky):
        assert by_key[(name, name, name)] == i


def test_clock_default_reads_now(registry: Any) -> None:
    """`now_ns=None`: the server's clock for Redis, `time.time_ns()` in process."""
    before = time.time_ns()
    registry.heartbeat("q", "g", "c")
    (row,) = registry.snapshot()
    # The Redis server runs on this machine, so its clock is ours give or take a second.
    assert abs(row.last_heartbeat_ns - before) < 2_000 * MS
    assert row.state is PresenceState.ACTIVE
    assert registry.count_active_by_group() == {("q", "g"): 1}
    assert registry.prune_expired() == 0
    assert registry.prune_expired(now_ns=row.last_heartbeat_ns + 61 * 1_000 * MS) == 1

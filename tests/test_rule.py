"""The classification rule has one definition, `PresenceState.classify`; the fast paths that
decide states without calling it (`PresenceState.horizons_ns`, `ConsumerPresence.many`) must
agree with it everywhere, and exactly at its boundaries."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from redis_presence import ConsumerPresence, ConsumerPresenceRegistry, PresenceState
from redis_presence.model import age_ms

MS = 1_000_000
T0 = 1_796_000_000_123_456_000
TTLS = (1, 2, 7, 1_000, 30_000, 10**12)


def by_horizons(now_ns: int, hb: int, ttl_ms: int) -> PresenceState:
    active_after, expired_at = PresenceState.horizons_ns(now_ns, ttl_ms)
    if hb > active_after:
        return PresenceState.ACTIVE
    return PresenceState.STALE if hb > expired_at else PresenceState.EXPIRED


def boundary_beats(now_ns: int, ttl_ms: int) -> list[int]:
    """Heartbeats on, next to and around every place where classify's answer can change."""
    edges = [
        now_ns,
        now_ns - ttl_ms * MS,
        now_ns - 2 * ttl_ms * MS,
        *PresenceState.horizons_ns(now_ns, ttl_ms),
    ]
    offsets = (-MS - 1, -MS, -1_001, -1_000, -999, -2, -1, 0, 1, 2, 999, 1_000, MS - 1, MS, MS + 1)
    return [edge + offset for edge in edges for offset in offsets if edge + offset >= 0]


def test_horizons_agree_with_classify_at_every_boundary() -> None:
    for ttl in TTLS:
        for now in (T0, T0 + 1, T0 + 999, T0 + MS - 1, 3 * ttl * MS + 5):
            for hb in boundary_beats(now, ttl):
                expected = PresenceState.classify(age_ms(now, hb), ttl)
                assert by_horizons(now, hb, ttl) is expected, (now, hb, ttl)


def test_each_state_is_reached_on_both_sides_of_each_horizon() -> None:
    active_after, expired_at = PresenceState.horizons_ns(T0, 30_000)
    assert PresenceState.classify(age_ms(T0, active_after + 1), 30_000) is PresenceState.ACTIVE
    assert PresenceState.classify(age_ms(T0, active_after), 30_000) is PresenceState.STALE
    assert PresenceState.classify(age_ms(T0, expired_at + 1), 30_000) is PresenceState.STALE
    assert PresenceState.classify(age_ms(T0, expired_at), 30_000) is PresenceState.EXPIRED


@given(
    now=st.integers(0, 2**53 * 1_000 - 1),
    back=st.integers(-(10**12), 10**15),
    ttl=st.integers(1, 10**12),
)
def test_horizons_agree_with_classify_anywhere(now: int, back: int, ttl: int) -> None:
    hb = max(0, now - back)
    assert by_horizons(now, hb, ttl) is PresenceState.classify(age_ms(now, hb), ttl)


def test_many_builds_the_rows_at_builds() -> None:
    for ttl in TTLS:
        beats = boundary_beats(T0, ttl)
        stored = [("q", "g", f"c{i}", hb - i, hb, i) for i, hb in enumerate(beats)]
        fast = ConsumerPresence.many(stored, now_ns=T0, ttl_ms=ttl)
        slow = [ConsumerPresence.at(*row, now_ns=T0, ttl_ms=ttl) for row in stored]
        assert fast == slow
        assert [type(row) for row in fast] == [ConsumerPresence] * len(slow)
        assert [hash(row) for row in fast] == [hash(row) for row in slow]


def test_model_snapshot_states_follow_classify() -> None:
    registry = ConsumerPresenceRegistry()
    beats = boundary_beats(T0, 5)
    for i, hb in enumerate(beats):
        registry.heartbeat("q", "g", f"c{i:03d}", i, now_ns=hb)
    for row in registry.snapshot(now_ns=T0, ttl_ms=5):
        assert row.last_seen_age_ms == age_ms(T0, row.last_heartbeat_ns)
        assert row.state is PresenceState.classify(row.last_seen_age_ms, 5)

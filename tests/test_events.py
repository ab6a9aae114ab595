"""Transitions as events: state + diffs = state, every instant by the rule, resyncs.

A hypothesis state machine beats, deregisters and prunes with explicit, increasing
`now_ns`, and asks for `changes` now and then. Replaying the events onto the snapshot taken
at the first cursor must give the snapshot at the last `now_ns`: the same consumers, in the
same states, with the same registrations (a beat of an active consumer logs nothing, so
its lease and heartbeat are the snapshot's to tell, not the events'), and every event's
`at_ns` must be where the rule puts it, to the nanosecond. It runs on the in-process
model, fakeredis, a real server and the cluster.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from backends import make_registry, raw_client
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from redis_presence import (
    EventKind,
    FollowCursor,
    FollowSnapshot,
    PresenceEvent,
    PresenceResyncRequired,
    PresenceState,
    RedisPresenceRegistry,
)
from redis_presence.model import age_ms

MS = 1_000_000
T0 = 1_796_000_000_123_456_000
TTL = 1_000
KEYS = [(q, g, c) for q in ("q1", "q2") for g in ("g1", "g2") for c in ("a", "b", "c")]

pytestmark = pytest.mark.timeout(300)

STATE_AFTER = {
    EventKind.JOINED: PresenceState.ACTIVE,
    EventKind.RECOVERED: PresenceState.ACTIVE,
    EventKind.STALE: PresenceState.STALE,
    EventKind.EXPIRED: PresenceState.EXPIRED,
}


class EventsMachine(RuleBasedStateMachine):
    """A fresh registry on an empty store (`make`, set by the test), time that only moves
    forward, and a replay."""

    make: Any = None

    def __init__(self) -> None:
        super().__init__()
        self.registry = type(self).make()
        self.now = T0
        self.registry.set_ttl(TTL)
        _, self.cursor = self.registry.changes(now_ns=self.now)
        self.replayed: dict[tuple[str, str, str], tuple[int, PresenceState]] = {}
        self.beats: dict[tuple[str, str, str], int] = {}  # when each consumer last beat

    @rule(ms=st.sampled_from([0, 1, 7, 400, 999, 1_000, 1_001, 2_001, 5_000]))
    def wait(self, ms: int) -> None:
        self.now += ms * MS

    @precondition(lambda self: bool(self.beats))
    @rule(
        data=st.data(),
        which=st.sampled_from(["stale", "expired"]),
        nudge=st.sampled_from([-1, 0, 1]),
    )
    def wait_for_a_line(self, data: Any, which: str, nudge: int) -> None:
        """Move to (just around) the instant some consumer crosses a line of the rule."""
        key = data.draw(st.sampled_from(sorted(self.beats)))
        lines = 1 if which == "stale" else 2
        line = self.beats[key] + (lines * TTL + 1) * MS + nudge
        self.now = max(self.now, line)

    @rule(key=st.sampled_from(KEYS), lease=st.integers(0, 3))
    def beat(self, key: tuple[str, str, str], lease: int) -> None:
        self.registry.heartbeat(*key, lease, now_ns=self.now)
        self.beats[key] = self.now

    @rule(keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=4))
    def beat_many(self, keys: list[tuple[str, str, str]]) -> None:
        self.registry.heartbeat_many([(*key, 1) for key in keys], now_ns=self.now)
        for key in keys:
            self.beats[key] = self.now

    @rule(key=st.sampled_from(KEYS))
    def deregister(self, key: tuple[str, str, str]) -> None:
        self.registry.deregister(*key, now_ns=self.now)
        self.beats.pop(key, None)

    @rule()
    def prune(self) -> None:
        self.registry.prune_expired(now_ns=self.now)
        for key in [k for k, at in self.beats.items() if age_ms(self.now, at) > 2 * TTL]:
            del self.beats[key]

    @rule(limit=st.sampled_from([None, 1, 2, 5]))
    def changes(self, limit: int | None) -> None:
        """One read, or (with `limit`) a window in pages, each applied as it comes: each
        page in order, and each consumer's events in order across pages."""
        more, pages = True, 0
        while more:
            options = {} if limit is None else {"limit": limit}
            page = self.registry.changes(self.cursor, now_ns=self.now, **options)
            events, self.cursor = page
            more = bool(getattr(page, "more", False))
            pages += 1
            assert pages < 500
            assert limit is None or not more or len(events) >= limit
            previous = 0
            for event in events:
                self.check_instant(event)
                assert previous <= event.at_ns, f"out of order: {events}"
                previous = event.at_ns
                self.apply(event)
        expected = {
            row.key: (row.registered_at_ns, row.state)
            for row in self.registry.snapshot(now_ns=self.now)
        }
        assert self.replayed == expected, f"replayed != snapshot after {events}"

    def check_instant(self, event: PresenceEvent) -> None:
        assert event.registered_at_ns is not None
        assert event.last_heartbeat_ns is not None
        if event.kind is EventKind.STALE:
            assert event.at_ns == event.last_heartbeat_ns + (TTL + 1) * MS
        elif event.kind is EventKind.EXPIRED:
            assert event.at_ns == event.last_heartbeat_ns + (2 * TTL + 1) * MS
        elif event.kind is EventKind.JOINED:
            assert event.at_ns == event.registered_at_ns == event.last_heartbeat_ns
        else:  # recovered, left, pruned: when the beat or the removal happened
            assert event.at_ns <= self.now
        if event.kind is EventKind.PRUNED:
            assert age_ms(event.at_ns, event.last_heartbeat_ns) > 2 * TTL

    def apply(self, event: PresenceEvent) -> None:
        if event.kind in (EventKind.LEFT, EventKind.PRUNED):
            assert event.key in self.replayed, f"{event.kind} of an unknown consumer"
            del self.replayed[event.key]
            return
        assert event.registered_at_ns is not None
        if event.kind is not EventKind.JOINED:
            assert event.key in self.replayed, f"{event.kind} of an unknown consumer"
        self.replayed[event.key] = (event.registered_at_ns, STATE_AFTER[event.kind])


@pytest.mark.parametrize("backend", ["memory", "fakeredis", "redis", "cluster"])
def test_replaying_the_events_onto_the_first_snapshot_gives_the_last(
    request: pytest.FixtureRequest, backend: str
) -> None:
    if backend == "memory":
        from redis_presence import ConsumerPresenceRegistry

        EventsMachine.make = ConsumerPresenceRegistry
    else:
        client = raw_client(request, backend)
        flush = (
            request.getfixturevalue("redis_cluster").flushall
            if backend == "cluster"
            else client.flushall
        )
        EventsMachine.make = lambda: (flush(), RedisPresenceRegistry(client))[1]
    test = EventsMachine.TestCase
    examples = 40 if backend in ("memory", "fakeredis") else 25
    test.settings = settings(max_examples=examples, stateful_step_count=30, deadline=None)
    test().runTest()


@pytest.mark.parametrize("backend", ["memory", "fakeredis", "redis", "cluster"])
def test_each_kind_of_event_once_with_its_fields(
    request: pytest.FixtureRequest, backend: str
) -> None:
    registry = make_registry(request, backend)
    _, cursor = registry.changes(now_ns=T0)
    registry.heartbeat("orders", "billing", "w1", 3, now_ns=T0)  # joined
    registry.heartbeat("orders", "billing", "w2", 1, now_ns=T0)
    registry.heartbeat("orders", "billing", "w1", 4, now_ns=T0 + 35_000 * MS)  # stale, back
    registry.deregister("orders", "billing", "w1", now_ns=T0 + 36_000 * MS)  # left
    assert registry.prune_expired(now_ns=T0 + 70_000 * MS) == 1  # w2 pruned
    events, cursor = registry.changes(cursor, now_ns=T0 + 70_000 * MS)
    assert [(e.kind, e.consumer, e.at_ns) for e in events] == [
        (EventKind.JOINED, "w1", T0),
        (EventKind.JOINED, "w2", T0),
        (EventKind.RECOVERED, "w1", T0 + 35_000 * MS),
        (EventKind.LEFT, "w1", T0 + 36_000 * MS),
        (EventKind.PRUNED, "w2", T0 + 70_000 * MS),
    ]
    assert events[2] == PresenceEvent(
        EventKind.RECOVERED, "orders", "billing", "w1", T0 + 35_000 * MS, 4, T0, T0 + 35_000 * MS
    )
    assert events[0].to_dict()["kind"] == "joined"
    # Nothing new: nothing given, and the cursor goes on.
    assert registry.changes(cursor, now_ns=T0 + 70_000 * MS)[0] == []


@pytest.mark.parametrize("backend", ["memory", "fakeredis", "redis", "cluster"])
def test_a_prune_by_a_clock_days_ahead_keeps_its_events(
    request: pytest.FixtureRequest, backend: str
) -> None:
    """The event index is kept by the server's clock: a prune at a now_ns two days ahead
    (asking what will have expired by then) does not forget the logs it just wrote to."""
    registry = make_registry(request, backend)
    now = registry.clock_ns()
    _, cursor = registry.changes(now_ns=now)
    registry.heartbeat("orders", "billing", "w1", now_ns=now)
    registry.heartbeat("mail", "send", "m1", now_ns=now)
    later = now + 2 * 86_400_000 * MS
    assert registry.prune_expired(now_ns=later, ttl_ms=30_000) == 2
    events, _ = registry.changes(cursor, now_ns=later)
    pruned = {(e.queue, e.consumer) for e in events if e.kind is EventKind.PRUNED}
    assert pruned == {("orders", "w1"), ("mail", "m1")}


@pytest.mark.parametrize("backend", ["memory", "fakeredis", "redis", "cluster"])
def test_the_shared_ttl_decides_reads_and_events(
    request: pytest.FixtureRequest, backend: str
) -> None:
    registry = make_registry(request, backend)
    assert registry.ttl_source() == (30_000, "default")
    registry.set_ttl(5_000)
    registry.set_ttl(60_000, queue="slow", group="batch")
    assert registry.ttl_source() == (5_000, "prefix")
    assert registry.ttl_source("slow", "batch") == (60_000, "group")
    assert registry.ttl("fast", "any") == 5_000
    _, cursor = registry.changes(now_ns=T0)
    registry.heartbeat("fast", "any", "f", now_ns=T0)
    registry.heartbeat("slow", "batch", "s", now_ns=T0)
    later = T0 + 10_000 * MS
    states = {row.consumer: row.state for row in registry.snapshot(now_ns=later)}
    assert states == {"f": PresenceState.STALE, "s": PresenceState.ACTIVE}
    assert registry.snapshot(now_ns=later, ttl_ms=30_000)[0].state is PresenceState.ACTIVE
    events, _ = registry.changes(cursor, now_ns=later)
    assert [(e.kind, e.consumer) for e in events] == [
        (EventKind.JOINED, "f"),
        (EventKind.JOINED, "s"),
        (EventKind.STALE, "f"),
    ]
    assert events[2].at_ns == T0 + 5_001 * MS
    with pytest.raises(ValueError, match="one group's"):
        registry.set_ttl(1_000, queue="only-a-queue")
    with pytest.raises(ValueError, match="ttl_ms"):
        registry.set_ttl(0)
    registry.set_ttl(None)
    assert registry.ttl_source("fast", "any") == (30_000, "default")


@pytest.mark.parametrize("backend", ["memory", "fakeredis", "redis"])
def test_a_trimmed_log_asks_for_a_resync_and_follow_takes_a_new_snapshot(
    request: pytest.FixtureRequest, backend: str
) -> None:
    if backend == "memory":
        from redis_presence import ConsumerPresenceRegistry

        registry: Any = ConsumerPresenceRegistry(events_kept=50)
    else:
        client = raw_client(request, backend)
        registry = RedisPresenceRegistry(client, events_kept=50)
    _, cursor = registry.changes(now_ns=T0)
    # A log keeps about 50 entries (Redis trims whole macro nodes of 100): 400 events later,
    # what this cursor has not read is gone.
    for i in range(200):
        registry.heartbeat("q", "g", f"c{i}", now_ns=T0)
        registry.deregister("q", "g", f"c{i}", now_ns=T0)
    with pytest.raises(PresenceResyncRequired, match="fresh snapshot"):
        registry.changes(cursor, now_ns=T0 + MS)

    follow = registry.follow(interval_s=0.01)
    first = next(follow)
    assert isinstance(first, FollowSnapshot)
    assert first.rows == []
    registry.heartbeat("q", "g", "new", now_ns=first.now_ns)
    messages = []
    while not isinstance(message := next(follow), FollowCursor):
        messages.append(message)
    assert [(m.kind, m.consumer) for m in messages] == [(EventKind.JOINED, "new")]
    for i in range(200):  # trim past follow's cursor: it resyncs with a new snapshot
        registry.heartbeat("q", "g", f"d{i}", now_ns=first.now_ns)
        registry.deregister("q", "g", f"d{i}", now_ns=first.now_ns)
    while not isinstance(message := next(follow), FollowSnapshot):
        pass
    assert [row.consumer for row in message.rows] == ["new"]
    follow.close()


def test_a_cursor_is_checked() -> None:
    from redis_presence import ConsumerPresenceRegistry

    for registry in (
        ConsumerPresenceRegistry(),
        RedisPresenceRegistry.__new__(RedisPresenceRegistry),
    ):
        if isinstance(registry, RedisPresenceRegistry):
            from redis_presence.plans import Planner

            changes = Planner("p").changes
            with pytest.raises(ValueError, match="cursor is not one"):
                changes("not-a-cursor")
            with pytest.raises(TypeError, match="cursor must be a str"):
                changes(7)  # type: ignore[arg-type]
        else:
            with pytest.raises(ValueError, match="cursor is not one"):
                registry.changes("not-a-cursor")


@pytest.mark.parametrize("backend", ["memory", "fakeredis", "redis"])
def test_a_cursor_goes_on_only_with_its_filter_and_never_from_ahead(
    request: pytest.FixtureRequest, backend: str
) -> None:
    """Every registry binds a cursor to its filter, and refuses one whose instant is ahead
    of its clock (and of the caller's `now_ns`), as the in-process model does too."""
    if backend == "memory":
        from redis_presence import ConsumerPresenceRegistry

        registry: Any = ConsumerPresenceRegistry()
    else:
        registry = RedisPresenceRegistry(raw_client(request, backend))
    _, of_orders = registry.changes(queue="orders")
    _, of_all = registry.changes()
    for cursor, filters in [(of_orders, {}), (of_all, {"queue": "orders"})]:
        with pytest.raises(ValueError, match="cursor was returned for queue="):
            registry.changes(cursor, **filters)
    year = 365 * 86_400 * 10**9
    _, ahead = registry.changes(now_ns=time.time_ns() + year)
    with pytest.raises(ValueError, match=r"cursor .*ahead of the"):
        registry.changes(ahead)
    registry.changes(ahead, now_ns=time.time_ns() + year)  # the caller's clock: goes on

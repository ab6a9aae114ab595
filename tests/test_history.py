"""The recent past of a group from its transition events (`redis_presence.history`): the
spans and series rebuilt from events (no I/O), and `Planner.group_logs` against a real
redis-server (trimmed logs, the read's bounds)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from redis_presence import RedisPresenceRegistry
from redis_presence.events import EventKind, PresenceEvent
from redis_presence.history import (
    GroupLog,
    Span,
    active_series,
    active_spans,
    stale_at,
    timeline,
)

MS = 1_000_000
S = 1_000 * MS
TTL_MS = 10_000
T0 = 1_796_000_000_000 * MS
HOUR = 3_600 * S


def ev(kind: EventKind, at_ns: int, hb: int | None = None, name: str = "c") -> PresenceEvent:
    return PresenceEvent(kind, "q", "g", name, at_ns, 0, at_ns, at_ns if hb is None else hb)


def spans(
    events: list[PresenceEvent], hb: int | None, start: int = 0, now: int = 1_000 * S
) -> list[Span]:
    return active_spans(events, hb, start_ns=start, now_ns=now, ttl_ms=TTL_MS)


# -- the rule's boundaries --------------------------------------------------------------


def test_stale_at_is_the_rules_line() -> None:
    assert stale_at(0, TTL_MS) == (TTL_MS + 1) * MS


def test_a_consumer_without_events_is_active_until_its_heartbeats_line() -> None:
    hb = 100 * S
    assert spans([], hb) == [Span(0, stale_at(hb, TTL_MS), True)]
    assert spans([], None) == []  # gone, and no event says it was ever here
    # active now: to the end of the window
    assert spans([], 995 * S) == [Span(0, 1_000 * S, True)]


def test_joined_then_left() -> None:
    joined, left = ev(EventKind.JOINED, 100 * S), ev(EventKind.LEFT, 200 * S, hb=195 * S)
    assert spans([joined, left], None) == [Span(100 * S, 200 * S, True)]


@pytest.mark.parametrize(
    "kind",
    [EventKind.DRAINING, EventKind.CONFLICT, EventKind.RESTARTED, EventKind.DRAIN_REQUESTED],
)
def test_events_of_an_active_consumers_beats_change_no_span(kind: EventKind) -> None:
    """Protocol version 2's events: a beat (or a request) while the consumer is active.
    Before: the span ended at the arrival's stale line, the consumer shown gone after it."""
    joined, said = ev(EventKind.JOINED, 100 * S), ev(kind, 300 * S)
    assert spans([joined, said], 995 * S) == [Span(100 * S, 1_000 * S, True)]
    left = ev(EventKind.LEFT, 400 * S, hb=395 * S)
    assert spans([joined, said, left], None) == [Span(100 * S, 400 * S, True)]
    assert spans([said], 995 * S) == [Span(0, 1_000 * S, True)]


def test_left_after_going_stale_counts_up_to_the_stale_line() -> None:
    joined = ev(EventKind.JOINED, 100 * S)
    pruned = ev(EventKind.PRUNED, 500 * S, hb=150 * S)
    assert spans([joined, pruned], None) == [Span(100 * S, stale_at(150 * S, TTL_MS), True)]


def test_recovered_leaves_a_maybe_span_before_it() -> None:
    joined = ev(EventKind.JOINED, 100 * S)
    recovered = ev(EventKind.RECOVERED, 300 * S)
    got = spans([joined, recovered], 990 * S)
    line = stale_at(100 * S, TTL_MS)
    assert got == [
        Span(100 * S, line, True),
        Span(line, 300 * S, False),
        Span(300 * S, 1_000 * S, True),
    ]


def test_a_first_recovered_is_unsure_back_to_the_start() -> None:
    got = spans([ev(EventKind.RECOVERED, 300 * S)], 990 * S, start=50 * S)
    assert got == [Span(50 * S, 300 * S, False), Span(300 * S, 1_000 * S, True)]


def test_a_first_removal_was_active_since_the_start() -> None:
    got = spans([ev(EventKind.LEFT, 300 * S, hb=295 * S)], None, start=50 * S)
    assert got == [Span(50 * S, 300 * S, True)]


def log(**fields: object) -> GroupLog:
    base: dict[str, object] = {
        "queue": "q",
        "group": "g",
        "now_ns": T0,
        "since_ns": T0 - HOUR,
        "ttl_ms": TTL_MS,
        "active_now": 0,
        "logged": (),
        "heartbeats": {},
        "crossed": (),
        "reach_ns": None,
    }
    return GroupLog(**(base | fields))  # type: ignore[arg-type]


def test_series_walks_back_from_the_count_now() -> None:
    # three steady consumers, one that joined 30 min ago and one that left 45 min ago
    joined = ev(EventKind.JOINED, T0 - 1_800 * S, name="new")
    left = ev(EventKind.LEFT, T0 - 2_700 * S, hb=T0 - 2_705 * S, name="old")
    series = active_series(
        log(active_now=4, logged=(left, joined), heartbeats={"new": T0, "old": None}), points=5
    )
    assert series.times_ns == tuple(T0 - HOUR + i * 900 * S for i in range(5))
    # at -60 min: 3 steady + old; at -45 min old has just left; at -30 min new has joined
    assert series.low == series.high == (4, 3, 4, 4, 4)
    assert series.reaches_back
    assert not series.unsure


def test_series_of_a_trimmed_log_starts_where_it_reaches() -> None:
    reach = T0 - 600 * S
    series = active_series(log(active_now=2, reach_ns=reach), points=3)
    assert series.start_ns == reach
    assert not series.reaches_back
    assert series.times_ns[0] == reach
    assert series.low == (2, 2, 2)


def test_series_counts_a_stale_crossing_of_a_consumer_still_there() -> None:
    hb = T0 - 1_000 * S
    series = active_series(log(active_now=0, heartbeats={"c": hb}), points=3)
    # at T0 - 1 h and T0 - 30 min it was active (its line is at T0 - 990 s), now not
    assert series.low == series.high == (1, 1, 0)


def test_series_shows_an_unsure_band_before_a_recovery() -> None:
    recovered = ev(EventKind.RECOVERED, T0 - 600 * S)
    series = active_series(log(active_now=1, logged=(recovered,), heartbeats={"c": T0}), 3)
    assert series.low == (0, 0, 1)
    assert series.high == (1, 1, 1)
    assert series.unsure


def test_timeline_is_newest_first_and_bounded() -> None:
    joined = ev(EventKind.JOINED, T0 - 100 * S)
    left = ev(EventKind.LEFT, T0 - 10 * S, hb=T0 - 50 * S)
    got = timeline(log(logged=(joined, left)), limit=10)
    kinds = [t.event.kind for t in got]
    # its last beat's lines, both crossed before it left, are derived
    assert kinds == [EventKind.LEFT, EventKind.EXPIRED, EventKind.STALE, EventKind.JOINED]
    assert [t.derived for t in got] == [False, True, True, False]
    assert len(timeline(log(logged=(joined, left)), limit=1)) == 1
    old = ev(EventKind.JOINED, T0 - 2 * HOUR)
    assert timeline(log(logged=(old,)), limit=10) == []


# -- against a real redis-server --------------------------------------------------------


@pytest.fixture
def writer(redis_url: str) -> Iterator[RedisPresenceRegistry]:
    with RedisPresenceRegistry.from_url(redis_url, max_future_ms=None) as registry:
        yield registry


def test_group_logs_reads_events_heartbeats_and_crossings(
    writer: RedisPresenceRegistry,
) -> None:
    writer.set_ttl(TTL_MS)
    t = T0 - 1_800 * S
    writer.heartbeat("q", "g", "a", now_ns=t)
    writer.heartbeat("q", "g", "b", now_ns=t)
    writer.heartbeat("q", "other", "x", now_ns=t)
    writer.heartbeat("q", "g", "a", now_ns=T0 - S)  # recovered (was stale)
    writer.deregister("q", "g", "b", now_ns=t + 5 * S)
    writer.heartbeat("q", "g", "c", now_ns=T0 - 600 * S)  # joined, then stale
    (got,) = writer.execute(writer.plans.group_logs([("q", "g")], since_ns=T0 - HOUR, now_ns=T0))
    assert got.active_now == 1
    assert got.reach_ns is None
    assert not got.capped
    assert [(e.kind, e.consumer) for e in got.logged] == [
        (EventKind.JOINED, "a"),
        (EventKind.JOINED, "b"),
        (EventKind.LEFT, "b"),
        (EventKind.JOINED, "c"),
        (EventKind.RECOVERED, "a"),
    ]
    assert got.heartbeats == {"a": T0 - S, "b": None, "c": T0 - 600 * S}
    assert [(e.kind, e.consumer) for e in got.crossed] == [
        (EventKind.STALE, "c"),
        (EventKind.EXPIRED, "c"),
    ]
    series = active_series(got, points=7)
    assert series.reaches_back
    assert series.high[-1] == 1


def test_group_logs_says_when_the_log_does_not_reach_back(
    writer: RedisPresenceRegistry, redis_client: redis.Redis
) -> None:
    for i in range(30):
        writer.heartbeat("q", "g", f"c{i}", now_ns=T0 - 1_200 * S + i * S)
    plans = writer.plans
    (bounded,) = writer.execute(
        plans.group_logs([("q", "g")], since_ns=T0 - HOUR, now_ns=T0, entries=10)
    )
    assert len(bounded.logged) == 10
    assert bounded.reach_ns == T0 - 1_200 * S + 20 * S
    assert not active_series(bounded).reaches_back
    (whole,) = writer.execute(plans.group_logs([("q", "g")], since_ns=T0 - HOUR, now_ns=T0))
    assert whole.reach_ns is None
    redis_client.xtrim(
        plans.keys.queue_events("q"), maxlen=5, approximate=False
    )  # trimmed: the log lost its start
    (trimmed,) = writer.execute(plans.group_logs([("q", "g")], since_ns=T0 - HOUR, now_ns=T0))
    assert len(trimmed.logged) == 5
    assert trimmed.reach_ns == T0 - 1_200 * S + 25 * S


def test_group_logs_on_a_cluster(cluster_client: redis.cluster.RedisCluster) -> None:
    """Each queue's log, group and metadata are read on the node holding them."""
    registry = RedisPresenceRegistry(cluster_client, max_future_ms=None)
    registry.set_ttl(TTL_MS)
    queues = [f"queue-{i}" for i in range(6)]  # spread over the nodes by their hash tags
    for queue in queues:
        registry.heartbeat(queue, "g", "a", now_ns=T0 - 600 * S)
        registry.heartbeat(queue, "g", "b", now_ns=T0 - S)
        registry.describe(queue, "g", "b", {"host": queue})
    plans = registry.plans
    logs = registry.execute(
        plans.group_logs([(q, "g") for q in queues], since_ns=T0 - HOUR, now_ns=T0)
    )
    for queue, got in zip(queues, logs, strict=True):
        assert (got.queue, got.active_now, got.reach_ns) == (queue, 1, None)
        assert [e.consumer for e in got.logged] == ["a", "b"]
        assert [e.kind for e in got.crossed] == [EventKind.STALE, EventKind.EXPIRED]
        assert active_series(got, points=2).low == (0, 1)  # a had gone, b not yet come
        assert dict(registry.execute(plans.consumer_meta(queue, "g", "b"))) == {"host": queue}


@pytest.mark.parametrize(
    "kind",
    [EventKind.DRAINING, EventKind.CONFLICT, EventKind.RESTARTED, EventKind.DRAIN_REQUESTED],
)
def test_protocol_v2_events_are_not_transitions(kind: EventKind) -> None:
    """A consumer that joined, then said it is draining (or met a duplicate, restarted, was
    asked to drain) while it kept beating was active throughout: those events change no
    state, and the spans ignore them."""
    joined, other = ev(EventKind.JOINED, 100 * S), ev(kind, 150 * S)
    assert spans([joined, other], 995 * S) == [Span(100 * S, 1_000 * S, True)]
    left = ev(EventKind.LEFT, 300 * S, hb=295 * S)
    assert spans([joined, other, left], None) == [Span(100 * S, 300 * S, True)]

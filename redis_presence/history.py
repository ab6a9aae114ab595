"""A group's recent past from its transition events: timelines and the active count over
time (no I/O; `Planner.group_logs` reads what these build from).

Nothing extra is written on the heartbeat path: the past is rebuilt from the queue's event
log (``joined``, ``recovered``, ``left``, ``pruned``) and from the heartbeats of the group's
sorted set (the ``stale`` and ``expired`` crossings of the consumers still there), walking
back from the count at `GroupLog.now_ns`. What the log cannot tell is said, not guessed:

* A ``recovered`` event carries the new heartbeat, not the one before it, so when the
  consumer went stale before it is known only to lie after its previous known beat (plus
  the TTL): over that span the consumer counts as *maybe* active (`Series.high` counts it,
  `Series.low` does not).
* When the log was trimmed (or the read's bound was reached) past the start of the window,
  the series starts at `GroupLog.reach_ns`, and before it nothing is drawn.

The count uses the TTL in use now, for the whole window.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from .events import EventKind, PresenceEvent, crossed

HISTORY_WINDOW_NS = 3_600 * 1_000_000_000
"""How far back the dashboard's pictures look (an hour)."""


class Departed(NamedTuple):
    """A consumer's metadata as the log kept it when it left or was pruned (at `at_ns`)."""

    consumer: str
    kind: EventKind
    at_ns: int
    meta: dict[str, str]


class GroupLog(NamedTuple):
    """What one read of a group's recent past found (`Planner.group_logs`)."""

    queue: str
    group: str
    now_ns: int
    since_ns: int
    ttl_ms: int
    active_now: int
    """Active consumers at `now_ns` (the count the series walks back from)."""
    logged: tuple[PresenceEvent, ...]
    """The group's logged events read (oldest first), possibly some before `since_ns`."""
    heartbeats: dict[str, int | None]
    """The last heartbeat now of each consumer the history is about (None: gone)."""
    crossed: tuple[PresenceEvent, ...]
    """The stale and expired crossings in ``(since_ns, now_ns]`` of the consumers still in
    the group (derived from their heartbeats, as `changes` derives them)."""
    reach_ns: int | None
    """None when the log reaches back to `since_ns`; else the oldest instant it tells
    about (it was trimmed, or the read's bound was reached)."""
    capped: bool = False
    """The crossings read hit their bound: more consumers crossed a line than were read."""
    departures: tuple[Departed, ...] = ()
    """For each consumer of the group that left or was pruned in the entries read, the
    metadata the newest such entry kept (`keys.EVENT_FIELDS`), newest first."""

    @property
    def start_ns(self) -> int:
        """Where what the log tells begins: `since_ns`, or later when it does not reach."""
        return self.since_ns if self.reach_ns is None else max(self.since_ns, self.reach_ns)

    def to_dict(self) -> dict[str, object]:
        return {
            "queue": self.queue,
            "group": self.group,
            "now_ns": self.now_ns,
            "since_ns": self.since_ns,
            "start_ns": self.start_ns,
            "reaches_back": self.reach_ns is None,
            "capped": self.capped,
        }


class Span(NamedTuple):
    """``[start_ns, end_ns)`` during which a consumer was active (`sure`) or maybe was."""

    start_ns: int
    end_ns: int
    sure: bool


def stale_at(heartbeat_ns: int, ttl_ms: int) -> int:
    """The instant a consumer last seen at `heartbeat_ns` stops being active (the rule)."""
    return crossed(EventKind.STALE, heartbeat_ns, ttl_ms)


_ARRIVALS = (EventKind.JOINED, EventKind.RECOVERED)
_NOT_PRESENCE = frozenset(
    (EventKind.DRAINING, EventKind.CONFLICT, EventKind.RESTARTED, EventKind.DRAIN_REQUESTED)
)
"""The events of protocol version 2 that a beat of an active consumer (or a request) logs:
they say nothing of when it arrived or went, so the spans leave them out."""


def active_spans(
    events: Sequence[PresenceEvent],
    heartbeat_ns: int | None,
    *,
    start_ns: int,
    now_ns: int,
    ttl_ms: int,
) -> list[Span]:
    """When one consumer was active within ``[start_ns, now_ns)``, from its logged events
    (oldest first, none missing after `start_ns`; those of an active consumer's beat,
    `_NOT_PRESENCE`, left out) and its last heartbeat now (None: gone).

    Between two of its events the consumer beat without a ``recovered`` (else it would be
    logged), so it was active from an arrival until the next removal's stale line, or until
    its current heartbeat's; before a ``recovered`` it was inactive for a while that the log
    does not bound (a maybe span from its last known beat's stale line)."""
    spans: list[Span] = []
    events = [event for event in events if event.kind not in _NOT_PRESENCE]

    def add(start: int, end: int, sure: bool = True) -> None:
        start, end = max(start, start_ns), min(end, now_ns)
        if start < end:
            spans.append(Span(start, end, sure))

    def until_now(since: int, last_known: int | None) -> None:
        """Active from `since` to its current heartbeat's stale line."""
        if heartbeat_ns is not None:
            add(since, stale_at(heartbeat_ns, ttl_ms))
        elif last_known is not None:  # gone without an event: from when, unknown
            add(since, stale_at(last_known, ttl_ms))
            add(stale_at(last_known, ttl_ms), now_ns, sure=False)

    if not events:
        until_now(start_ns, None)
        return spans
    first = events[0]
    if first.kind is EventKind.RECOVERED:  # inactive for a while before it: since when?
        add(start_ns, first.at_ns, sure=False)
    elif first.kind in (EventKind.LEFT, EventKind.PRUNED):
        add(start_ns, min(first.at_ns, stale_at(first.last_heartbeat_ns or 0, ttl_ms)))
    for event, after in zip(events, [*events[1:], None], strict=True):
        if event.kind not in _ARRIVALS:
            continue  # gone until its next arrival
        beat = event.last_heartbeat_ns if event.last_heartbeat_ns is not None else event.at_ns
        if after is None:
            until_now(event.at_ns, beat)
        elif after.kind in (EventKind.LEFT, EventKind.PRUNED):
            add(event.at_ns, min(after.at_ns, stale_at(after.last_heartbeat_ns or 0, ttl_ms)))
        else:  # a recovered (or a joined without a removal logged): stale at some point
            add(event.at_ns, stale_at(beat, ttl_ms))
            add(stale_at(beat, ttl_ms), after.at_ns, sure=False)
    return spans


def consumer_spans(log: GroupLog) -> dict[str, list[Span]]:
    """Every consumer the history is about, with its spans from `GroupLog.start_ns`."""
    by_name: dict[str, list[PresenceEvent]] = {name: [] for name in log.heartbeats}
    for event in log.logged:
        by_name.setdefault(event.consumer, []).append(event)
    return {
        name: active_spans(
            events,
            log.heartbeats.get(name),
            start_ns=log.start_ns,
            now_ns=log.now_ns,
            ttl_ms=log.ttl_ms,
        )
        for name, events in by_name.items()
    }


class Series(NamedTuple):
    """The active count at each of `times_ns` (from `GroupLog.start_ns` to `now_ns`):
    `low` counts only who surely was active, `high` who maybe was too."""

    times_ns: tuple[int, ...]
    low: tuple[int, ...]
    high: tuple[int, ...]
    since_ns: int
    start_ns: int
    now_ns: int

    @property
    def reaches_back(self) -> bool:
        return self.start_ns <= self.since_ns

    @property
    def unsure(self) -> bool:
        return self.low != self.high

    @property
    def peak(self) -> int:
        return max(self.high, default=0)

    def to_dict(self) -> dict[str, object]:
        return {
            "times_ns": list(self.times_ns),
            "low": list(self.low),
            "high": list(self.high),
            "since_ns": self.since_ns,
            "start_ns": self.start_ns,
            "now_ns": self.now_ns,
            "reaches_back": self.reaches_back,
        }


def _active_at(spans: Iterable[Span], at_ns: int) -> tuple[bool, bool]:
    """(surely active, maybe active) at `at_ns`."""
    sure = maybe = False
    for span in spans:
        if span.start_ns <= at_ns < span.end_ns:
            sure |= span.sure
            maybe = True
    return sure, maybe


def active_series(log: GroupLog, points: int = 61) -> Series:
    """The active count at `points` evenly spaced instants from `start_ns` to `now_ns`
    (the last one is `now_ns`, where it is `active_now`), walked back from `active_now`:
    the consumers the history is about are counted from their spans, the others did not
    change (no event, no crossing) and count as they do now."""
    start, now = log.start_ns, log.now_ns
    points = max(2, points)
    times = tuple(start + (now - start) * i // (points - 1) for i in range(points))
    spans = consumer_spans(log)
    active_now = sum(
        1
        for name in spans
        if (hb := log.heartbeats.get(name)) is not None and now < stale_at(hb, log.ttl_ms)
    )
    steady = max(0, log.active_now - active_now)
    low: list[int] = []
    high: list[int] = []
    for i, at in enumerate(times):
        if i == points - 1:
            low.append(log.active_now)
            high.append(log.active_now)
            continue
        sure = maybe = 0
        for consumer_spans_ in spans.values():
            s, m = _active_at(consumer_spans_, at)
            sure += s
            maybe += m
        low.append(steady + sure)
        high.append(steady + maybe)
    return Series(times, tuple(low), tuple(high), log.since_ns, start, now)


class Transition(NamedTuple):
    """One line of a timeline: an event, and whether it was logged or derived."""

    event: PresenceEvent
    derived: bool

    def to_dict(self) -> dict[str, object]:
        return self.event.to_dict() | {"derived": self.derived}


def timeline(log: GroupLog, limit: int, consumer: str | None = None) -> list[Transition]:
    """The newest `limit` transitions of the group (or of one `consumer`) since
    `start_ns`, newest first: the logged events, the crossings of the consumers still
    there, and the crossings a removal's last heartbeat shows happened before it."""
    items = [Transition(e, False) for e in log.logged if e.at_ns > log.start_ns]
    items += [Transition(e, True) for e in log.crossed if e.at_ns > log.start_ns]
    for event in log.logged:
        if event.kind in (EventKind.LEFT, EventKind.PRUNED) and event.last_heartbeat_ns:
            for kind in (EventKind.STALE, EventKind.EXPIRED):
                at = crossed(kind, event.last_heartbeat_ns, log.ttl_ms)
                if log.start_ns < at <= event.at_ns:
                    items.append(Transition(event._replace(kind=kind, at_ns=at), True))
    if consumer is not None:
        items = [t for t in items if t.event.consumer == consumer]
    rank = {kind: i for i, kind in enumerate(EventKind)}
    items.sort(key=lambda t: (t.event.at_ns, not t.derived, rank[t.event.kind]), reverse=True)
    return items[: max(0, limit)]


__all__ = [
    "HISTORY_WINDOW_NS",
    "Departed",
    "GroupLog",
    "Series",
    "Span",
    "Transition",
    "active_series",
    "active_spans",
    "consumer_spans",
    "stale_at",
    "timeline",
]

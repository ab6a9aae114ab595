"""Transitions between two reads of the fleet, as events (no I/O).

The events issue brings `PresenceEvent` and `registry.follow()`: the store then says what
changed. Until it lands, the web service derives the same kinds by comparing successive
snapshots (`diff`). Write-driven kinds are inferred, so they carry the read's instant
where the write's own is unknown; time-driven kinds (`stale`, `expired`) carry the exact
instant the rule draws. Replaying the events of `diff(before, after)` onto the states of
`before` gives the states of `after` (tested).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from redis_presence.model import NS_PER_MS, ConsumerPresence, PresenceState

KINDS = ("joined", "recovered", "stale", "expired", "left", "pruned")
"""Every event kind, in the order events of the same instant are listed."""

_KIND_ORDER = {kind: i for i, kind in enumerate(KINDS)}
_RANK = {PresenceState.ACTIVE: 0, PresenceState.STALE: 1, PresenceState.EXPIRED: 2}

Key = tuple[str, str, str]


class WebEvent(NamedTuple):
    """One transition of one consumer (the field names of the events issue's
    `PresenceEvent`); `at_ns` is when it happened, in integer nanoseconds."""

    kind: str
    queue: str
    group: str
    consumer: str
    at_ns: int
    lease_count: int
    registered_at_ns: int | None
    last_heartbeat_ns: int | None

    @property
    def key(self) -> Key:
        return (self.queue, self.group, self.consumer)

    def to_dict(self) -> dict[str, object]:
        return self._asdict()


def stale_at_ns(last_heartbeat_ns: int, ttl_ms: int) -> int:
    """The first instant at which a consumer last seen at `last_heartbeat_ns` is stale."""
    return last_heartbeat_ns + (ttl_ms + 1) * NS_PER_MS


def expired_at_ns(last_heartbeat_ns: int, ttl_ms: int) -> int:
    """The first instant at which a consumer last seen at `last_heartbeat_ns` is expired."""
    return last_heartbeat_ns + (2 * ttl_ms + 1) * NS_PER_MS


def _event(kind: str, row: ConsumerPresence, at_ns: int) -> WebEvent:
    return WebEvent(
        kind,
        row.queue,
        row.group,
        row.consumer,
        at_ns,
        row.lease_count,
        row.registered_at_ns,
        row.last_heartbeat_ns,
    )


def _lapses(row: ConsumerPresence, ttl_ms: int, from_rank: int) -> list[WebEvent]:
    """`stale` and `expired` events from state rank `from_rank` up to the row's state."""
    events = []
    to_rank = _RANK[row.state]
    if from_rank < 1 <= to_rank:
        events.append(_event("stale", row, stale_at_ns(row.last_heartbeat_ns, ttl_ms)))
    if from_rank < 2 <= to_rank:
        events.append(_event("expired", row, expired_at_ns(row.last_heartbeat_ns, ttl_ms)))
    return events


def _changed(before: ConsumerPresence, after: ConsumerPresence, ttl_ms: int) -> list[WebEvent]:
    """Events of a consumer present in both reads."""
    if after.registered_at_ns != before.registered_at_ns:
        # Removed and registered again between the reads.
        gone = _removed(before, after.registered_at_ns, ttl_ms)
        return [*gone, _event("joined", after, after.registered_at_ns), *_lapses(after, ttl_ms, 0)]
    rank = _RANK[before.state]
    events: list[WebEvent] = []
    if after.last_heartbeat_ns > before.last_heartbeat_ns:
        # Its state just before the new beat, as far as the two reads tell (a beat in
        # between would have kept it active; none is known).
        gap_ms = (after.last_heartbeat_ns - before.last_heartbeat_ns) // NS_PER_MS
        lapsed = before._replace(state=PresenceState.classify(gap_ms, ttl_ms))
        events += _lapses(lapsed, ttl_ms, rank)
        if max(rank, _RANK[lapsed.state]) > 0:
            events.append(_event("recovered", after, after.last_heartbeat_ns))
        rank = 0
    return events + _lapses(after, ttl_ms, rank)


def _removed(row: ConsumerPresence, at_ns: int, ttl_ms: int) -> list[WebEvent]:
    """Events of a consumer that is gone: `pruned` if it was expired by then (prune removes
    only the expired), else `left`."""
    if at_ns >= expired_at_ns(row.last_heartbeat_ns, ttl_ms):
        lapsed = row._replace(state=PresenceState.EXPIRED)
        return [*_lapses(lapsed, ttl_ms, _RANK[row.state]), _event("pruned", row, at_ns)]
    return [_event("left", row, at_ns)]


def diff(
    before: Mapping[Key, ConsumerPresence],
    after: Iterable[ConsumerPresence],
    *,
    after_now_ns: int,
    ttl_ms: int,
) -> tuple[list[WebEvent], dict[Key, ConsumerPresence]]:
    """The events that turn the read `before` into the read `after` (taken at
    `after_now_ns`), ordered by `at_ns` then kind; and `after` keyed by consumer."""
    current = {row.key: row for row in after}
    events: list[WebEvent] = []
    for key, row in current.items():
        old = before.get(key)
        if old is None:
            events.append(_event("joined", row, row.registered_at_ns))
            events += _lapses(row, ttl_ms, 0)
        elif old != row:
            events += _changed(old, row, ttl_ms)
    for key, old in before.items():
        if key not in current:
            events += _removed(old, after_now_ns, ttl_ms)
    events.sort(key=lambda e: (e.at_ns, _KIND_ORDER[e.kind], e.key))
    return events, current


def replay(states: dict[Key, PresenceState], events: Iterable[WebEvent]) -> None:
    """Apply events to `{key: state}` in place (the reference a test checks `diff` with)."""
    for event in events:
        if event.kind in ("left", "pruned"):
            states.pop(event.key, None)
        elif event.kind in ("joined", "recovered"):
            states[event.key] = PresenceState.ACTIVE
        else:
            states[event.key] = PresenceState(event.kind)

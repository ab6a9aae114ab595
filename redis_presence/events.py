"""Transitions as events: the record, the rule's instants, and the cursor (no I/O).

Write-driven events (``joined``, ``recovered``, ``left``, ``pruned``) are logged by the same
script call that makes the change, in the queue's capped log (``P:{Q}:events``, see
`keys.EVENT_FIELDS`). Time-driven events (``stale``, ``expired``) are logged by no one: a
reader derives them from the heartbeat sorted sets for the window it asks about, a consumer
whose last beat lies in the window shifted by the horizon (and which has not beaten since).
"""

from __future__ import annotations

import base64
import binascii
import enum
import json
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from .keys import STORED_FIELDS, GroupKeys, Keyspace
from .model import NS_PER_MS

DEFAULT_EVENTS_KEPT = 10_000
"""About how many entries each queue's event log keeps (``XADD ... MAXLEN ~``); one entry
is one (kind, group) of one call, so a prune of a thousand consumers is one entry."""

EVENT_LOG_TTL_MS = 86_400_000
"""A queue's event log expires this long after its last event (a day), and leaves the event
index with the next prune after that: a queue that is gone leaves nothing behind. A cursor
older than this cannot go on (`PresenceResyncRequired`)."""

LOG_LAG_MS = 10_000
"""How far behind the reader's clock `changes` looks for log entries it has not read yet:
it covers a cluster caller that lists its log a moment after the script logged, and clocks
of cluster nodes up to this far apart. Entries read within it are remembered by the cursor,
so none is returned twice."""


class EventKind(str, enum.Enum):
    """What happened to a consumer (in the order events of one instant are given)."""

    STALE = "stale"
    EXPIRED = "expired"
    JOINED = "joined"
    RECOVERED = "recovered"
    LEFT = "left"
    PRUNED = "pruned"

    def __str__(self) -> str:
        return self.value


_RANK = {kind: rank for rank, kind in enumerate(EventKind)}
_LOGGED = {
    kind.value: kind
    for kind in (EventKind.JOINED, EventKind.RECOVERED, EventKind.LEFT, EventKind.PRUNED)
}


class PresenceEvent(NamedTuple):
    """One transition of one consumer, at `at_ns` (when it happened, by the rule).

    ``stale`` is at ``last_heartbeat_ns + ttl + 1 ms`` and ``expired`` at ``last_heartbeat_ns
    + 2 ttl + 1 ms``, exactly where the rule draws its lines; ``joined`` is at the first
    beat, ``recovered`` when the beat of a consumer that was not active arrived, ``left`` and
    ``pruned`` when the consumer was removed. `registered_at_ns` and `last_heartbeat_ns` are
    the consumer's at that moment.
    """

    kind: EventKind
    queue: str
    group: str
    consumer: str
    at_ns: int
    lease_count: int
    registered_at_ns: int | None = None
    last_heartbeat_ns: int | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        """The consumer: `(queue, group, consumer)`."""
        return (self.queue, self.group, self.consumer)

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready mapping with the field names of this class."""
        return {
            "kind": self.kind.value,
            "queue": self.queue,
            "group": self.group,
            "consumer": self.consumer,
            "at_ns": self.at_ns,
            "lease_count": self.lease_count,
            "registered_at_ns": self.registered_at_ns,
            "last_heartbeat_ns": self.last_heartbeat_ns,
        }


Ordered = tuple[tuple[int, int, tuple[int, ...], int, str, str, str], PresenceEvent]
"""An event with where it goes in `changes`' answer (`order`)."""


def order(event: PresenceEvent, logged_at: tuple[int, ...] | None = None) -> Ordered:
    """Events are given by `at_ns`; at one instant the derived ones (stale, expired) first,
    then the logged ones in the order they happened (`logged_at`: their place in the log),
    so that a consumer pruned and back, or back and gone, at one instant replays right; then
    by kind and name."""
    derived = logged_at is None
    place = () if logged_at is None else logged_at
    key = (event.at_ns, 0 if derived else 1, place, _RANK[event.kind], *event.key)
    return key, event


def crossed(kind: EventKind, last_heartbeat_ns: int, ttl_ms: int) -> int:
    """The instant a consumer last seen at `last_heartbeat_ns` turns stale (or expired)."""
    lines = 1 if kind is EventKind.STALE else 2
    return last_heartbeat_ns + (lines * ttl_ms + 1) * NS_PER_MS


def window(kind: EventKind, since_ns: int, now_ns: int, ttl_ms: int) -> tuple[int, int]:
    """`(low, high)`: the last heartbeats that cross `kind`'s line in ``(since_ns, now_ns]``
    are those with ``low < last_heartbeat_ns <= high``."""
    shift = crossed(kind, 0, ttl_ms)
    return since_ns - shift, now_ns - shift


def logged_events(
    keys: Keyspace, queue: str, entry_id: Any, fields: Mapping[Any, Any]
) -> list[Ordered]:
    """The events of one log entry (`keys.EVENT_FIELDS`), each with its place in
    `changes`' answer; a foreign entry yields none."""

    def text(value: Any) -> str:
        return value.decode() if isinstance(value, bytes) else str(value)

    plain = {text(name): value for name, value in fields.items()}
    kind = _LOGGED.get(text(plain.get("k", "")))
    member = plain.get("g")
    if kind is None or member is None:
        return []
    gk = keys.from_member(member)
    if gk.queue != queue:
        return []
    out = []
    for name, value in plain.items():
        if not name.startswith("c"):
            continue
        parts = text(value).split()
        if len(parts) != STORED_FIELDS + 1:
            continue
        at, registered, heartbeat, lease = map(int, parts)
        event = PresenceEvent(kind, gk.queue, gk.group, name[1:], at, lease, registered, heartbeat)
        out.append(order(event, stream_id(entry_id)))
    return out


def group_event(
    kind: EventKind, gk: GroupKeys, consumer: str, value: Any, ttl_ms: int
) -> PresenceEvent | None:
    """The `stale` / `expired` event of one consumer from its stored value."""
    parts = (value.decode() if isinstance(value, bytes) else str(value)).split()
    if len(parts) not in (STORED_FIELDS, STORED_FIELDS + 1):  # with progress, one more
        return None
    registered, heartbeat, lease = map(int, parts[:STORED_FIELDS])
    at = crossed(kind, heartbeat, ttl_ms)
    return PresenceEvent(kind, gk.queue, gk.group, consumer, at, lease, registered, heartbeat)


class Cursor(NamedTuple):
    """Where `changes` goes on from: the instant up to which events were given (`now_ns`),
    the server's millisecond when the logs were read (`server_ms`), and, for the logs read
    within `LOG_LAG_MS` of it, the last entry read of each (queue -> stream entry id)."""

    now_ns: int
    server_ms: int
    positions: dict[str, str]

    def encode(self) -> str:
        """The opaque string a caller keeps (it survives a restart)."""
        document = {"v": 1, "t": self.now_ns, "s": self.server_ms, "q": self.positions}
        raw = json.dumps(document, separators=(",", ":"), ensure_ascii=True).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, cursor: Any) -> Cursor:
        """The cursor a string names; anything else is a `ValueError` naming `cursor`."""
        if not isinstance(cursor, str):
            raise TypeError(f"cursor must be a str or None, got {type(cursor).__name__}")
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
            document = json.loads(raw)
            if document.get("v") != 1:
                raise ValueError
            now, server = document["t"], document["s"]
            positions = document["q"]
            if not (
                isinstance(now, int) and isinstance(server, int) and isinstance(positions, dict)
            ):
                raise ValueError
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in positions.items()):
                raise ValueError
        except (ValueError, KeyError, TypeError, AttributeError, binascii.Error, UnicodeError):
            raise ValueError(f"cursor is not one that changes() returned: {cursor!r:.60}") from None
        return cls(now, server, positions)


def stream_id(value: Any) -> tuple[int, int]:
    """A stream entry id as `(milliseconds, sequence)`."""
    ms, _, seq = (value.decode() if isinstance(value, bytes) else str(value)).partition("-")
    return int(ms), int(seq or 0)


def sorted_events(events: Iterable[Ordered]) -> list[PresenceEvent]:
    """The events in the order `changes` gives them (`order`)."""
    return [event for _, event in sorted(events, key=lambda item: item[0])]


class FollowSnapshot(NamedTuple):
    """What `follow` yields first, and again whenever it had to resync: every consumer at
    `now_ns` (the state), and the cursor its events go on from (the diffs)."""

    rows: list[Any]
    cursor: str
    now_ns: int


class FollowCursor(NamedTuple):
    """What `follow` yields after each read: the events so far are given, and `cursor` (at
    `now_ns`) is where to resume from (after a restart, with ``changes(cursor)``)."""

    cursor: str
    now_ns: int


FollowMessage = FollowSnapshot | PresenceEvent | FollowCursor
"""One message of `follow`: a snapshot, an event, or a cursor to resume from."""

DEFAULT_FOLLOW_INTERVAL_S = 1.0
"""How often `follow` asks for changes."""


def check_interval_s(value: Any) -> float:
    """A positive `interval_s`, in seconds, at most an hour."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"interval_s must be a number, got {type(value).__name__}")
    if not 0 < value <= 3600:
        raise ValueError(f"interval_s must be in (0, 3600], got {value!r}")
    return float(value)

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
import re
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from .errors import PresenceDataError, PresenceResyncRequired
from .keys import INDEX_MARK_MS, STORED_FIELDS, GroupKeys, Keyspace
from .model import NS_PER_MS, Skipped
from .replies import stored_numbers

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
    # Protocol version 2 (logged in mode 2 only):
    DRAINING = "draining"
    """A beat said its consumer is draining (the flag went from clear to set)."""
    CONFLICT = "conflict"
    """Two instances beat for one consumer at once (the first duplicate beat while none was
    active under the TTL)."""
    RESTARTED = "restarted"
    """An active consumer's beat came from a new instance (the process restarted)."""
    DRAIN_REQUESTED = "drain_requested"
    """A drain of the consumer was requested (`request_drain`; each request)."""

    def __str__(self) -> str:
        return self.value


_RANK = {kind: rank for rank, kind in enumerate(EventKind)}
_LOGGED = {
    kind.value: kind
    for kind in (
        EventKind.JOINED,
        EventKind.RECOVERED,
        EventKind.LEFT,
        EventKind.PRUNED,
        EventKind.DRAINING,
        EventKind.CONFLICT,
        EventKind.RESTARTED,
        EventKind.DRAIN_REQUESTED,
    )
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
    keys: Keyspace,
    queue: str,
    entry_id: Any,
    fields: Mapping[Any, Any],
    aside: list[tuple[str, str]] | None = None,
) -> list[Ordered]:
    """The events of one log entry (`keys.EVENT_FIELDS`), each with its place in
    `changes`' answer. An entry whose kind this package does not know (a later version's)
    yields none, unsaid; one of a known kind that a client does not write (its ``g`` not a
    group of this queue, a consumer field that is not four decimal integers, a field name
    that is not UTF-8) is set aside, wholly or that consumer's field alone, and the entry's
    id and why are appended to `aside` (docs/protocol.md, section 6)."""
    entry = _plain(entry_id)
    where = f"entry {entry}"
    try:
        plain = {_utf8(name): value for name, value in fields.items()}
    except UnicodeDecodeError:
        return _set_aside(aside, entry, f"{where} has a field name that is not UTF-8")
    kind = _LOGGED.get(_plain(plain.get("k", "")))
    if kind is None:
        return []
    member = plain.get("g")
    try:
        gk = None if member is None else keys.from_member(member)
    except PresenceDataError:
        gk = None
    if gk is None or gk.queue != queue:
        why = f"{where} names no group of this queue: g={member!r:.80}"
        return _set_aside(aside, entry, why)
    out = []
    for name, value in plain.items():
        if not name.startswith("c"):
            continue  # another field (a later version's): not this reader's
        numbers = _event_numbers(value)
        if numbers is None or name == "c":
            _set_aside(aside, entry, f"{where} field {name!r:.80} holds {value!r:.40}")
            continue
        at, registered, heartbeat, lease = numbers
        event = PresenceEvent(kind, gk.queue, gk.group, name[1:], at, lease, registered, heartbeat)
        out.append(order(event, stream_id(entry_id)))
    return out


def _plain(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _utf8(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _set_aside(aside: list[tuple[str, str]] | None, entry: str, why: str) -> list[Ordered]:
    if aside is not None:
        aside.append((entry, why))
    return []


def _event_numbers(value: Any) -> tuple[int, int, int, int] | None:
    """The four numbers of a consumer field (``at_ns registered_ns last_heartbeat_ns
    lease_count``, single spaces, 1 to 19 ASCII digits each), or None."""
    parts = _plain(value).split(" ")
    if len(parts) != STORED_FIELDS + 1:
        return None
    if not all(0 < len(part) <= 19 and part.isascii() and part.isdigit() for part in parts):
        return None
    at, registered, heartbeat, lease = map(int, parts)
    return at, registered, heartbeat, lease


def foreign_entries(log: str, queue: str, aside: list[tuple[str, str]]) -> list[Skipped]:
    """What a read of one log set aside (`logged_events`' `aside`), as the one `Skipped` its
    warning names: how many entries, and the first one's reason."""
    if not aside:
        return []
    n = len(dict.fromkeys(entry for entry, _ in aside))
    entries = "1 entry" if n == 1 else f"{n} entries"
    first = aside[0][1]
    return [
        Skipped(log, f"{entries} this package did not write (wholly or in part): {first}", queue)
    ]


class Departure(NamedTuple):
    """What a ``left`` or ``pruned`` entry of the log kept of a consumer that went: its
    metadata as stored then (`keys.META_VALUE`, still to decode), and when it went."""

    group: str
    consumer: str
    kind: EventKind
    at_ns: int
    meta: str


def logged_departures(keys: Keyspace, queue: str, fields: Mapping[Any, Any]) -> list[Departure]:
    """The metadata a ``left`` or ``pruned`` entry kept (its ``'m' + consumer`` fields,
    `keys.EVENT_FIELDS`); none for another entry, or a foreign one."""

    plain = {_plain(name): value for name, value in fields.items()}
    kind = _LOGGED.get(_plain(plain.get("k", "")))
    member = plain.get("g")
    if kind not in (EventKind.LEFT, EventKind.PRUNED) or member is None:
        return []
    try:
        gk = keys.from_member(member)
    except PresenceDataError:  # another program's entry: `logged_events` reports it
        return []
    if gk.queue != queue:
        return []
    out = []
    for name, value in plain.items():
        beat = plain.get("c" + name[1:]) if name.startswith("m") else None
        numbers = _event_numbers(beat) if beat is not None else None
        if numbers is not None:
            out.append(Departure(gk.group, name[1:], kind, numbers[0], _plain(value)))
    return out


def group_event(
    kind: EventKind, gk: GroupKeys, consumer: str, value: Any, ttl_ms: int
) -> PresenceEvent | None:
    """The `stale` / `expired` event of one consumer from its stored value (None for a
    value this package did not write: that consumer is set aside, as a snapshot does)."""
    numbers = stored_numbers(value)  # either protocol version's value
    if numbers is None:
        return None
    registered, heartbeat, lease = numbers
    at = crossed(kind, heartbeat, ttl_ms)
    return PresenceEvent(kind, gk.queue, gk.group, consumer, at, lease, registered, heartbeat)


MAX_CURSOR_CHARS = 1_000_000
"""The longest cursor `changes` decodes (its positions grow with the logs written within
`LOG_LAG_MS`, a few dozen bytes each); a longer one is refused before it is parsed."""

_BRACKETS = re.compile(rb"[\[\]{}]")
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"')
_MAX_BRACKETS = 16
"""A cursor's JSON nests at most three deep, in a handful of brackets: anything with more is
refused before ``json.loads`` (which would recurse into it)."""


def cursor_document(cursor: str) -> dict[str, Any]:
    """The JSON object a cursor string spells (base64url), checked for size and nesting
    before it is parsed, so no cursor makes ``json.loads`` recurse deep; anything else is a
    `ValueError` naming `cursor`."""
    if len(cursor) > MAX_CURSOR_CHARS:
        raise ValueError(
            f"cursor is not one that changes() returned: {len(cursor)} characters "
            f"(at most {MAX_CURSOR_CHARS})"
        )
    try:
        # validate: a character outside base64url is refused, not skipped
        raw = base64.b64decode(cursor + "=" * (-len(cursor) % 4), altchars=b"-_", validate=True)
        if len(_BRACKETS.findall(_STRINGS.sub(b"", raw))) > _MAX_BRACKETS:
            raise ValueError
        document = json.loads(raw)
    except (ValueError, TypeError, binascii.Error, UnicodeError, RecursionError):
        document = None
    if not isinstance(document, dict):
        raise ValueError(f"cursor is not one that changes() returned: {cursor!r:.60}")
    return document


class Window(NamedTuple):
    """Where a paged `changes` read stands inside one window (``(since, now_ns]`` of the
    events, the logs read up to the server's millisecond `server_ms`): the places reached
    in recently written logs (`recent`), then either the log being read (`log`: its queue
    and the last entry given, '' for none; logs of queues sorting before it are done) or,
    once every log is done, the group being derived (`derived`: its index member, the kind
    (0 stale, 1 expired), and the score and how many members at that score were given)."""

    now_ns: int
    server_ms: int
    recent: dict[str, str]
    log: tuple[str, str] | None
    derived: tuple[str, int, int, int] | None

    def to_json(self) -> dict[str, object]:
        return {
            "n": self.now_ns,
            "u": self.server_ms,
            "r": self.recent,
            "l": None if self.log is None else list(self.log),
            "d": None if self.derived is None else list(self.derived),
        }


class EventCursor(NamedTuple):
    """Where `changes` goes on from: the instant up to which events were given (`now_ns`),
    the server's millisecond when the logs were read (`server_ms`), and, for the logs read
    within `LOG_LAG_MS` of it, the last entry read of each (queue -> stream entry id); the
    epoch marker read with them (`epoch`, None when there was none), the prefix and the
    filter it was made for (`prefix`, `queue`, `group`), and, in the middle of a paged
    window, where it stands (`window`)."""

    now_ns: int
    server_ms: int
    positions: dict[str, str]
    epoch: str | None = None
    prefix: str | None = None
    queue: str | None = None
    group: str | None = None
    window: Window | None = None

    def encode(self) -> str:
        """The opaque string a caller keeps (it survives a restart)."""
        document: dict[str, object] = {
            "v": CURSOR_VERSION,
            "t": self.now_ns,
            "s": self.server_ms,
            "q": self.positions,
            "e": self.epoch,
            "f": [self.prefix, self.queue, self.group],
        }
        if self.window is not None:
            document["w"] = self.window.to_json()
        raw = json.dumps(document, separators=(",", ":"), ensure_ascii=True).encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @classmethod
    def decode(cls, cursor: Any) -> EventCursor:
        """The cursor a string names; anything else (too long, nested, forged, of another
        release) is a `ValueError` naming `cursor`. Parsed without deep recursion: its size
        and bracket count are checked first."""
        if not isinstance(cursor, str):
            raise TypeError(f"cursor must be a str or None, got {type(cursor).__name__}")
        document = cursor_document(cursor)
        try:
            version = document.get("v")
            if not _is_int(version):  # 2.0 or true is no version a writer spells
                raise ValueError
            if version == 1:
                now, server, positions = document["t"], document["s"], _positions(document["q"])
                if not (_is_int(now) and _is_int(server) and now >= 0 and server >= 0):
                    raise ValueError
                return cls(now, server, positions, LEGACY_EPOCH)
            if version != CURSOR_VERSION:
                raise ValueError
            now, server, positions = document["t"], document["s"], _positions(document["q"])
            epoch, (prefix, queue, group) = document["e"], document["f"]
            if not (_is_int(now) and _is_int(server) and now >= 0 and server >= 0):
                raise ValueError
            if not (epoch is None or isinstance(epoch, str)):
                raise ValueError
            if not all(name is None or isinstance(name, str) for name in (queue, group)):
                raise ValueError
            if not (prefix is None or isinstance(prefix, str)):
                raise ValueError
            window = _window(document["w"]) if "w" in document else None
        except (
            ValueError,
            KeyError,
            TypeError,
            AttributeError,
            binascii.Error,
            UnicodeError,
            RecursionError,
        ):
            raise ValueError(f"cursor is not one that changes() returned: {cursor!r:.60}") from None
        return cls(now, server, positions, epoch, prefix, queue, group, window)


def cursor_since(
    since_ns: int,
    *,
    epoch: str | None,
    prefix: str,
    queue: str | None = None,
    group: str | None = None,
) -> str:
    """A cursor whose events start after `since_ns` (what a caller without a saved cursor
    asks for: "since ten minutes ago"): the logs are read from the entries of `since_ns`'s
    millisecond on (their ids are the server's milliseconds), the stale and expired events
    derived for ``(since_ns, now]``. `epoch` is the marker Redis holds now (`Planner.epoch`),
    so a cursor of lost data still asks for a resync. At most `EVENT_LOG_TTL_MS` back, and
    a log trimmed past `since_ns` is a `PresenceResyncRequired` of `changes`, as for any
    cursor."""
    since_ms = since_ns // NS_PER_MS
    # `changes` reads each log from `server_ms - LOG_LAG_MS` on: from `since_ms` exactly.
    return EventCursor(since_ns, since_ms + LOG_LAG_MS, {}, epoch, prefix, queue, group).encode()


CURSOR_VERSION = 2
"""The version a cursor carries (1: before the epoch marker; such a cursor asks for a
resync)."""


LEGACY_EPOCH = "\x00"
"""The epoch of a cursor of version 1 (made before the epoch marker): `changes` answers it
with `PresenceResyncRequired`, so a `follow` or a live view re-reads a snapshot."""


def _is_int(value: Any) -> bool:
    return type(value) is int


_MAX_PLACE = 2**53
"""The largest score (a heartbeat in whole microseconds) or count of ties a paged window
names: a double's exact integers, far below what Redis takes as a score or a LIMIT offset."""


def _positions(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise ValueError
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValueError
    for entry in value.values():
        _place(entry)
    return value


_PLACE = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")


def _place(value: str) -> None:
    """A cursor's place: exactly ``ms-seq`` (docs/protocol.md, section 6), both parts below
    2^64; a `ValueError` for anything else (``ms`` alone or ``ms-``, which XRANGE would
    take, are no place a reader wrote)."""
    if not _PLACE.fullmatch(value):
        raise ValueError
    stream_id(value)


def _window(value: Any) -> Window:
    if not isinstance(value, dict):
        raise ValueError
    now, server, recent = value["n"], value["u"], _positions(value["r"])
    log, derived = value["l"], value["d"]
    if not (_is_int(now) and _is_int(server)):
        raise ValueError
    if log is not None:
        if not (isinstance(log, list) and len(log) == 2 and all(isinstance(x, str) for x in log)):
            raise ValueError
        if log[1]:
            _place(log[1])
        log = (log[0], log[1])
    if derived is not None:
        if not (
            isinstance(derived, list)
            and len(derived) == 4
            and isinstance(derived[0], str)
            and all(_is_int(x) and 0 <= x <= _MAX_PLACE for x in derived[1:])
            and derived[1] in (0, 1)
        ):
            raise ValueError
        derived = (derived[0], derived[1], derived[2], derived[3])
    if (log is None) == (derived is None):
        raise ValueError
    return Window(now, server, recent, log, derived)


def check_cursor_filter(
    cursor: EventCursor, keys: Keyspace, queue: str | None, group: str | None
) -> None:
    """A `ValueError` naming `cursor` unless it was made under this prefix for exactly this
    filter (a cursor of queue A holds no place in the logs of the other queues: used for
    every queue it would give their recent events again), and every place it holds is one
    of that filter, near where it was read."""
    if cursor.epoch == LEGACY_EPOCH:
        return  # an earlier release's cursor names no filter: `check_epoch` asks a resync
    if cursor.prefix is not None and cursor.prefix != keys.prefix:
        raise ValueError(
            f"cursor was returned under the prefix {cursor.prefix!r}, not {keys.prefix!r}: "
            "take a fresh one (changes(None))"
        )
    if (cursor.queue, cursor.group) != (queue, group):
        raise ValueError(
            f"cursor was returned for queue={cursor.queue!r} group={cursor.group!r}, not "
            f"for queue={queue!r} group={group!r}: a cursor goes on only with the filter it "
            "was made for; take a fresh one (changes(None)) for this filter"
        )
    places = dict(cursor.positions)
    if cursor.window is not None:
        places.update(cursor.window.recent)
    if cursor.queue is not None and set(places) - {cursor.queue}:
        raise ValueError(
            f"cursor is not one that changes() returned: it holds places in logs of other "
            f"queues than queue={cursor.queue!r}"
        )
    # A place is kept only within LOG_LAG_MS of the cursor's read: an older one (say
    # '0-0') would replay a whole log.
    low, high = cursor.server_ms - 2 * LOG_LAG_MS, cursor.server_ms + 2 * LOG_LAG_MS
    window = cursor.window
    if window is not None:
        high = max(high, window.server_ms + 2 * LOG_LAG_MS)
        if window.server_ms < cursor.server_ms or window.now_ns < cursor.now_ns:
            raise ValueError("cursor is not one that changes() returned: its window is forged")
        if window.log is not None:
            if window.log[0] and queue is not None and window.log[0] != queue:
                raise ValueError("cursor is not one that changes() returned: its window is forged")
            if window.log[1]:
                places[""] = window.log[1]
        if window.derived is not None and window.derived[0]:
            _check_member(keys, window.derived[0], queue, group)
    if not all(low <= stream_id(place)[0] <= high for place in places.values()):
        raise ValueError(
            "cursor is not one that changes() returned: it holds a place in a log far from "
            "where it was read"
        )


def _check_member(keys: Keyspace, member: str, queue: str | None, group: str | None) -> None:
    """The group a paged window goes on from is one of this prefix and filter."""
    try:
        gk = keys.from_member(member)
    except PresenceDataError:
        gk = None
    if gk is None or (queue is not None and gk.queue != queue):
        raise ValueError("cursor is not one that changes() returned: its window is forged")
    if group is not None and gk.group != group:
        raise ValueError("cursor is not one that changes() returned: its window is forged")


def check_cursor_clock(cursor: EventCursor, server_ms: int, now_ns: int | None) -> None:
    """A `ValueError` naming `cursor` unless its instants are ones a read could have made:
    its server milliseconds at most LOG_LAG_MS ahead of the server clock (`server_ms`, the
    clocks of a cluster's nodes differ by up to that), and the instant its events were
    given up to (and its window's) no later than that, or than the caller's explicit
    `now_ns`. A window moved ahead would give the stale and expired events of a time to
    come; a cursor moved ahead would give none until then."""
    window = cursor.window
    made_ms = cursor.server_ms if window is None else max(cursor.server_ms, window.server_ms)
    if made_ms > server_ms + LOG_LAG_MS:
        raise ValueError(
            f"cursor is not one that changes() returned: its position ({made_ms} ms) is "
            f"ahead of the server clock ({server_ms} ms)"
        )
    latest = max((server_ms + LOG_LAG_MS) * NS_PER_MS, now_ns or 0)
    instant = cursor.now_ns if window is None else max(cursor.now_ns, window.now_ns)
    if instant > latest:
        raise ValueError(
            f"cursor is not one that changes() returned: its instant ({instant} ns) is ahead "
            f"of the server clock ({server_ms} ms) and of now_ns ({now_ns})"
        )


def check_epoch(cursor: EventCursor, epoch: str | None) -> None:
    """`PresenceResyncRequired` unless the data a cursor was read from is still there: the
    epoch marker it carries is the one Redis holds (a marker gone or changed means Redis
    lost its data: restarted without persistence, flushed, or failed over to an empty
    node). A cursor made before any marker existed goes on."""
    if cursor.epoch == LEGACY_EPOCH:
        raise PresenceResyncRequired(
            "this cursor was made by an earlier release (without the epoch marker): take a "
            "fresh snapshot() and a fresh cursor (changes(None))"
        )
    if cursor.epoch is not None and cursor.epoch != epoch:
        lost = "is gone" if epoch is None else "changed"
        raise PresenceResyncRequired(
            f"Redis lost the data this cursor was read from (its epoch marker {lost}: a "
            "restart without persistence, a flush, or a failover to an empty node): take a "
            "fresh snapshot() and a fresh cursor (changes(None))"
        )


DEFAULT_CHANGES_LIMIT = 1_000
"""About how many events one `changes` call gives at most (a log entry is never split)."""

MAX_CHANGES_LIMIT = 100_000
"""The largest `limit` `changes` takes."""


def check_changes_limit(value: Any) -> int:
    """A positive int `limit`, at most MAX_CHANGES_LIMIT."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"limit must be an int, got {type(value).__name__}")
    if not 1 <= value <= MAX_CHANGES_LIMIT:
        raise ValueError(f"limit must be in [1, {MAX_CHANGES_LIMIT}], got {value!r}")
    return value


class Changes(tuple[list[PresenceEvent], str]):
    """What `changes` returns: the pair ``(events, cursor)`` (so ``events, cursor =
    changes(...)`` unpacks it), and `more`: True when the answer stopped at its `limit` in
    the middle of its window, so the caller should ask again at once (from `cursor`)."""

    more: bool

    def __new__(cls, events: list[PresenceEvent], cursor: str, more: bool = False) -> Changes:
        self = super().__new__(cls, (events, cursor))
        self.more = more
        return self

    def __repr__(self) -> str:
        return f"Changes({len(self[0])} events, more={self.more})"

    @property
    def events(self) -> list[PresenceEvent]:
        """The events, in `order`."""
        return self[0]

    @property
    def cursor(self) -> str:
        """Where the next call goes on from."""
        return self[1]


def stream_id(value: Any) -> tuple[int, int]:
    """A stream entry id as `(milliseconds, sequence)` (a `ValueError` unless it is one)."""
    ms, _, seq = (value.decode() if isinstance(value, bytes) else str(value)).partition("-")
    if not (ms.isdigit() and (seq.isdigit() or not seq)) or len(ms) > 20 or len(seq) > 20:
        raise ValueError(f"not a stream id: {value!r:.40}")
    place = int(ms), int(seq or 0)
    if max(place) >= 2**64:  # what Redis would refuse (an error reply, not a place)
        raise ValueError(f"not a stream id: {value!r:.40}")
    return place


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


class HeldGroups:
    """The groups a follower holds consumers of (from its snapshots and events), and the
    check that they are still there: a group whose keys (or whose place in the index) are
    gone without the events that empty a group was lost (keys deleted by hand, data lost),
    and the follower must resync. `due` names at most a page of them per complete read
    (those found gone at the last check first, then the others in turn); `check` takes
    what Redis said of them. A group found gone is lost only when it is still gone at the
    next check, after a whole window was read in between (which gives the events of a group
    emptied before the first check); on a cluster, where a log's clock may run LOG_LAG_MS
    ahead and a group may wait up to INDEX_MARK_MS for its index entry, only that much
    later. Not shared between threads: one per `follow`."""

    __slots__ = ("_checks", "_turn", "clustered", "held", "indexed", "suspects")

    def __init__(self, *, clustered: bool, indexed: bool) -> None:
        self.clustered = clustered
        self.indexed = indexed
        """Whether the follower's reads find its groups through the index (every filter
        but one group's, which is read without it)."""
        self.held: dict[tuple[str, str], set[str]] = {}
        self.suspects: dict[tuple[str, str], tuple[int, int]] = {}
        """group -> (the check that found it gone first, the server ms of that read)."""
        self._checks = 0
        self._turn = 0

    def start(self, rows: Iterable[Any]) -> None:
        """A snapshot: the groups of its rows, nothing else."""
        self.held = {}
        self.suspects = {}
        for row in rows:
            self.held.setdefault((row.queue, row.group), set()).add(row.consumer)

    def apply(self, event: PresenceEvent) -> None:
        """An event: a consumer that left or was pruned is not held; any other is."""
        name = (event.queue, event.group)
        if event.kind in (EventKind.LEFT, EventKind.PRUNED):
            consumers = self.held.get(name)
            if consumers is not None:
                consumers.discard(event.consumer)
                if not consumers:
                    del self.held[name]
                    self.suspects.pop(name, None)
        else:
            self.held.setdefault(name, set()).add(event.consumer)

    def due(self, most: int) -> list[tuple[str, str]]:
        """The groups to check after this read: at most `most`, the suspects first."""
        out = [name for name in self.suspects if name in self.held][:most]
        groups = [name for name in self.held if name not in self.suspects]
        if groups and len(out) < most:
            start = self._turn % len(groups)
            turn = (groups[start:] + groups[:start])[: most - len(out)]
            self._turn = start + len(turn)
            out += turn
        return out

    def check(
        self, due: list[tuple[str, str]], gone: Mapping[tuple[str, str], str], ms: int
    ) -> None:
        """What Redis said of the groups `due` at the read of server millisecond `ms`
        (`gone`: group -> "keys" or "index"): `PresenceResyncRequired` when a group held
        since the last check is still gone."""
        self._checks += 1
        for name in due:
            if name not in gone:
                self.suspects.pop(name, None)
        for name, what in gone.items():
            if name not in self.held:
                continue
            first, first_ms = self.suspects.setdefault(name, (self._checks, ms))
            settle = 0 if not self.clustered else LOG_LAG_MS
            if what == "index" and self.clustered:
                settle += INDEX_MARK_MS
            if first < self._checks and ms - first_ms >= settle:
                where = (
                    "its keys are gone"
                    if what == "keys"
                    else "it is no longer in the index of groups"
                )
                raise PresenceResyncRequired(
                    f"Redis lost consumers this reader holds: the group {name[0]!r} / "
                    f"{name[1]!r}, {where}, without the events that empty a group (keys "
                    "deleted by hand, or data lost): take a fresh snapshot() and a fresh "
                    "cursor (changes(None))"
                )

    def __bool__(self) -> bool:
        return bool(self.held)


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

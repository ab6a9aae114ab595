"""The fleet's events page (`/events`): the events of every queue (or of one queue or
group) since an instant, or after a cursor, in order, a page at a time, filtered by kind.

What one view costs Redis: at most `READS` calls of `registry.changes` of `READ_LIMIT`
events each (the event logs read from the start's millisecond on, `XRANGE ... COUNT` a log
at a time, and the stale and expired crossings of the window derived from each group's
sorted set, a page of groups a round: `Planner.changes`), stopping once the page holds
`SHOWN` events of the kinds asked for or the window reaches now. Without a cursor the start
is `since` (15 minutes ago by default): the logs' entry ids are the server's milliseconds
(`events.cursor_since`). The page's cursor goes on where it stopped.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import NamedTuple

from redis_presence.events import EventCursor, EventKind, PresenceEvent

from .params import parse_members
from .reads import PresenceData

DEFAULT_SINCE = "15m"
SHOWN = 200
"""Events a page holds at least, when the window has them (a read is never split)."""
READ_LIMIT = 200
"""Events one `changes` call gives at most."""
READS = 5
"""`changes` calls one view makes at most (a page of rare kinds says it stopped early)."""
DERIVED = frozenset({EventKind.STALE, EventKind.EXPIRED})


class EventsPage(NamedTuple):
    """The events read (of the kinds asked for), the cursor to go on from, whether more
    were due at once when the page stopped (`more`), the instant it reached (`now_ns`)
    and how many events it read in all (those of other kinds too)."""

    events: list[PresenceEvent]
    cursor: str
    more: bool
    now_ns: int
    read: int

    def to_dict(self) -> dict[str, object]:
        return {
            "events": [e.to_dict() | {"derived": e.kind in DERIVED} for e in self.events],
            "cursor": self.cursor,
            "more": self.more,
            "now_ns": self.now_ns,
            "read": self.read,
        }


def parse_kinds(values: Collection[str]) -> frozenset[EventKind]:
    """`kind` query values (repeatable, or comma-separated) as kinds; `ValueError` else."""
    return parse_members("kind", EventKind, values)


async def events_page(
    reads: PresenceData,
    cursor: str,
    *,
    queue: str | None,
    group: str | None,
    kinds: frozenset[EventKind],
) -> EventsPage:
    """The events after `cursor` (of `kinds`, all when empty), up to `READS` reads of
    `READ_LIMIT`, until `SHOWN` are kept or the window reaches now. `ValueError` for a
    cursor of another filter, `PresenceResyncRequired` for one that cannot go on."""
    kept: list[PresenceEvent] = []
    read = 0
    more = True
    for _ in range(READS):
        found = await reads.changes(cursor, queue=queue, group=group, limit=READ_LIMIT)
        events, cursor = found
        more = bool(getattr(found, "more", False))
        read += len(events)
        kept += [e for e in events if not kinds or e.kind in kinds]
        if not more or len(kept) >= SHOWN:
            break
    return EventsPage(kept, cursor, more, EventCursor.decode(cursor).now_ns, read)


__all__ = ["DEFAULT_SINCE", "EventsPage", "events_page", "parse_kinds"]

"""Which rows a page holds: the filters of the lists of groups and consumers, and the page
of consumer rows ordered by `(queue, group, consumer)` (no I/O), whole (`page_of`) or fed
a group at a time (`PageCollector`). Cursors, limits and links are `paging`'s.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

from redis_presence.model import ConsumerPresence, PresenceState

from .paging import Cursor, Key, Page

_key = itemgetter(0, 1, 2)


@dataclass(frozen=True)
class ConsumerFilter:
    """Which consumers a page shows: exact queue and group, states, a name search,
    (`stuck`) only stuck ones, and a metadata field's exact value (`meta`: ``(field,
    value)``; value None: consumers without the field), which needs rows read with their
    metadata."""

    queue: str | None = None
    group: str | None = None
    states: frozenset[PresenceState] = frozenset()
    search: str | None = None
    stuck: bool = False
    meta: tuple[str, str | None] | None = None

    def matches(self, row: ConsumerPresence) -> bool:
        return (
            (self.queue is None or row.queue == self.queue)
            and (self.group is None or row.group == self.group)
            and (not self.states or row.state in self.states)
            and (not self.search or self.search.casefold() in row.consumer.casefold())
            and (not self.stuck or row.stuck)
            and (self.meta is None or row.meta.get(self.meta[0]) == self.meta[1])
        )

    @property
    def by_rows(self) -> bool:
        """Whether it refuses rows of its groups (so a listed group may have no match)."""
        return self.search is not None or bool(self.states) or self.stuck or self.meta is not None

    def bounds(self, rows: Sequence[ConsumerPresence]) -> tuple[int, int]:
        """The slice of `rows` (ordered by key) that can hold matches of queue and group."""
        if self.queue is None:
            return 0, len(rows)
        if self.group is None:
            low = bisect_left(rows, (self.queue,), key=_key)
            high = bisect_left(rows, (self.queue + "\x00",), key=_key)
            return low, max(low, high)
        low = bisect_left(rows, (self.queue, self.group), key=_key)
        high = bisect_left(rows, (self.queue, self.group + "\x00"), key=_key)
        return low, max(low, high)


def _any_match(rows: Sequence[ConsumerPresence], where: ConsumerFilter, indexes: range) -> bool:
    return any(where.matches(rows[i]) for i in indexes)


def page_of(
    rows: Sequence[ConsumerPresence],
    where: ConsumerFilter,
    *,
    cursor: Cursor | None,
    limit: int,
) -> Page[ConsumerPresence]:
    """The `limit` matching rows after (or before) `cursor`, or the first ones without it.

    `rows` must be ordered by `(queue, group, consumer)`, as snapshots are.
    """
    low, high = where.bounds(rows)
    picked: list[ConsumerPresence] = []
    if cursor is not None and cursor.before:
        stop = min(high, max(low, bisect_left(rows, cursor.key, lo=low, hi=high, key=_key)))
        i = stop - 1
        while i >= low and len(picked) <= limit:
            if where.matches(rows[i]):
                picked.append(rows[i])
            i -= 1
        more_before = len(picked) > limit
        picked = picked[:limit][::-1]
        more_after = _any_match(rows, where, range(stop, high))
    else:
        start = low
        if cursor is not None:
            start = min(high, max(low, bisect_right(rows, cursor.key, lo=low, hi=high, key=_key)))
        i = start
        while i < high and len(picked) <= limit:
            if where.matches(rows[i]):
                picked.append(rows[i])
            i += 1
        more_after = len(picked) > limit
        picked = picked[:limit]
        more_before = _any_match(rows, where, range(start - 1, low - 1, -1))
    return Page.of(picked, _key, more_before=more_before, more_after=more_after)


class PageCollector:
    """`page_of` over rows fed in any order of groups (a streaming read hands them out in
    the index's order), holding at most about twice `limit` rows: the page being built and
    whether a match lies on the cursor's other side, never the rows it skipped."""

    __slots__ = ("_beyond", "_bound", "_kept", "before", "cursor", "limit", "where")

    def __init__(self, where: ConsumerFilter, *, cursor: Cursor | None, limit: int) -> None:
        self.where, self.cursor, self.limit = where, cursor, limit
        self.before = cursor is not None and cursor.before
        self._kept: list[ConsumerPresence] = []
        self._bound: Key | None = None
        """Once `limit` + 1 rows are kept: the key past which a row can no longer be on the
        page (and the page is known to have a neighbour on that side)."""
        self._beyond = False
        """A match lies on the cursor's other side (a neighbour page on that side)."""

    @property
    def full(self) -> bool:
        """The page's side holds more than a page: rows further from the cursor cannot be on
        it (so a reader going away from the cursor may stop)."""
        return len(self._kept) > self.limit

    @property
    def beyond(self) -> bool:
        """A match on the cursor's other side was fed (the neighbour page there exists)."""
        return self._beyond

    def mark_beyond(self) -> None:
        """A match on the cursor's other side is known without feeding it (from counts)."""
        self._beyond = True

    def feed(self, rows: Iterable[ConsumerPresence]) -> None:
        where, cursor, before, bound = self.where, self.cursor, self.before, self._bound
        kept = self._kept
        for row in rows:
            if not where.matches(row):
                continue
            key = _key(row)
            if cursor is not None and (key >= cursor.key if before else key <= cursor.key):
                self._beyond = True
            elif bound is None or (key > bound if before else key < bound):
                kept.append(row)
                if len(kept) > 2 * self.limit + 1:
                    bound = self._trim()

    def _trim(self) -> Key | None:
        """Keep the `limit` + 1 rows nearest the cursor; the bound they set."""
        self._kept.sort(key=_key)
        most = self.limit + 1
        if self.before:
            del self._kept[:-most]  # in place: `feed` holds the list
        else:
            del self._kept[most:]
        if len(self._kept) == most:
            self._bound = _key(self._kept[0] if self.before else self._kept[-1])
        return self._bound

    def page(self) -> Page[ConsumerPresence]:
        """The page `page_of` gives for every row fed so far."""
        self._trim()
        kept, limit = self._kept, self.limit
        if self.before:
            more_before, more_after = len(kept) > limit, self._beyond
            picked = kept[-limit:] if len(kept) > limit else kept
        else:
            more_before, more_after = self._beyond, len(kept) > limit
            picked = kept[:limit]
        return Page.of(picked, _key, more_before=more_before, more_after=more_after)


@dataclass(frozen=True)
class GroupFilter:
    """Which groups a page of groups shows: an exact queue and group (the API), names that
    contain a text (the dashboard, case-folded), groups with consumers in one of `states`,
    (`attention`) only those nobody reads or below their declared minimum, and (`stuck`)
    only those with a stuck consumer (which their counts cannot say: a read of their
    consumers, `PresenceData.group_page`), and (`dead_leases`) only those whose expired
    consumers hold leases (from the count of the totals' read: the dashboard's order)."""

    queue: str | None = None
    group: str | None = None
    queue_text: str = ""
    group_text: str = ""
    states: frozenset[PresenceState] = frozenset()
    attention: bool = False
    stuck: bool = False
    dead_leases: bool = False

    def names(self, queue: str, group: str) -> bool:
        """Whether the names pass (checked before the group is counted)."""
        return (
            (self.group is None or group == self.group)
            and (not self.queue_text or self.queue_text.casefold() in queue.casefold())
            and (not self.group_text or self.group_text.casefold() in group.casefold())
        )

    @property
    def by_names(self) -> bool:
        return self.group is not None or bool(self.queue_text or self.group_text)

    def counts(self, stats: Any) -> bool:
        """Whether a counted group (with `.active`, `.stale`, `.expired`, `.below`) passes."""
        have = {
            PresenceState.ACTIVE: stats.active,
            PresenceState.STALE: stats.stale,
            PresenceState.EXPIRED: stats.expired,
        }
        return (
            (not self.states or any(have[s] for s in self.states))
            and (not self.attention or stats.active == 0 or stats.below)
            and (not self.stuck or stats.active > 0)  # only an active consumer is stuck
        )

    @property
    def by_counts(self) -> bool:
        return bool(self.states) or self.attention or self.stuck

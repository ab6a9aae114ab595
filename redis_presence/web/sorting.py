"""The groups page sorted by a count over every group (``sort=``), not only the page's.

A count's order needs every group's counts: it comes from the totals' read (one read of
every group, shared by every page for a few seconds, `PresenceData.totals`), which the
cards show too. That read orders the groups and picks the page's; the page's rows are then
read now (`PresenceData.groups_named`: they cost what a filtered page costs) and ordered
again by what they hold now, so a row never shows older counts than an unsorted page's.
Pages are keyset: a cursor names the last (first) group of a page and its count, never an
offset (its third part, which a groups cursor leaves empty, holds the count). No I/O here.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from .paging import Cursor, Key, Page, PageAsk
from .params import BadRequest

COLUMNS = ("active", "stale", "expired", "min")
"""The counts a groups page sorts by: ``sort=active`` (the fewest first) or ``sort=-active``
(the most first); ``min`` is the declared minimum (an undeclared group's is below 0)."""


class Sort(NamedTuple):
    column: str
    descending: bool

    @property
    def name(self) -> str:
        return ("-" if self.descending else "") + self.column

    def value(self, stats: Any) -> int:
        """The count `stats` (a `GroupStats`) sorts by."""
        if self.column == "min":
            return -1 if stats.min_active is None else int(stats.min_active)
        return int(getattr(stats, self.column))

    def position(self, stats: Any) -> tuple[int, str, str]:
        """Where `stats` lies in this order (ties in name order)."""
        value = self.value(stats)
        return (-value if self.descending else value, stats.queue, stats.group)

    def key(self, stats: Any) -> Key:
        """The cursor key of `stats` in this order."""
        return (stats.queue, stats.group, str(self.value(stats)))


def parse(value: str | None) -> Sort | None:
    """The ``sort`` query value (None: the index's order), or `BadRequest` naming it."""
    if not value:
        return None
    column = value.removeprefix("-")
    if column not in COLUMNS:
        known = ", ".join(f"{c} or -{c}" for c in COLUMNS)
        raise BadRequest("sort", f"sort must be one of {known}, got {value!r:.60}")
    return Sort(column, value.startswith("-"))


def _cursor_position(sort: Sort, cursor: Cursor) -> tuple[int, str, str]:
    queue, group, count = cursor.key
    if not (count.lstrip("-").isdigit() and len(count) <= 20):
        raise BadRequest("cursor", "cursor must be a cursor of this sorted list of groups")
    value = int(count)
    return (-value if sort.descending else value, queue, group)


def page(rows: Sequence[Any], sort: Sort, ask: PageAsk) -> Page[Any]:
    """The page `ask` asks of `rows` (every group that passes the filters) in `sort`'s
    order: after or before the cursor's position (a page before it that reaches the start
    is the first page)."""
    ordered = sorted(rows, key=sort.position)
    positions = [sort.position(g) for g in ordered]
    limit = ask.limit
    if ask.cursor is None:
        start = 0
    elif ask.before:
        end = bisect.bisect_left(positions, _cursor_position(sort, ask.cursor))
        start = max(0, end - limit)
        if start > 0:
            return Page.of(ordered[start:end], sort.key, more_before=True, more_after=True)
        start = 0  # reaches the start: the first page
    else:
        start = bisect.bisect_right(positions, _cursor_position(sort, ask.cursor))
    shown = ordered[start : start + limit]
    more_after = start + limit < len(ordered)
    return Page.of(shown, sort.key, more_before=start > 0, more_after=more_after)


def reorder(rows: Sequence[Any], sort: Sort) -> list[Any]:
    """`rows` (a page read now) in `sort`'s order, by what they hold now."""
    return sorted(rows, key=sort.position)


def wanted(rows: Sequence[Any]) -> Callable[[str, str], bool]:
    """A name filter passing exactly the groups of `rows`."""
    names = {(g.queue, g.group) for g in rows}
    return lambda queue, group: (queue, group) in names


__all__ = ["COLUMNS", "Sort", "page", "parse", "reorder", "wanted"]

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

from redis_presence.verdict import Verdict

from .paging import Cursor, Key, Page, PageAsk
from .params import BadRequest

COLUMNS = ("active", "stale", "expired", "min", "leases", "dead_leases")
"""The counts a groups page sorts by: ``sort=active`` (the fewest first) or ``sort=-active``
(the most first); ``min`` is the declared minimum (an undeclared group's is below 0),
``leases`` the leases its consumers hold and ``dead_leases`` those its expired consumers
hold (counted with the stuck consumers; below 0 before the first count)."""
ATTENTION = "attention"
"""The default order (``sort=attention``): the groups that need a look first (`need`),
each kind in name order, then the rest in name order."""
QUEUE = "queue"
"""``sort=queue``: the index's order (by queue, then group), read from the cursor on."""
_LEVEL = {Verdict.STOPPED: 3, Verdict.STALLED: 2, Verdict.DEGRADED: 1}


def need(stats: Any) -> int:
    """How much `stats` (a `GroupStats`) needs a look, 0 (none) to 7: its verdict (STOPPED,
    then STALLED, then DEGRADED; OK and DRAINING need none), and within each, leases held by
    its expired consumers first (work nobody will finish)."""
    return 2 * _LEVEL.get(stats.verdict, 0) + (1 if stats.leases_expired else 0)


class Sort(NamedTuple):
    column: str
    descending: bool

    @property
    def name(self) -> str:
        return ("-" if self.descending else "") + self.column

    def value(self, stats: Any) -> int:
        """The count `stats` (a `GroupStats`) sorts by (``attention``: -`need`, so that
        the groups needing a look come first)."""
        if self.column == ATTENTION:
            return -need(stats)
        if self.column == QUEUE:  # the index's order, paged from the totals' rows
            return 0
        if self.column == "min":
            found = stats.min_active
        elif self.column == "dead_leases":
            found = stats.leases_expired
        else:
            found = getattr(stats, self.column)
        return -1 if found is None else int(found)

    def position(self, stats: Any) -> tuple[int, str, str]:
        """Where `stats` lies in this order (ties in name order)."""
        value = self.value(stats)
        return (-value if self.descending else value, stats.queue, stats.group)

    def key(self, stats: Any) -> Key:
        """The cursor key of `stats` in this order."""
        return (stats.queue, stats.group, str(self.value(stats)))


DEFAULT = Sort(ATTENTION, False)
"""The order of a groups page without ``sort``: attention first."""
BY_QUEUE = Sort(QUEUE, False)
"""The index's order over the totals' rows (a filter only the totals' count knows)."""


def parse(value: str | None) -> Sort | None:
    """The ``sort`` query value (None: ``queue``, the index's order; absent or empty:
    `DEFAULT`), or `BadRequest` naming it."""
    if not value:
        return DEFAULT
    if value == QUEUE:
        return None
    column = value.removeprefix("-")
    if column not in (*COLUMNS, ATTENTION) or value == "-" + ATTENTION:
        known = ", ".join(f"{c} or -{c}" for c in COLUMNS)
        raise BadRequest("sort", f"sort must be {ATTENTION}, {QUEUE}, {known}, got {value!r:.60}")
    return Sort(column, value.startswith("-"))


def _cursor_position(sort: Sort, cursor: Cursor) -> tuple[int, str, str]:
    queue, group, count = cursor.key
    if not (count.lstrip("-").isdigit() and len(count) <= 20):
        raise BadRequest("cursor", "cursor must be a cursor of this sorted list of groups")
    value = int(count)
    return (-value if sort.descending else value, queue, group)


class Ordered(NamedTuple):
    """Rows in a sort's order, with each one's position (`Sort.position`)."""

    positions: list[tuple[int, str, str]]
    rows: list[Any]

    def only(self, keep: Callable[[Any], bool]) -> Ordered:
        """The rows `keep` passes, in the same order (no position computed again)."""
        picked = [i for i, row in enumerate(self.rows) if keep(row)]
        return Ordered([self.positions[i] for i in picked], [self.rows[i] for i in picked])


def ordered(rows: Sequence[Any], sort: Sort) -> Ordered:
    """`rows` in `sort`'s order, each position computed once."""
    keyed = sorted((sort.position(g), i) for i, g in enumerate(rows))
    return Ordered([position for position, _ in keyed], [rows[i] for _, i in keyed])


def page(rows: Sequence[Any] | Ordered, sort: Sort, ask: PageAsk) -> Page[Any]:
    """The page `ask` asks of `rows` (every group that passes the filters, or those
    already `ordered`) in `sort`'s order: after or before the cursor's position (a page
    before it that reaches the start is the first page)."""
    positions, in_order = rows if isinstance(rows, Ordered) else ordered(rows, sort)
    limit = ask.limit
    if ask.cursor is None:
        start = 0
    elif ask.before:
        end = bisect.bisect_left(positions, _cursor_position(sort, ask.cursor))
        start = max(0, end - limit)
        if start > 0:
            return Page.of(in_order[start:end], sort.key, more_before=True, more_after=True)
        start = 0  # reaches the start: the first page
    else:
        start = bisect.bisect_right(positions, _cursor_position(sort, ask.cursor))
    shown = in_order[start : start + limit]
    more_after = start + limit < len(in_order)
    return Page.of(shown, sort.key, more_before=start > 0, more_after=more_after)


def reorder(rows: Sequence[Any], sort: Sort) -> list[Any]:
    """`rows` (a page read now) in `sort`'s order, by what they hold now."""
    return sorted(rows, key=sort.position)


def wanted(rows: Sequence[Any]) -> Callable[[str, str], bool]:
    """A name filter passing exactly the groups of `rows`."""
    names = {(g.queue, g.group) for g in rows}
    return lambda queue, group: (queue, group) in names


__all__ = [
    "ATTENTION",
    "BY_QUEUE",
    "COLUMNS",
    "DEFAULT",
    "QUEUE",
    "Ordered",
    "Sort",
    "need",
    "ordered",
    "page",
    "parse",
    "reorder",
    "wanted",
]

"""The dashboard's pictures of the recent past: a consumer's page, a group's timeline and
its active count over a window (`WINDOWS`: the last hour, 6 or 24 hours, as far as the
event log reaches; a chart on the group page, a sparkline on every row of the groups page,
all on one scale).

Each picture is rebuilt from the transition events (`redis_presence.history`) by one
bounded read (`Planner.group_logs`): at most `GROUP_ENTRIES` entries of the queue's event
log for a group or consumer page; for the groups page, sparklines for at most
`SPARK_GROUPS` groups, `SPARK_ENTRIES` entries per queue and `SPARK_PAGE_ENTRIES` in all.
Nothing is written to draw them. The SVG is drawn here as numbers (coordinates) and
rendered by the templates, where every name is autoescaped text. The coordinates are the
only copy of the numbers in the page: history.js reads the counts back from them (with
the chart's `scale`) for the values it tells on hover and keyboard.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from redis_presence import ConsumerPresence
from redis_presence.errors import PresenceMetaError
from redis_presence.formatting import iso_utc
from redis_presence.history import (
    Departed,
    GroupLog,
    Series,
    Transition,
    active_series,
    timeline,
)
from redis_presence.model import NO_META, ConsumerMeta

from .observed import Mark
from .reads import PresenceData

GROUP_ENTRIES = 2_000
"""Event log entries read (newest first) for one group's or one consumer's page."""
SPARK_ENTRIES = 500
"""Event log entries read per queue for the groups page's sparklines at most..."""
SPARK_PAGE_ENTRIES = 5_000
"""... and per groups page at most (shared by its queues, at least 20 each)."""
SPARK_GROUPS = 1_000
"""Sparklines drawn per groups page at most: every row (a page holds at most 1,000)."""
TIMELINE_LIMIT = 50
"""Transitions listed on a group or consumer page at most."""
SPARK_POINTS = 31
MINUTE_NS = 60 * 1_000_000_000


class Window(NamedTuple):
    """A time window of the pictures: how far back, how many instants the group chart
    draws, and the step of its time axis."""

    name: str
    span_ns: int
    points: int
    tick_ns: int
    words: str
    """As the page says it ("the last hour")."""
    back: str
    """How far back it reaches ("an hour")."""


WINDOWS = {
    w.name: w
    for w in (
        Window("1h", 60 * MINUTE_NS, 61, 15 * MINUTE_NS, "the last hour", "an hour"),
        Window("6h", 360 * MINUTE_NS, 73, 60 * MINUTE_NS, "the last 6 hours", "6 hours"),
        Window("24h", 1_440 * MINUTE_NS, 97, 240 * MINUTE_NS, "the last 24 hours", "24 hours"),
    )
}
"""The windows a page can show (``window=``); the first is the default."""
DEFAULT_WINDOW = WINDOWS["1h"]
CHART_POINTS = DEFAULT_WINDOW.points
"""Instants of the group page's chart over the hour (one a minute)."""


class Chart(NamedTuple):
    """An active-count series as SVG coordinates, drawn in a `width` x `height` box: x in
    the box's units, y in counts (``y = scale - count``, exact) over `viewbox`, which leaves
    a margin of `pad` (in the box's units) above and below."""

    width: int
    height: int
    sure: str
    """Polyline points of the surely-active count (``"x,y x,y ..."``)."""
    band: str
    """Polygon points between the sure and the maybe count ('' when they agree)."""
    gap: float
    """The x where the line starts (> 0 when the log does not reach back)."""
    peak: int
    series: Series
    ticks: tuple[tuple[float, str], ...] = ()
    """``(x, label)`` of the time axis (minutes or hours ago)."""
    outages: tuple[tuple[float, float, str], ...] = ()
    """``(x, width, title)`` of each span this service could not reach Redis: drawn over
    the line (no heartbeat got through: what the log's rule draws there is not true)."""
    changes: tuple[tuple[float, str], ...] = ()
    """``(x, title)`` where Redis lost or replaced its data (nothing is drawn before)."""
    pad: int = 2
    scale: int = 1
    """The count at the top of the box (one scale for every chart of a page)."""
    events: tuple[tuple[float, str], ...] = ()
    """``(x, title)`` of the transitions logged or derived in each step of the series
    (the group page's chart: who joined, recovered, left, went stale...)."""

    @property
    def margin(self) -> float:
        """`pad` in counts."""
        return _n(round(self.scale * self.pad / (self.height - 2 * self.pad), 3))

    @property
    def viewbox(self) -> str:
        return f"0 {_n(-self.margin)} {self.width} {_n(round(self.scale + 2 * self.margin, 3))}"

    @property
    def bottom(self) -> float:
        """The box's bottom edge, in counts (below 0 by the margin)."""
        return _n(round(self.scale + self.margin, 3))

    @property
    def tick_y(self) -> float:
        """Where an event's tick starts (it ends at the box's bottom): 3 units tall."""
        unit = self.scale / (self.height - 2 * self.pad)
        return _n(round(self.scale + self.margin - 3 * unit, 3))


def with_now(series: Series, active: int | None) -> Series:
    """`series` ending with `active` (the count the page's cards show, from the same read),
    when given."""
    if active is None:
        return series
    return series._replace(low=(*series.low[:-1], active), high=(*series.high[:-1], active))


def with_marks(log: GroupLog, marks: Sequence[Mark]) -> GroupLog:
    """`log` told only from the last change of data it overlaps on (what came before is
    not this data's past: the chart starts there, as where a log does not reach)."""
    changed = [m.end_ns for m in marks if m.kind == "data" and m.end_ns is not None]
    since = [n for n in changed if log.since_ns < n <= log.now_ns]
    if not since:
        return log
    return log._replace(reach_ns=max(*since, log.reach_ns or 0))


def _n(value: float) -> float | int:
    """`value` as the page spells it: an integer without its ``.0``."""
    return int(value) if value == int(value) else value


def chart(
    series: Series,
    width: int,
    height: int,
    *,
    pad: int = 2,
    marks: Sequence[Mark] = (),
    scale: int | None = None,
    tick_ns: int = DEFAULT_WINDOW.tick_ns,
    events: Iterable[Transition] = (),
) -> Chart:
    """`series` drawn over the whole window (``since_ns`` at x = 0, ``now_ns`` at the
    right) on a scale of 0 to `scale` (default: its own peak): a trimmed log leaves the
    start blank; `marks` (`Observed.within`) are drawn over it, `events` under it (one
    mark per step of the series that has any)."""
    span = max(1, series.now_ns - series.since_ns)
    top = max(1, series.peak, scale or 0)

    def x(at_ns: int) -> float:
        at = min(max(at_ns, series.since_ns), series.now_ns)  # a mark may start before
        return _n(round((at - series.since_ns) * width / span, 1))

    def y(count: int) -> int:
        return top - count

    sure = " ".join(f"{x(t)},{y(n)}" for t, n in zip(series.times_ns, series.low, strict=True))
    band = ""
    if series.unsure:
        upper = [f"{x(t)},{y(n)}" for t, n in zip(series.times_ns, series.high, strict=True)]
        band = " ".join(upper + sure.split()[::-1])
    ticks = tuple(
        (x(series.now_ns - ago), _ago(ago)) for ago in range(span - span % tick_ns, -1, -tick_ns)
    )
    outages = tuple(
        (x(m.start_ns), round(x(m.end_ns or series.now_ns) - x(m.start_ns), 1), _title(m))
        for m in marks
        if m.kind == "outage"
    )
    changes = tuple(
        (x(m.end_ns), _title(m)) for m in marks if m.kind == "data" and m.end_ns is not None
    )
    return Chart(
        width,
        height,
        sure,
        band,
        x(series.start_ns),
        series.peak,
        series,
        ticks,
        outages,
        changes,
        pad,
        top,
        tuple((x(at), title) for at, title in _steps(series.times_ns, events)),
    )


def _ago(ago_ns: int) -> str:
    if not ago_ns:
        return "now"
    minutes = ago_ns // MINUTE_NS
    return f"-{minutes} min" if minutes < 120 else f"-{minutes // 60} h"


def _steps(times_ns: Sequence[int], events: Iterable[Transition]) -> list[tuple[int, str]]:
    """For each step ``(times_ns[i-1], times_ns[i]]`` with transitions: its end and what
    happened in it ("2 joined, 1 left between 10:01:00 and 10:02:00 UTC")."""
    counts: dict[int, dict[str, int]] = {}
    for t in events:
        at = t.event.at_ns
        if not times_ns or not times_ns[0] < at <= times_ns[-1]:
            continue
        i = next(i for i, end in enumerate(times_ns) if at <= end)
        kinds = counts.setdefault(i, {})
        kinds[t.event.kind.value] = kinds.get(t.event.kind.value, 0) + 1
    return [
        (
            times_ns[i],
            ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
            + f" between {iso_utc(times_ns[i - 1])} and {iso_utc(times_ns[i])}",
        )
        for i, kinds in sorted(counts.items())
    ]


def _title(mark: Mark) -> str:
    if mark.kind == "outage":
        until = "now" if mark.end_ns is None else iso_utc(mark.end_ns)
        return (
            f"Redis could not be reached from {iso_utc(mark.start_ns)} to {until} (seen by "
            "this service): no data, not drawn"
        )
    return (
        f"Redis lost or replaced its data between {iso_utc(mark.start_ns)} and "
        f"{iso_utc(mark.end_ns or mark.start_ns)} (its epoch marker changed): nothing drawn "
        "before"
    )


class GroupHistory(NamedTuple):
    """What a group page shows of the past: its chart, its newest transitions and what this
    service saw of Redis meanwhile (`Observed.within`)."""

    log: GroupLog
    chart: Chart
    timeline: list[Transition]
    marks: tuple[Mark, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return self.log.to_dict() | {
            "series": self.chart.series.to_dict(),
            "timeline": [t.to_dict() for t in self.timeline],
            "marks": [m._asdict() for m in self.marks],
        }


class ConsumerView(NamedTuple):
    """A consumer page: its row now (None: not tracked now), metadata and history."""

    row: ConsumerPresence | None
    meta: ConsumerMeta
    log: GroupLog
    timeline: list[Transition]
    meta_error: str | None = None
    """Why its metadata is not shown (another program's, unreadable); None: it is."""
    departed: Departed | None = None
    """Not tracked now: the metadata the event log kept when it last left or was pruned."""

    def to_dict(self) -> dict[str, object]:
        gone = self.departed
        return {
            "departed": None
            if gone is None
            else {"kind": gone.kind.value, "at_ns": gone.at_ns, "meta": gone.meta}
        }


async def _logs(
    reads: PresenceData,
    groups: Sequence[tuple[str, str]],
    entries: int,
    window: Window = DEFAULT_WINDOW,
) -> list[GroupLog]:
    now = await reads.now_ns()
    await reads.epoch()  # what it sees of the data's epoch goes into the marks
    ttl_ms = reads.explicit_ttl_ms  # None: each group's shared TTL, as its events use
    since = max(0, now - window.span_ns)
    plan = reads.registry.plans.group_logs(
        groups, since_ns=since, now_ns=now, ttl_ms=ttl_ms, entries=entries
    )
    return await reads.registry.execute(plan)


async def group_history(
    reads: PresenceData,
    queue: str,
    group: str,
    *,
    active_now: int | None = None,
    window: Window = DEFAULT_WINDOW,
) -> GroupHistory:
    """One group's `window`: the chart of its active count (ending with `active_now`, the
    count of the page's own read, when given), its transitions marked under it, the spans
    this service could not read Redis or saw its data change drawn over it, and its
    newest transitions."""
    (log,) = await _logs(reads, [(queue, group)], GROUP_ENTRIES, window)
    marks = tuple(reads.observed.within(log.since_ns, log.now_ns))
    told = with_marks(log, marks)
    series = with_now(active_series(told, window.points), active_now)
    every = timeline(told, 2 * GROUP_ENTRIES)  # bounded by the entries read
    drawn = chart(series, 600, 120, marks=marks, tick_ns=window.tick_ns, events=every, pad=4)
    return GroupHistory(log, drawn, timeline(log, TIMELINE_LIMIT), marks)


async def sparklines(
    reads: PresenceData,
    groups: Sequence[tuple[str, str, int]],
    window: Window = DEFAULT_WINDOW,
) -> dict[tuple[str, str], Chart]:
    """The first `SPARK_GROUPS` of `groups`' (queue, group, active count now) active counts
    over `window`, each ending with the count the page's row shows, all on one scale (the
    highest count of any)."""
    shown = list(groups)[:SPARK_GROUPS]
    if not shown:
        return {}
    queues = len({queue for queue, _, _ in shown})
    entries = min(SPARK_ENTRIES, max(20, SPARK_PAGE_ENTRIES // queues))
    logs = await _logs(reads, [(q, g) for q, g, _ in shown], entries, window)
    now_of = {(q, g): n for q, g, n in shown}
    drawn = []
    for log in logs:
        marks = reads.observed.within(log.since_ns, log.now_ns)
        series = active_series(with_marks(log, marks), SPARK_POINTS)
        series = with_now(series, now_of.get((log.queue, log.group)))
        drawn.append((log, series, marks))
    scale = max((series.peak for _, series, _ in drawn), default=1)
    width = SPARK_POINTS - 1  # an instant per unit: the page spells short coordinates
    return {
        (log.queue, log.group): chart(series, width, 22, marks=marks, scale=scale)
        for log, series, marks in drawn
    }


def window_of(name: str | None) -> Window:
    """The window named `name` (None: the default); `KeyError` for another name."""
    return DEFAULT_WINDOW if name is None else WINDOWS[name]


async def consumer_view(reads: PresenceData, queue: str, group: str, consumer: str) -> ConsumerView:
    """One consumer now (its row, metadata) and its transitions over the last hour."""
    registry = reads.registry
    now = await reads.now_ns()
    row = await registry.consumer(queue, group, consumer, now, reads.explicit_ttl_ms)
    meta_error = None
    try:
        meta = await registry.execute(registry.plans.consumer_meta(queue, group, consumer))
    except PresenceMetaError as exc:  # another program's: shown as unreadable, not a 502
        meta, meta_error = NO_META, str(exc)
    (log,) = await _logs(reads, [(queue, group)], GROUP_ENTRIES)
    departed = None
    if row is None:  # gone: what the log kept of it when it went
        departed = next((d for d in log.departures if d.consumer == consumer), None)
    return ConsumerView(
        row,
        meta,
        log,
        timeline(log, TIMELINE_LIMIT, consumer),
        meta_error=meta_error,
        departed=departed,
    )


__all__ = [
    "DEFAULT_WINDOW",
    "WINDOWS",
    "Chart",
    "ConsumerView",
    "GroupHistory",
    "Window",
    "chart",
    "consumer_view",
    "group_history",
    "sparklines",
    "window_of",
    "with_marks",
    "with_now",
]

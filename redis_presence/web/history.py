"""The dashboard's pictures of the recent past: a consumer's page, a group's timeline and
its active count over the last hour (a chart on the group page, a sparkline per group on
the groups page).

Each picture is rebuilt from the transition events (`redis_presence.history`) by one
bounded read (`Planner.group_logs`): at most `GROUP_ENTRIES` entries of the queue's event
log for a group or consumer page; for the groups page, sparklines for at most
`SPARK_GROUPS` groups, `SPARK_ENTRIES` entries per queue and `SPARK_PAGE_ENTRIES` in all.
Nothing is written to draw them. The SVG is drawn here as numbers (coordinates) and
rendered by the templates, where every name is autoescaped text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from redis_presence import ConsumerPresence
from redis_presence.errors import PresenceMetaError
from redis_presence.formatting import iso_utc
from redis_presence.history import (
    HISTORY_WINDOW_NS,
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
SPARK_GROUPS = 50
"""Sparklines drawn per groups page at most (the first groups shown)."""
TIMELINE_LIMIT = 50
"""Transitions listed on a group or consumer page at most."""
CHART_POINTS = 61
"""Instants of the group page's chart (one a minute over the hour)."""
SPARK_POINTS = 31


class Chart(NamedTuple):
    """An active-count series as SVG coordinates in a `width` x `height` box."""

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
    """``(x, label)`` of the time axis (minutes ago)."""
    outages: tuple[tuple[float, float, str], ...] = ()
    """``(x, width, title)`` of each span this service could not reach Redis: drawn over
    the line (no heartbeat got through: what the log's rule draws there is not true)."""
    changes: tuple[tuple[float, str], ...] = ()
    """``(x, title)`` where Redis lost or replaced its data (nothing is drawn before)."""
    pad: int = 2

    @property
    def xs(self) -> str:
        """The x of each point of the series (for the page's script, which redraws the
        line when the count now changes)."""
        span = max(1, self.series.now_ns - self.series.since_ns)
        since = self.series.since_ns
        width = self.width
        return " ".join(str(round((t - since) * width / span, 1)) for t in self.series.times_ns)


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


def chart(
    series: Series, width: int, height: int, *, pad: int = 2, marks: Sequence[Mark] = ()
) -> Chart:
    """`series` drawn over the whole window (``since_ns`` at x = 0, ``now_ns`` at the
    right): a trimmed log leaves the start blank; `marks` (`Observed.within`) are drawn
    over it."""
    span = max(1, series.now_ns - series.since_ns)
    peak = max(1, series.peak)

    def x(at_ns: int) -> float:
        at = min(max(at_ns, series.since_ns), series.now_ns)  # a mark may start before
        return round((at - series.since_ns) * width / span, 1)

    def y(count: int) -> float:
        return round(height - pad - count * (height - 2 * pad) / peak, 1)

    sure = " ".join(f"{x(t)},{y(n)}" for t, n in zip(series.times_ns, series.low, strict=True))
    band = ""
    if series.unsure:
        top = [f"{x(t)},{y(n)}" for t, n in zip(series.times_ns, series.high, strict=True)]
        band = " ".join(top + sure.split()[::-1])
    minutes = span // 60_000_000_000
    ticks = tuple(
        (round(width * (minutes - ago) / max(1, minutes), 1), f"-{ago} min" if ago else "now")
        for ago in range(minutes, -1, -15)
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
    )


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
    reads: PresenceData, groups: Sequence[tuple[str, str]], entries: int
) -> list[GroupLog]:
    now = await reads.now_ns()
    await reads.epoch()  # what it sees of the data's epoch goes into the marks
    ttl_ms = reads.explicit_ttl_ms  # None: each group's shared TTL, as its events use
    plan = reads.registry.plans.group_logs(
        groups, since_ns=max(0, now - HISTORY_WINDOW_NS), now_ns=now, ttl_ms=ttl_ms, entries=entries
    )
    return await reads.registry.execute(plan)


async def group_history(
    reads: PresenceData, queue: str, group: str, *, active_now: int | None = None
) -> GroupHistory:
    """One group's last hour: the chart of its active count (ending with `active_now`, the
    count of the page's own read, when given), the spans this service could not read
    Redis or saw its data change drawn over it, and its newest transitions."""
    (log,) = await _logs(reads, [(queue, group)], GROUP_ENTRIES)
    marks = tuple(reads.observed.within(log.since_ns, log.now_ns))
    series = with_now(active_series(with_marks(log, marks), CHART_POINTS), active_now)
    drawn = chart(series, 600, 120, marks=marks)
    return GroupHistory(log, drawn, timeline(log, TIMELINE_LIMIT), marks)


async def sparklines(
    reads: PresenceData, groups: Sequence[tuple[str, str, int]]
) -> dict[tuple[str, str], Chart]:
    """The first `SPARK_GROUPS` of `groups`' (queue, group, active count now) active counts
    over the last hour, each ending with the count the page's row shows."""
    shown = list(groups)[:SPARK_GROUPS]
    if not shown:
        return {}
    queues = len({queue for queue, _, _ in shown})
    entries = min(SPARK_ENTRIES, max(20, SPARK_PAGE_ENTRIES // queues))
    logs = await _logs(reads, [(q, g) for q, g, _ in shown], entries)
    now_of = {(q, g): n for q, g, n in shown}
    sparks = {}
    for log in logs:
        marks = reads.observed.within(log.since_ns, log.now_ns)
        series = active_series(with_marks(log, marks), SPARK_POINTS)
        series = with_now(series, now_of.get((log.queue, log.group)))
        sparks[(log.queue, log.group)] = chart(series, 120, 24, marks=marks)
    return sparks


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
    "Chart",
    "ConsumerView",
    "GroupHistory",
    "chart",
    "consumer_view",
    "group_history",
    "sparklines",
    "with_marks",
    "with_now",
]

"""What `watch` and `demo` print: the live frame of consumers with their changes, cropped to
the terminal, drawn in place with rich's `Live` or as plain text when the output is not a
terminal (the tables and cells themselves are `render`'s)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from rich.console import Console, RenderableType
from rich.live import Live
from rich.text import Text

from redis_presence.formatting import human_age

from .errors import output_errors
from .frames import Change, Frame, WatchRow
from .render import (
    CONSUMER_COLUMNS,
    MARKERS,
    Column,
    Line,
    Styler,
    cell_width,
    marker_style,
    plural,
    rich_text,
    shown,
    state_cell,
    styled,
    table_lines,
    tally_line,
    write,
)

FRAME_COLUMNS = (*CONSUMER_COLUMNS[:6], Column("CHANGE", style=marker_style))
"""The columns of `watch` and `demo`: those of `ls`, with the change in place of the
registration time."""


def clock_time(timestamp_ns: int) -> str:
    """`14:03:07`: the local time of day of an instant (a change in `watch`)."""
    return time.strftime("%H:%M:%S", time.localtime(timestamp_ns // 1_000_000_000))


def _frame_cells(item: WatchRow) -> tuple[str, ...]:
    """One row of `FRAME_COLUMNS`, names as stored (`shown` is the caller's)."""
    row = item.row
    marker = MARKERS[item.change] if item.change is not None else ""
    if marker and item.changed_at_ns is not None:
        marker += f" {clock_time(item.changed_at_ns)}"
    gone = item.change in (Change.LEFT, Change.PRUNED)
    return (
        row.queue,
        row.group,
        row.consumer,
        str(item.change) if gone else state_cell(row),
        ("≤" if item.age_bound else "") + human_age(row.last_seen_age_ms),
        str(row.lease_count),
        marker,
    )


def crop(items: Sequence[WatchRow], max_rows: int) -> tuple[list[WatchRow], int]:
    """At most `max_rows` of `items`, changed rows first, in their order; and how many
    unchanged rows were left out."""
    if len(items) <= max_rows:
        return list(items), 0
    changed = [i for i, item in enumerate(items) if item.change is not None]
    unchanged = [i for i, item in enumerate(items) if item.change is None]
    keep = sorted((changed + unchanged)[:max_rows])
    return [items[i] for i in keep], len(items) - len(keep)


@dataclass(frozen=True)
class View:
    """How a refresh is laid out: the rows to show, in order, and the room they have."""

    items: Sequence[WatchRow]
    width: int | None = None
    """Fit the table in this many cells (None: every name in full)."""
    height: int | None = None
    """Show at most this many lines, cropping unchanged rows first (None: every row)."""
    hidden: int = 0
    """Rows already left out by `--limit`."""
    empty: str = "(no consumers)"
    status: str | None = None
    """A line about the connection (an outage being retried), shown under the counts."""
    read: bool = True
    """Whether anything was read yet (a watch that never reached Redis shows no counts)."""


def _lines_of(text: str, width: int | None) -> int:
    """How many terminal lines `text` takes at `width` (it wraps)."""
    return 1 if not width else max(1, -(-cell_width(text) // width))


def frame_lines(frame: Frame, title: str, view: View | None = None) -> list[Line]:
    """One refresh: title, table, the rows left out, per-group counts, connection status."""
    view = view or View(frame.rows)
    counts = f"counts: {tally_line(frame.tallies) if view.read else 'unknown (nothing read yet)'}"
    footer: list[Line] = []
    if view.hidden:
        footer.append([(f"... and {view.hidden} more (--limit)", "dim")])
    footer.append([(counts, "")])
    if view.status:
        footer.append([(view.status, "bold red")])
    items: Sequence[WatchRow] = view.items
    cropped = 0
    if view.height is not None:
        used = _lines_of(title, view.width) + 2  # the title, the header, a crop line
        used += sum(_lines_of(line[0][0], view.width) for line in footer)
        items, cropped = crop(view.items, max(1, view.height - used))
    lines: list[Line] = [[(title, "bold")]]
    if items:
        lines.extend(table_lines(FRAME_COLUMNS, map(_frame_cells, items), view.width))
    else:
        lines.append([(view.empty, "")])
    if cropped:
        lines.append([(f"... and {plural(cropped, 'unchanged consumer')} not shown", "dim")])
    return lines + footer


def frame_text(frame: Frame, title: str, styler: Styler, view: View | None = None) -> str:
    """One refresh as text, for pipes and logs."""
    return styled(frame_lines(frame, title, view), styler)


def frame_renderable(frame: Frame, title: str, view: View | None = None) -> RenderableType:
    """What one live refresh shows (the lines of `frame_text`)."""
    return rich_text(frame_lines(frame, title, view))


def consumer_lines(frame: Frame, prefix: str = "  ") -> list[str]:
    """`consumer broker-1-c1 (orders/billing): active, last seen 0s ago, 2 leases` lines."""
    lines = []
    for item in frame.rows:
        queue, group, consumer, state, age, leases, marker = map(shown, _frame_cells(item))
        line = (
            f"{prefix}consumer {consumer} ({queue}/{group}): {state}, last seen {age}, "
            f"{leases} lease{'' if leases == '1' else 's'}"
        )
        if marker:
            line += f"  [{marker}]"
        lines.append(line)
    return lines


class FrameSink:
    """Shows refreshes: in place with rich `Live` on a terminal, else frame after frame."""

    def __init__(self, console: Console, live: Live | None) -> None:
        self.console = console
        self.live = live
        self.styler = Styler(console)

    @property
    def height(self) -> int | None:
        """How many lines a live view may take (None: no limit)."""
        return self.console.height - 1 if self.live is not None else None

    @property
    def width(self) -> int | None:
        """The terminal's width for a live view (None: print every name in full)."""
        return self.console.width if self.live is not None else None

    def show(self, frame: Frame, title: str, view: View | None = None) -> None:
        view = view or View(frame.rows)
        with output_errors():
            if self.live is not None:
                self.live.update(frame_renderable(frame, title, view), refresh=True)
            else:
                write(self.console, frame_text(frame, title, self.styler, view) + "\n")

    def say(self, line: str) -> None:
        """A log line: above the live view on a terminal, else in the flow of frames."""
        with output_errors():
            if self.live is not None:
                self.live.console.print(Text(line), soft_wrap=True)
            else:
                write(self.console, line + "\n")


@contextmanager
def frame_sink(console: Console, live: bool) -> Iterator[FrameSink]:
    """A `FrameSink`; `live` is honoured only when the console is a terminal."""
    if live and console.is_terminal:
        with output_errors(), Live(console=console, auto_refresh=False, transient=False) as view:
            yield FrameSink(console, view)
    else:
        yield FrameSink(console, None)


# ---------------------------------------------------------------- the way out

"""Everything the CLI prints: aligned text tables that fit the terminal, JSON, CSV, live
views, ages and markers.

Names are data: every name goes through `shown` (control characters become escapes such as
`\\n`) before it reaches a table, a message or a CSV cell, and CSV also neutralises cells a
spreadsheet would run as a formula (`csv_cell`). Colour decisions are rich's: a `Console`
decides from the terminal, `NO_COLOR` and `FORCE_COLOR`; this module only asks it how a
styled word looks.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from redis_presence.formatting import human_age, iso_utc, iso_utc_ms
from redis_presence.model import ConsumerPresence, PresenceState

from .errors import output_errors
from .frames import Change, GroupTally

if TYPE_CHECKING:
    from redis_presence.events import PresenceEvent

CONSUMER_FIELDS = ConsumerPresence._fields
"""JSON keys and CSV columns of one consumer: the `ConsumerPresence` field names, in order."""

COUNT_FIELDS = ("queue", "group", "active")
"""JSON keys and CSV columns of `counts`."""

STATE_STYLES: Mapping[str, str] = {
    PresenceState.ACTIVE.value: "green",
    "active stuck": "bold magenta",
    PresenceState.STALE.value: "yellow",
    PresenceState.EXPIRED.value: "red",
    "left": "dim",
    "pruned": "dim",
}

MARKERS: Mapping[Change, str] = {
    Change.JOINED: "+ joined",
    Change.WENT_STALE: "! went stale",
    Change.EXPIRED: "x expired",
    Change.LEFT: "- left",
    Change.BACK: "^ active again",
    Change.PRUNED: "- pruned",
}
"""The change column of `watch` and `demo`: a sign to scan for, then a word."""

MARKER_STYLES: Mapping[str, str] = {
    MARKERS[Change.JOINED]: "bold green",
    MARKERS[Change.WENT_STALE]: "bold yellow",
    MARKERS[Change.EXPIRED]: "bold red",
    MARKERS[Change.LEFT]: "bold magenta",
    MARKERS[Change.BACK]: "bold cyan",
    MARKERS[Change.PRUNED]: "bold magenta",
}

ELLIPSIS = "…"
MIN_NAME_WIDTH = 6
"""A name column is never cut below this (or its header), however narrow the terminal."""


# ---------------------------------------------------------------- small values


def last_seen(row: ConsumerPresence, now_ns: int | None = None) -> str:
    """`human_age`, or `"5s AHEAD"` for a beat stamped after `now_ns` (a broker whose clock
    runs ahead of the server's: its consumers look younger than they are)."""
    if now_ns is not None and row.last_heartbeat_ns > now_ns:
        ahead_s = (row.last_heartbeat_ns - now_ns) // 1_000_000_000
        return f"{human_age(ahead_s * 1000).removesuffix(' ago')} AHEAD"
    return human_age(row.last_seen_age_ms)


LINE_WIDTH = 80
"""The width of the lines the CLI wraps (messages, doctor, the demo's log) off a terminal."""


def wrapped(text: str, width: int = LINE_WIDTH, indent: int = 0, first: str = "") -> str:
    """`first` + `text` broken at spaces into lines of at most `width` columns (a word
    longer than a line, say a URL, stays whole), the lines after the first indented by
    `indent` spaces; no newline at the end."""
    import textwrap

    lines = textwrap.wrap(
        text,
        width=max(width, indent + 20),
        initial_indent=first,
        subsequent_indent=" " * indent,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return "\n".join(lines) if lines else first


def plural(count: int, noun: str) -> str:
    """`1 consumer`, `2 consumers`."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


# ---------------------------------------------------------------- names are data


def shown(name: str) -> str:
    """A name safe for one line of a terminal: control characters become escapes like `\\n`
    and `\\x1b` (the table, the messages and CSV all use this)."""
    if name.isprintable():
        return name
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in name)


FORMULA_STARTS = ("=", "+", "-", "@")
"""What a spreadsheet may run as a formula at the start of a cell (OWASP, CSV injection);
the other two OWASP names, tab and carriage return, never reach a cell unescaped."""


def csv_cell(name: str) -> str:
    """A name for a CSV cell: `shown`, and a leading `'` before a formula start (OWASP)."""
    text = shown(name)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def who(queue: str, group: str, consumer: str) -> str:
    """`consumer 'w1' (queue 'orders', group 'billing')`, for one-line messages."""
    return f"consumer '{shown(consumer)}' (queue '{shown(queue)}', group '{shown(group)}')"


def cell_width(text: str) -> int:
    return len(text) if text.isascii() else cell_len(text)


def middle_cut(text: str, width: int) -> str:
    """`text` in at most `width` cells: its middle becomes `…` when it is longer, so the
    start and the end (where generated names differ) stay visible."""
    if cell_width(text) <= width:
        return text
    keep = max(0, width - 1)
    head_cells = keep // 2
    tail_cells = keep - head_cells
    if text.isascii():
        return text[:head_cells] + ELLIPSIS + (text[-tail_cells:] if tail_cells else "")
    head: list[str] = []
    used = 0
    for char in text:
        used += cell_len(char)
        if used > head_cells:
            break
        head.append(char)
    tail: list[str] = []
    used = 0
    for char in reversed(text):
        used += cell_len(char)
        if used > tail_cells:
            break
        tail.append(char)
    return "".join(head) + ELLIPSIS + "".join(reversed(tail))


# ---------------------------------------------------------------- styling


class Styler:
    """Wraps words in the escape codes the console would use (none for pipes, NO_COLOR)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._cache: dict[tuple[str, str], str] = {}

    @property
    def plain(self) -> bool:
        return self.console.color_system is None

    def __call__(self, text: str, style: str) -> str:
        if self.plain or not style:
            return text
        key = (text, style)
        hit = self._cache.get(key)
        if hit is None:
            with self.console.capture() as capture:
                self.console.print(Text(text, style=style), end="", soft_wrap=True)
            hit = self._cache[key] = capture.get()
        return hit


# ---------------------------------------------------------------- text tables


@dataclass(frozen=True)
class Column:
    """One column of a text table."""

    header: str
    right: bool = False
    name: bool = False
    """Holds names: cut in the middle when the table must fit a width."""
    optional: bool = False
    """Left out first when the table must fit a width."""
    style: Callable[[str], str] | None = None
    """The rich style of a cell, from its text (applied after padding)."""


GAP = 2


def _fit(
    columns: Sequence[Column], body: Sequence[Sequence[str]], width: int
) -> tuple[list[int], list[int]]:
    """Which columns to show, and how wide, for a table of at most `width` cells.

    Optional columns go first; then name columns shrink, the widest first, down to
    `MIN_NAME_WIDTH`; a shrunk column widens again until its distinct names stay distinct.
    State, ages, counts and markers are never cut (the line may then exceed `width`).
    """
    natural = [cell_width(c.header) for c in columns]
    for row in body:
        for i, cell in enumerate(row):
            natural[i] = max(natural[i], cell_width(cell))
    shown_cols = list(range(len(columns)))

    def total(widths: Mapping[int, int]) -> int:
        return sum(widths[i] for i in shown_cols) + GAP * (len(shown_cols) - 1)

    widths = dict(enumerate(natural))
    if total(widths) > width:
        shown_cols = [i for i in shown_cols if not columns[i].optional]
    names = [i for i in shown_cols if columns[i].name]
    excess = total(widths) - width
    floor = {i: max(MIN_NAME_WIDTH, cell_width(columns[i].header)) for i in names}
    while excess > 0:
        wide = [i for i in names if widths[i] > floor[i]]
        if not wide:
            break
        widest = max(widths[i] for i in wide)
        tops = [i for i in wide if widths[i] == widest]
        others = [widths[i] for i in wide if widths[i] < widest]
        step = widest - max([*others, *(floor[i] for i in tops)])
        step = max(1, min(step, -(-excess // len(tops))))
        for i in tops:
            cut = min(step, widths[i] - floor[i], excess)
            widths[i] -= cut
            excess -= cut
    for i in names:
        distinct = {row[i] for row in body}
        while widths[i] < natural[i] and len({middle_cut(v, widths[i]) for v in distinct}) < len(
            distinct
        ):
            widths[i] += 1
    return shown_cols, [widths[i] for i in shown_cols]


Segment = tuple[str, str]
"""A piece of a line and its rich style (`""` for none)."""
Line = list[Segment]


def table_lines(
    columns: Sequence[Column], rows: Iterable[Sequence[str]], width: int | None = None
) -> list[Line]:
    """An aligned, borderless table as lines of styled segments, linear in cells.

    Cells are names or words as given (`shown` is applied here). With `width`, the table
    fits in that many cells (see `_fit`); without, every cell is shown in full. Styles
    apply to padded cells, so escape codes never disturb the alignment.
    """
    body = [[shown(cell) for cell in row] for row in rows]
    if width is None:
        keep = list(range(len(columns)))
        widths = [cell_width(c.header) for c in columns]
        for row in body:
            for i, cell in enumerate(row):
                widths[i] = max(widths[i], cell_width(cell))
    else:
        keep, widths = _fit(columns, body, width)
    cols = [columns[i] for i in keep]
    last = len(cols) - 1
    gap = (" " * GAP, "")

    def line(cells: Sequence[str], header: bool) -> Line:
        out: Line = []
        for j, text in enumerate(cells):
            column = cols[j]
            cell = middle_cut(text, widths[j]) if column.name and not header else text
            pad = " " * max(0, widths[j] - cell_width(cell))
            if column.right:
                padded = pad + cell
            elif j == last:  # no trailing blanks at the end of a line
                padded = cell
            else:
                padded = cell + pad
            style = "bold" if header else (column.style(cell) if column.style else "")
            if out:
                out.append(gap)
            out.append((padded, style))
        while out and not out[-1][0].strip():  # an empty last cell leaves no blanks
            out.pop()
        if out:
            out[-1] = (out[-1][0].rstrip(), out[-1][1])
        return out

    lines = [line([c.header for c in cols], header=True)]
    lines.extend(line([row[i] for i in keep], header=False) for row in body)
    return lines


def styled(lines: Iterable[Line], styler: Styler) -> str:
    """Lines of segments as text, with the console's escape codes (none when plain)."""
    return "".join(
        "".join(styler(text, style) if style else text for text, style in line) + "\n"
        for line in lines
    )


def rich_text(lines: Iterable[Line]) -> Text:
    """Lines of segments as one rich `Text` (for a live view: no escape codes to parse)."""
    text = Text()
    for i, line in enumerate(lines):
        if i:
            text.append("\n")
        for piece, style in line:
            text.append(piece, style=style or None)
    return text


def text_table(
    columns: Sequence[Column],
    rows: Iterable[Sequence[str]],
    styler: Styler,
    width: int | None = None,
) -> str:
    """`table_lines` as text (10,000 rows in a fraction of a second)."""
    return styled(table_lines(columns, rows, width), styler)


def _state_style(cell: str) -> str:
    if cell.startswith("active stuck"):  # and how long without progress
        return STATE_STYLES["active stuck"]
    return STATE_STYLES.get(cell, "")


def marker_style(cell: str) -> str:
    """The style of a marker, followed or not by the time of the change."""
    return MARKER_STYLES.get(cell.removesuffix(cell[-9:]) if _TIMED.search(cell) else cell, "")


_TIMED = re.compile(r" \d\d:\d\d:\d\d$")


DRAINING = "draining"
DRAIN_REQUESTED = "drain requested"
CONFLICT = "! conflict"
"""The marks of `ls`' NOTE column: the consumer says it is draining, a drain was requested
and not yet acknowledged, two processes beat as this consumer (a duplicate)."""

NOTE_STYLES: Mapping[str, str] = {
    DRAINING: "cyan",
    DRAIN_REQUESTED: "yellow",
    CONFLICT: "bold red",
}


def _note_style(cell: str) -> str:
    return "bold red" if CONFLICT in cell else NOTE_STYLES.get(cell.split(", ", maxsplit=1)[0], "")


CONSUMER_COLUMNS = (
    Column("QUEUE", name=True),
    Column("GROUP", name=True),
    Column("CONSUMER", name=True),
    Column("STATE", style=_state_style),
    Column("LAST SEEN", right=True),
    Column("LEASES", right=True),
    Column("CAPACITY", right=True),
    Column("NOTE", style=_note_style),
    Column("REGISTERED (UTC)", optional=True),
    Column("META", optional=True),
)
"""Every column `ls` may show: CAPACITY only when some row reports one, NOTE only when some
row has a mark (`note_cell`), META only when some row has metadata."""


def state_cell(row: ConsumerPresence, now_ns: int | None = None) -> str:
    """`active`, `stale`, `expired`; `active stuck` for an active row that is stuck, and with
    `now_ns` how long it made no progress (`active stuck 7m`: since the later of its
    registration and its last progress, as `is_stuck` counts)."""
    if not row.stuck:
        return row.state.value
    if now_ns is None:
        return "active stuck"
    since_ns = max(row.registered_at_ns, row.last_progress_ns or 0)
    return f"active stuck {human_age((now_ns - since_ns) // 1_000_000).removesuffix(' ago')}"


def meta_cell(row: ConsumerPresence) -> str:
    """`host=h-1 pid=42`: a consumer's metadata on one line (names are data: `shown`)."""
    return " ".join(f"{shown(k)}={shown(v)}" for k, v in row.meta.items())


def note_cell(row: ConsumerPresence) -> str:
    """`draining`, `drain requested`, `! conflict`, joined by commas: what a row of
    protocol version 2 says beyond its state (empty for most rows)."""
    marks = [
        mark
        for mark, on in (
            (CONFLICT, row.conflict),
            (DRAINING, row.draining),
            (DRAIN_REQUESTED, row.drain_requested),
        )
        if on
    ]
    return ", ".join(marks)


def _consumer_cells(row: ConsumerPresence, now_ns: int | None = None) -> tuple[str, ...]:
    return (
        row.queue,
        row.group,
        row.consumer,
        state_cell(row, now_ns),
        last_seen(row, now_ns),
        str(row.lease_count),
        "" if row.capacity is None else str(row.capacity),
        note_cell(row),
        iso_utc(row.registered_at_ns),
        meta_cell(row),
    )


def consumers_table(
    rows: Sequence[ConsumerPresence],
    styler: Styler,
    width: int | None = None,
    empty: str = "(no consumers)",
    now_ns: int | None = None,
) -> str:
    """The `ls` table: one line per consumer, the state coloured when colour is on; a beat
    stamped after `now_ns` (the clock of the read) shows as `AHEAD`."""
    if not rows:
        return empty + "\n"
    cells = [_consumer_cells(row, now_ns) for row in rows]
    # CAPACITY, NOTE and META only when some row has one (META: --wide).
    shown_at = [
        i
        for i, present in enumerate(
            (
                *(True,) * 6,
                any(row.capacity is not None for row in rows),
                any(cell[7] for cell in cells),
                True,
                any(row.meta for row in rows),
            )
        )
        if present
    ]
    if len(shown_at) == len(CONSUMER_COLUMNS):
        return text_table(CONSUMER_COLUMNS, cells, styler, width)
    pick = [CONSUMER_COLUMNS[i] for i in shown_at]
    return text_table(pick, ([c[i] for i in shown_at] for c in cells), styler, width)


def consumers_json(rows: Sequence[ConsumerPresence]) -> str:
    """One JSON array of objects with the `ConsumerPresence` field names (names exact)."""
    return json.dumps([row.to_dict() for row in rows], indent=2, ensure_ascii=False) + "\n"


def consumers_csv(rows: Sequence[ConsumerPresence]) -> str:
    """CSV with a header line of the `ConsumerPresence` field names; names as `csv_cell`."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CONSUMER_FIELDS)
    for row in rows:
        writer.writerow(
            [
                csv_cell(row.queue),
                csv_cell(row.group),
                csv_cell(row.consumer),
                row.registered_at_ns,
                row.last_heartbeat_ns,
                row.last_seen_age_ms,
                row.lease_count,
                row.state.value,
                "" if row.last_progress_ns is None else row.last_progress_ns,
                "true" if row.stuck else "false",
                csv_cell(json.dumps(dict(row.meta), ensure_ascii=False)) if row.meta else "",
                "" if row.capacity is None else row.capacity,
                "true" if row.draining else "false",
                "true" if row.drain_requested else "false",
                "true" if row.conflict else "false",
                "" if row.instance is None else row.instance,
            ]
        )
    return buffer.getvalue()


def render_consumers(
    rows: Sequence[ConsumerPresence],
    fmt: str,
    styler: Styler,
    width: int | None = None,
    empty: str = "(no consumers)",
    now_ns: int | None = None,
) -> str:
    """Consumers in one of `options.FORMATS` (the table marks beats after `now_ns`)."""
    if fmt == "json":
        return consumers_json(rows)
    if fmt == "csv":
        return consumers_csv(rows)
    return consumers_table(rows, styler, width, empty, now_ns)


COUNT_COLUMNS = (
    Column("QUEUE", name=True),
    Column("GROUP", name=True),
    Column("ACTIVE", right=True, style=lambda cell: "red" if cell == "0" else ""),
)


DECLARED_COUNT_COLUMNS = (
    *COUNT_COLUMNS,
    Column("MIN", right=True),
    Column("", style=lambda cell: "bold red" if cell else ""),
)
BELOW = "! below minimum"


CAPACITY_COLUMNS = (Column("CAPACITY", right=True), Column("FREE", right=True))
"""What `counts` adds once some group reports a capacity (protocol version 2)."""


def render_counts(
    counts: Mapping[tuple[str, str], int],
    fmt: str,
    styler: Styler,
    width: int | None = None,
    empty: str = "(no groups)",
    minimums: Mapping[tuple[str, str], int] | None = None,
    capacities: Mapping[tuple[str, str], tuple[int, int]] | None = None,
) -> str:
    """Active consumers per `(queue, group)`, in key order, in one of `options.FORMATS`;
    with declared groups (`minimums`), each group's `min_active` and whether it is below;
    with groups that report a capacity (`capacities`: ``(capacity, free)``), each group's
    capacity and free slots (empty, or null, for a group that reports none)."""
    items = sorted(counts.items())
    declared = bool(minimums)
    sized = bool(capacities)
    least_of = minimums or {}
    slots = capacities or {}
    records: list[dict[str, object]] = []
    for (q, g), n in items:
        record: dict[str, object] = {"queue": q, "group": g, "active": n}
        if declared:
            least = least_of.get((q, g))
            record["min_active"] = least
            record["below"] = least is not None and n < least
        if sized:
            capacity, free = slots.get((q, g), (None, None))
            record["capacity"], record["free"] = capacity, free
        records.append(record)
    if fmt == "json":
        return json.dumps(records, indent=2, ensure_ascii=False) + "\n"
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        fields = (
            *COUNT_FIELDS,
            *(("min_active", "below") if declared else ()),
            *(("capacity", "free") if sized else ()),
        )
        writer.writerow(fields)
        for record in records:
            writer.writerow([_csv_value(k, record[k]) for k in fields])
        return buffer.getvalue()
    if not items:
        return empty + "\n"
    columns = [*COUNT_COLUMNS]
    if declared:
        columns.append(DECLARED_COUNT_COLUMNS[3])
    if sized:
        columns += CAPACITY_COLUMNS
    if declared:
        columns.append(DECLARED_COUNT_COLUMNS[4])
    cells = []
    for record in records:
        line = [str(record["queue"]), str(record["group"]), str(record["active"])]
        if declared:
            line.append(_blank(record["min_active"]))
        if sized:
            line += [_blank(record["capacity"]), _blank(record["free"])]
        if declared:
            line.append(BELOW if record["below"] else "")
        cells.append(tuple(line))
    return text_table(columns, cells, styler, width)


def _blank(value: object) -> str:
    return "" if value is None else str(value)


def _csv_value(field: str, value: object) -> object:
    if field in ("queue", "group"):
        return csv_cell(str(value))
    if isinstance(value, bool):
        return str(value).lower()
    return "" if value is None else value


# ---------------------------------------------------------------- events

EVENT_STYLES: Mapping[str, str] = {
    "joined": "green",
    "recovered": "cyan",
    "stale": "yellow",
    "expired": "red",
    "left": "magenta",
    "pruned": "dim",
    "draining": "cyan",
    "drain_requested": "yellow",
    "restarted": "blue",
    "conflict": "bold red",
}

EVENT_COLUMNS = (
    Column("AT (UTC)"),
    Column("EVENT", style=lambda cell: EVENT_STYLES.get(cell, "")),
    Column("QUEUE", name=True),
    Column("GROUP", name=True),
    Column("CONSUMER", name=True),
    Column("LEASES", right=True),
)


def _event_cells(event: PresenceEvent) -> tuple[str, ...]:
    return (
        iso_utc_ms(event.at_ns),
        event.kind.value,
        event.queue,
        event.group,
        event.consumer,
        str(event.lease_count),
    )


def events_table(
    events: Sequence[PresenceEvent], styler: Styler, width: int | None = None, empty: str = ""
) -> str:
    """Events as an aligned table (`empty` when there are none)."""
    if not events:
        return empty + "\n" if empty else ""
    return text_table(EVENT_COLUMNS, map(_event_cells, events), styler, width)


def event_line(event: PresenceEvent, styler: Styler) -> str:
    """One event on one line, for a stream (`events --follow`): the table's cells with fixed
    widths for the time and the kind."""
    at, kind, queue, group, consumer, leases = map(shown, _event_cells(event))
    word = styler(f"{kind:<9}", EVENT_STYLES.get(kind, ""))
    return f"{at}  {word}  {queue}/{group}  {consumer}  {plural(int(leases), 'lease')}\n"


def json_line(data: object) -> str:
    """One JSON document on one line (names exact)."""
    return json.dumps(data, ensure_ascii=False) + "\n"


def event_json(event: PresenceEvent) -> str:
    """One event as one line of JSON (names exact): `PresenceEvent.to_dict`."""
    return json_line(event.to_dict())


# ---------------------------------------------------------------- watch and demo views


def tally_line(tallies: Mapping[tuple[str, str], GroupTally]) -> str:
    """`orders/billing 2 active, 1 stale; ...`: per-group state counts on one line."""
    parts = []
    for (queue, group), tally in sorted(tallies.items()):
        words = [f"{tally.active} active"]
        if tally.stale:
            words.append(f"{tally.stale} stale")
        if tally.expired:
            words.append(f"{tally.expired} expired")
        parts.append(f"{shown(queue)}/{shown(group)} {', '.join(words)}")
    return "; ".join(parts) if parts else "no groups tracked"


def write(console: Console, text: str) -> None:
    """Write already-rendered text to the console's stream and flush it."""
    stream: IO[str] = console.file
    with output_errors():
        stream.write(text)
        stream.flush()

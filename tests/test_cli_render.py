"""The CLI's rendering and the pure diff behind `watch`, each format tested once."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest
from rich.console import Console

from redis_presence import ConsumerPresence, ConsumerPresenceRegistry, PresenceState, formatting
from redis_presence.cli import render, render_frames
from redis_presence.cli.frames import Change, Frame, GroupTally, Watcher, diff, run_watch, tally

S = 1_000_000_000
NOW = 1_750_000_000 * S  # 2025-06-15T15:06:40Z
TTL_MS = 30_000
ANSI = re.compile(r"\x1b\[[0-9;]*m")
COLOUR = re.compile(r"\x1b\[[0-9;]*(3[0-7]|38;|9[0-7])[0-9;]*m")


def row(
    consumer: str = "c1",
    state: PresenceState = PresenceState.ACTIVE,
    *,
    queue: str = "orders",
    group: str = "billing",
    age_ms: int = 1_000,
    lease_count: int = 2,
    registered_at_ns: int = NOW - 3600 * S,
) -> ConsumerPresence:
    return ConsumerPresence(
        queue,
        group,
        consumer,
        registered_at_ns,
        NOW - age_ms * 1_000_000,
        age_ms,
        lease_count,
        state,
    )


def plain_console() -> Console:
    return Console(file=io.StringIO(), _environ={})


def colour_console(**environ: str) -> Console:
    return Console(file=io.StringIO(), _environ={"FORCE_COLOR": "1", "TERM": "xterm", **environ})


# ---------------------------------------------------------------- small values


@pytest.mark.parametrize(
    ("age_ms", "text"),
    [
        (0, "0s ago"),
        (999, "0s ago"),
        (12_000, "12s ago"),
        (59_999, "59s ago"),
        (60_000, "1m ago"),
        (5 * 60_000 + 59_000, "5m ago"),
        (3 * 3_600_000, "3h ago"),
        (24 * 3_600_000 - 1, "23h ago"),
        (2 * 86_400_000, "2d ago"),
        (-5, "0s ago"),
    ],
)
def test_human_age(age_ms: int, text: str) -> None:
    assert formatting.human_age(age_ms) == text


def test_iso_utc_is_exact_for_timestamps_above_2_53() -> None:
    assert formatting.iso_utc(NOW) == "2025-06-15T15:06:40Z"
    assert formatting.iso_utc(NOW + S - 1) == "2025-06-15T15:06:40Z"  # no float rounding up
    assert formatting.iso_utc(0) == "1970-01-01T00:00:00Z"


def test_shown_escapes_control_characters_only() -> None:
    assert render.shown("plain name") == "plain name"
    assert render.shown("two\nlines\t!") == "two\\nlines\\t!"
    assert render.shown("café {x}") == "café {x}"


# ---------------------------------------------------------------- table, JSON, CSV


ROWS = [
    row("c1", PresenceState.ACTIVE, age_ms=1_000, lease_count=2),
    row("c2", PresenceState.STALE, age_ms=45_000, lease_count=0),
    row("worker-10", PresenceState.EXPIRED, group="shipping", age_ms=300_000, lease_count=12),
]


def test_table_is_aligned_and_plain_without_a_terminal() -> None:
    text = render.consumers_table(ROWS, render.Styler(plain_console()))
    assert "\x1b" not in text
    lines = text.splitlines()
    assert lines[0].split() == [
        "QUEUE", "GROUP", "CONSUMER", "STATE", "LAST", "SEEN", "LEASES", "REGISTERED", "(UTC)",
    ]  # fmt: skip
    assert lines[1].split() == [
        "orders", "billing", "c1", "active", "1s", "ago", "2", "2025-06-15T14:06:40Z",
    ]  # fmt: skip
    assert lines[2].split()[3:6] == ["stale", "45s", "ago"]
    assert lines[3].split()[1:6] == ["shipping", "worker-10", "expired", "5m", "ago"]
    # Every column starts at the same offset on every line.
    assert {line.index("2025") for line in lines[1:]} == {lines[0].index("REGISTERED")}
    # Numbers are right-aligned under their header.
    leases_end = lines[0].index("LEASES") + len("LEASES")
    assert [line[leases_end - 2 : leases_end] for line in lines[1:]] == [" 2", " 0", "12"]


def test_table_colours_states_on_a_terminal_and_honours_no_color() -> None:
    coloured = render.consumers_table(ROWS, render.Styler(colour_console()))
    assert COLOUR.search(coloured)
    assert ANSI.sub("", coloured) == render.consumers_table(ROWS, render.Styler(plain_console()))
    no_colour = render.consumers_table(ROWS, render.Styler(colour_console(NO_COLOR="1")))
    assert not COLOUR.search(no_colour)
    assert ANSI.sub("", no_colour) == ANSI.sub("", coloured)


def test_table_escapes_names_that_would_break_lines() -> None:
    text = render.consumers_table([row("evil\nname", queue="q\t1")], render.Styler(plain_console()))
    assert len(text.splitlines()) == 2
    assert "evil\\nname" in text
    assert "q\\t1" in text


def test_empty_tables_say_so() -> None:
    styler = render.Styler(plain_console())
    assert render.consumers_table([], styler) == "(no consumers)\n"
    assert render.render_counts({}, "table", styler) == "(no groups)\n"


def test_json_is_one_array_with_the_field_names() -> None:
    data = json.loads(render.render_consumers(ROWS, "json", render.Styler(plain_console())))
    # Scripts and jq rely on these names, in this order: a renamed field must fail here.
    assert render.CONSUMER_FIELDS == (
        "queue",
        "group",
        "consumer",
        "registered_at_ns",
        "last_heartbeat_ns",
        "last_seen_age_ms",
        "lease_count",
        "state",
        "last_progress_ns",
        "stuck",
        "meta",
        "capacity",
        "draining",
        "drain_requested",
        "conflict",
        "instance",
    )
    assert [list(item) for item in data] == [list(render.CONSUMER_FIELDS)] * 3
    assert data[1] == ROWS[1].to_dict()
    assert data[2]["last_heartbeat_ns"] == NOW - 300 * S  # integers, exact


def test_csv_has_a_header_and_exact_values() -> None:
    text = render.render_consumers(
        [*ROWS, row("plain, comma")], "csv", render.Styler(plain_console())
    )
    records = list(csv.DictReader(io.StringIO(text)))
    assert list(records[0]) == list(render.CONSUMER_FIELDS)
    assert records[0]["consumer"] == "c1"
    assert records[0]["last_heartbeat_ns"] == str(NOW - S)
    assert records[1]["state"] == "stale"
    assert records[3]["consumer"] == "plain, comma"  # quoted by the csv module, exact


HOSTILE = [
    ("=cmd|' /C calc'!A0", "'=cmd|' /C calc'!A0"),
    ("+1+2", "'+1+2"),
    ("-2+3", "'-2+3"),
    ("@SUM(A1)", "'@SUM(A1)"),
    ("\tx", "\\tx"),  # tab and CR, formula starts too, are escaped first: no quote needed
    ("\rx", "\\rx"),
    ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
    ("new\nline", "new\\nline"),
    ("a=b", "a=b"),
    ("worker-1", "worker-1"),
]


@pytest.mark.parametrize(("name", "cell"), HOSTILE, ids=[repr(n) for n, _ in HOSTILE])
def test_csv_escapes_control_characters_and_neutralises_formulas(name: str, cell: str) -> None:
    """Issue 16 item 7: OWASP's advice for CSV injection, with the table's own escaping."""
    styler = render.Styler(plain_console())
    text = render.render_consumers([row(name, queue=name, group=name)], "csv", styler)
    assert "\x1b" not in text
    assert "\t" not in text
    assert text.count("\n") == 2  # the header and one record: no raw newline from a name
    [record] = list(csv.DictReader(io.StringIO(text)))
    assert record["consumer"] == record["queue"] == record["group"] == cell
    assert render.csv_cell(name) == cell
    counts = render.render_counts({(name, name): 1}, "csv", styler)
    assert next(csv.DictReader(io.StringIO(counts)))["queue"] == cell
    # One escaping for both: the table shows what CSV shows, without the formula quote.
    assert cell.removeprefix("'") == render.shown(name)


def test_json_keeps_names_exact() -> None:
    name = "=cmd\x1b[31m\n"
    [item] = json.loads(render.consumers_json([row(name)]))
    assert item["consumer"] == name


def test_counts_in_every_format() -> None:
    counts = {("orders", "shipping"): 0, ("orders", "billing"): 2, ("emails", "sender"): 1}
    styler = render.Styler(plain_console())
    table = render.render_counts(counts, "table", styler).splitlines()
    assert [line.split() for line in table] == [
        ["QUEUE", "GROUP", "ACTIVE"],
        ["emails", "sender", "1"],
        ["orders", "billing", "2"],
        ["orders", "shipping", "0"],
    ]
    assert json.loads(render.render_counts(counts, "json", styler)) == [
        {"queue": "emails", "group": "sender", "active": 1},
        {"queue": "orders", "group": "billing", "active": 2},
        {"queue": "orders", "group": "shipping", "active": 0},
    ]
    records = list(csv.DictReader(io.StringIO(render.render_counts(counts, "csv", styler))))
    assert [(r["queue"], r["group"], r["active"]) for r in records][2] == (
        "orders",
        "shipping",
        "0",
    )


# ---------------------------------------------------------------- the watch diff


def frames_over_time(
    steps: list[tuple[int, list[tuple[str, int | None]]]],
) -> list[Frame]:
    """Drive an in-process registry with explicit clocks and refresh a watcher.

    Each step is `(now_s, actions)`: an action `(consumer, beat_at_s)` beats at that
    time, `(consumer, None)` deregisters; then a snapshot at `now_s` is refreshed.
    """
    registry = ConsumerPresenceRegistry()
    watcher = Watcher()
    frames = []
    for now_s, actions in steps:
        for consumer, beat_at in actions:
            if beat_at is None:
                registry.deregister("orders", "billing", consumer)
            else:
                registry.heartbeat("orders", "billing", consumer, now_ns=NOW + beat_at * S)
        frames.append(watcher.refresh(registry.snapshot(now_ns=NOW + now_s * S, ttl_ms=TTL_MS)))
    return frames


def marks(frame: Frame) -> dict[str, Change]:
    return {key[2]: change for key, change in frame.changes.items()}


def test_watch_marks_joined_stale_expired_left_and_back() -> None:
    frames = frames_over_time(
        [
            (0, [("a", 0), ("b", 0)]),  # first refresh: the baseline, nothing marked
            (10, [("c", 10)]),  # c joined
            (31, [("b", 31)]),  # a went stale (age 31 s > TTL 30 s); b beat again
            (50, [("a", 50)]),  # a is active again; c went stale (age 40 s)
            (61, []),  # nothing changed state
            (72, [("c", None), ("a", 72)]),  # c left; b went stale (age 41 s)
            (92, []),  # b expired (age 61 s > 2 x TTL)
        ]
    )
    assert [marks(f) for f in frames] == [
        {},
        {"c": Change.JOINED},
        {"a": Change.WENT_STALE},
        {"a": Change.BACK, "c": Change.WENT_STALE},
        {},
        {"b": Change.WENT_STALE, "c": Change.LEFT},
        {"b": Change.EXPIRED},
    ]
    assert [(item.row.consumer, item.change) for item in frames[5].rows] == [
        ("a", None),
        ("b", Change.WENT_STALE),
        ("c", Change.LEFT),  # shown once more, with its last known row
    ]
    assert [item.row.consumer for item in frames[6].rows] == ["a", "b"]
    assert frames[5].states == {
        PresenceState.ACTIVE: 1,
        PresenceState.STALE: 1,
        PresenceState.EXPIRED: 0,
    }
    assert frames[6].tallies == {("orders", "billing"): GroupTally(active=1, expired=1)}


def test_watch_marks_active_to_expired_in_one_step_as_expired() -> None:
    frames = frames_over_time([(0, [("a", 0)]), (61, [])])
    assert marks(frames[1]) == {"a": Change.EXPIRED}


def test_watch_marks_a_consumer_that_left_and_came_back_as_joined() -> None:
    frames = frames_over_time([(0, [("a", 0)]), (5, [("a", None), ("a", 5)])])
    assert marks(frames[1]) == {"a": Change.JOINED}


def test_diff_of_identical_snapshots_is_empty() -> None:
    assert diff(ROWS, ROWS) == {}
    assert diff([], []) == {}


def test_tally_keeps_groups_without_active_consumers() -> None:
    assert tally(ROWS) == {
        ("orders", "billing"): GroupTally(active=1, stale=1),
        ("orders", "shipping"): GroupTally(expired=1),
    }


def test_run_watch_reads_once_per_refresh_on_a_fixed_beat() -> None:
    now = [100.0]
    sleeps: list[float] = []
    reads: list[int] = []
    shown: list[Frame] = []

    def read() -> list[ConsumerPresence]:
        reads.append(1)
        now[0] += 0.25  # each read takes a quarter of a second
        return ROWS

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    count = run_watch(
        read, shown.append, interval_s=1.0, iterations=3, sleep=sleep, clock=lambda: now[0]
    )
    assert count == 3
    assert len(reads) == 3
    assert len(shown) == 3
    assert sleeps == [0.75, 0.75]  # the read time is taken out of the interval


def test_run_watch_does_not_burst_after_falling_behind() -> None:
    now = [0.0]
    sleeps: list[float] = []

    def slow_read() -> list[ConsumerPresence]:
        now[0] += 5.0
        return []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    run_watch(
        slow_read, lambda f: None, interval_s=1.0, iterations=3, sleep=sleep, clock=lambda: now[0]
    )
    assert sleeps == []


# ---------------------------------------------------------------- live and plain views


def test_frame_text_shows_markers_and_counts() -> None:
    frames = frames_over_time([(0, [("a", 0), ("b", 0)]), (31, [("b", 31), ("c", 31)])])
    text = render_frames.frame_text(frames[1], "title line", render.Styler(plain_console()))
    lines = text.splitlines()
    assert lines[0] == "title line"
    assert lines[1].split()[-1] == "CHANGE"
    assert "! went stale" in lines[2]
    assert lines[3].endswith("s ago       0")  # b: unchanged, no marker
    assert "+ joined" in lines[4]
    assert lines[-1] == "counts: orders/billing 2 active, 1 stale"


def test_consumer_lines_name_each_consumer_state() -> None:
    frames = frames_over_time([(0, [("a", 0), ("b", 0)]), (45, [("b", 45)]), (65, [])])
    assert render_frames.consumer_lines(frames[2]) == [
        "  consumer a (orders/billing): expired, last seen 1m ago, 0 leases  [x expired]",
        "  consumer b (orders/billing): active, last seen 20s ago, 0 leases",
    ]


def test_live_renderable_crops_unchanged_rows_first() -> None:
    steps: list[tuple[int, list[tuple[str, int | None]]]] = [
        (0, [(f"c{i:02}", 0) for i in range(20)]),
        (1, [("zz-new", 1)]),
    ]
    frame = frames_over_time(steps)[1]
    console = Console(file=io.StringIO(), width=120, _environ={})
    view = render_frames.View(frame.rows, width=120, height=10)
    console.print(render_frames.frame_renderable(frame, "demo title", view))
    out = console.file.getvalue()  # type: ignore[attr-defined]
    lines = out.splitlines()
    assert len(lines) <= 10
    assert lines[0] == "demo title"
    assert "zz-new" in out
    assert "+ joined" in out
    assert "... and 15 unchanged consumers not shown" in out
    assert lines[-1] == "counts: orders/billing 21 active"


def test_one_cropped_consumer_is_singular() -> None:
    frame = frames_over_time([(0, [("a", 0), ("b", 0), ("c", 0)])])[0]
    text = render_frames.frame_text(
        frame, "t", render.Styler(plain_console()), render_frames.View(frame.rows, height=6)
    )
    assert "... and 1 unchanged consumer not shown" in text


@pytest.mark.parametrize(
    ("text", "width", "cut"),
    [
        ("settlement-reconciler-7d9f8c6b5-x2x9k", 17, "settleme…b5-x2x9k"),
        ("short", 17, "short"),
        ("abcdefgh", 7, "abc…fgh"),
        ("abcdefgh", 6, "ab…fgh"),
        ("日本語のキュー名", 9, "日本…ー名"),  # cells, not characters: wide glyphs count twice
    ],
)
def test_middle_cut_keeps_both_ends(text: str, width: int, cut: str) -> None:
    assert render.middle_cut(text, width) == cut
    assert render.cell_width(render.middle_cut(text, width)) <= width


def test_a_fitted_table_never_cuts_state_age_or_leases_and_keeps_names_distinct() -> None:
    """Issue 18 items 1 and 2, on the layout alone (the terminal tests run the real CLI)."""
    names = [f"settlement-reconciler-7d9f8c6b5-{s}" for s in ("x2x9k", "x2x9m", "b7q2m")]
    rows = [
        row(n, state, queue="payments-settlement-eu", group="reconciliation-workers")
        for n, state in zip(names, PresenceState, strict=True)
    ]
    for width in (60, 80, 100, 120, 135):
        text = render.consumers_table(rows, render.Styler(plain_console()), width)
        lines = text.splitlines()
        assert all(render.cell_width(line) <= width for line in lines), (width, text)
        cells = [line.split() for line in lines[1:]]
        assert [c[3] for c in cells] == ["active", "stale", "expired"]
        assert [c[4:6] for c in cells] == [["1s", "ago"], ["1s", "ago"], ["1s", "ago"]]
        assert len({c[2] for c in cells}) == 3, text  # three consumers, three names
        assert ("REGISTERED" in lines[0]) is (width >= 135)  # its natural width
    full = render.consumers_table(rows, render.Styler(plain_console()), None)
    assert all(n in full for n in names)
    assert "REGISTERED" in full


def test_frame_sink_prints_frames_one_after_another_without_a_terminal() -> None:
    console = plain_console()
    frame = frames_over_time([(0, [("a", 0)])])[0]
    with render_frames.frame_sink(console, live=True) as sink:
        assert sink.live is None
        sink.show(frame, "first")
        sink.show(frame, "second")
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert out.index("first") < out.index("second")
    assert "\x1b" not in out


# ---------------------------------------------------------------- protocol version 2


def test_ls_shows_capacity_and_marks_once_a_row_has_them() -> None:
    """CAPACITY and NOTE appear only when some row has a capacity, a mark; the JSON and
    CSV always carry the fields (None / false for a version 1 row)."""
    marked = [
        ROWS[0]._replace(capacity=10, draining=True),
        ROWS[1]._replace(conflict=True, drain_requested=True, instance="abc"),
        ROWS[2],
    ]
    text = render.consumers_table(marked, render.Styler(plain_console()))
    lines = text.splitlines()
    assert lines[0].split() == [
        "QUEUE",
        "GROUP",
        "CONSUMER",
        "STATE",
        "LAST",
        "SEEN",
        "LEASES",
        "CAPACITY",
        "NOTE",
        "REGISTERED",
        "(UTC)",
    ]
    assert "10  draining" in lines[1]
    assert lines[2].rstrip().endswith("! conflict, drain requested  2025-06-15T14:06:40Z")
    plain = render.consumers_table(ROWS, render.Styler(plain_console()))
    assert "CAPACITY" not in plain
    assert "NOTE" not in plain
    data = json.loads(render.render_consumers(marked, "json", render.Styler(plain_console())))
    assert [(d["capacity"], d["draining"], d["conflict"], d["instance"]) for d in data] == [
        (10, True, False, None),
        (None, False, True, "abc"),
        (None, False, False, None),
    ]
    text = render.render_consumers(marked, "csv", render.Styler(plain_console()))
    records = list(csv.DictReader(io.StringIO(text)))
    assert [(r["capacity"], r["draining"], r["conflict"], r["instance"]) for r in records] == [
        ("10", "true", "false", ""),
        ("", "false", "true", "abc"),
        ("", "false", "false", ""),
    ]
    coloured = render.consumers_table(marked, render.Styler(colour_console()))
    assert COLOUR.search(coloured.splitlines()[2].split("! conflict")[0][-12:])


def test_counts_show_capacity_and_free_once_a_group_reports_one() -> None:
    styler = render.Styler(plain_console())
    counts = {("q", "a"): 2, ("q", "b"): 1}
    capacities = {("q", "a"): (14, 10)}
    text = render.render_counts(counts, "table", styler, capacities=capacities)
    assert [line.split() for line in text.splitlines()] == [
        ["QUEUE", "GROUP", "ACTIVE", "CAPACITY", "FREE"],
        ["q", "a", "2", "14", "10"],
        ["q", "b", "1"],
    ]
    data = json.loads(render.render_counts(counts, "json", styler, capacities=capacities))
    assert data == [
        {"queue": "q", "group": "a", "active": 2, "capacity": 14, "free": 10},
        {"queue": "q", "group": "b", "active": 1, "capacity": None, "free": None},
    ]
    both = render.render_counts(
        counts, "csv", styler, minimums={("q", "b"): 2}, capacities=capacities
    )
    assert both.splitlines() == [
        "queue,group,active,min_active,below,capacity,free",
        "q,a,2,,false,14,10",
        "q,b,1,2,true,,",
    ]
    table = render.render_counts(counts, "table", styler, minimums={("q", "b"): 2})
    assert "CAPACITY" not in table  # no group reports one: as before

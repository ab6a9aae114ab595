"""Issue 18 items 1 and 2: `watch` and `ls` on a real terminal of a given width.

The CLI runs as a process attached to a pseudo-terminal whose window size is set with
TIOCSWINSZ, as a terminal emulator does; rich sizes its console from it (or from
`COLUMNS`). What the process printed is read back with the escape codes (colour, cursor
moves) removed, and every table line is checked.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.cells import cell_len

import redis_presence
from redis_presence import RedisPresenceRegistry

REPO = Path(redis_presence.__file__).resolve().parents[1]
CLI = [sys.executable, "-c", "from redis_presence.cli import main; main()"]
ESCAPES = re.compile(r"\x1b(\[[0-9;?]*[A-Za-z]|\][^\x07]*\x07|[()][0-9A-B]|[=>])")
S = 1_000_000_000

# Realistic names: a 22-character queue and group, 38-character pod names that differ only
# at the end.
QUEUE = "payments-settlement-eu"
GROUP = "reconciliation-workers"
AGES_S = {"x2x9k": 1, "x2x9m": 45, "b7q2m": 300}
STATES = {"x2x9k": "active", "x2x9m": "stale", "b7q2m": "expired", "new01": "active"}
CONSUMERS = [f"settlement-reconciler-7d9f8c6b5-{suffix}" for suffix in AGES_S]


def on_terminal(
    args: list[str],
    columns: int,
    *,
    rows: int = 40,
    env: dict[str, str] | None = None,
    when: tuple[str, Callable[[], None]] | None = None,
    timeout_s: float = 60,
    exit_code: int = 0,
) -> str:
    """Run the CLI on a `columns` x `rows` pseudo-terminal until it exits (with
    `exit_code`); return what it printed, escapes removed. `when=(text, action)` runs
    `action` once `text` was printed."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    clean = ("REDIS_PRESENCE", "COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TTY_")
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(clean)}
    full_env.update(TERM="xterm-256color", PYTHONPATH=str(REPO), **(env or {}))
    proc = subprocess.Popen(
        [*CLI, *args], stdin=follower, stdout=follower, stderr=follower, env=full_env
    )
    os.close(follower)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if when is not None and when[0].encode() in b"".join(chunks):
                when[1]()
                when = None
            ready, _, _ = select.select([leader], [], [], 0.05)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the process closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        output = b"".join(chunks).decode(errors="replace")
        assert proc.wait(timeout=10) == exit_code, output
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
    text = ESCAPES.sub("", output)
    return "\n".join(line.rstrip() for line in re.split(r"\r\n|\r|\n", text))


@pytest.fixture
def fleet_url(redis_url: str) -> str:
    """Three consumers of one group on the session server: active, stale and expired."""
    with RedisPresenceRegistry.from_url(redis_url) as registry:
        now = int(registry.client.time()[0]) * S
        for consumer in CONSUMERS:
            age_s = AGES_S[consumer[-5:]]
            registry.heartbeat(QUEUE, GROUP, consumer, now_ns=now - age_s * S)
    return redis_url


def table_rows(output: str) -> list[list[str]]:
    """The cells of every table line that shows one of our consumers."""
    return [
        line.split()
        for line in output.splitlines()
        if "settle" in line and not line.startswith("counts:")
    ]


def check_layout(output: str, columns: int) -> list[list[str]]:
    """Every table line fits; state, age and leases are whole; names stay distinct."""
    for line in output.splitlines():
        if "settle" in line and not line.startswith("counts:"):
            assert cell_len(line) <= columns, f"{cell_len(line)} > {columns}: {line!r}"
    rows = table_rows(output)
    assert rows, output
    for cells in rows:
        assert cells[3] == STATES[cells[2][-5:]], cells  # the state word is whole
        # so is the age (after watch's first screen, an active consumer's is a bound: <=)
        assert re.fullmatch(r"≤?\d+[smhd]", cells[4]), cells
        assert cells[5] == "ago", cells
        assert cells[6].isdigit(), cells  # and the leases
    tables = [rows[i : i + len(CONSUMERS)] for i in range(0, len(rows), len(CONSUMERS))]
    for table in tables:  # three consumers, three different names, in every refresh
        assert len({cells[2] for cells in table}) == len(table), table
    return rows


@pytest.mark.parametrize("columns", [80, 120])
def test_watch_fits_the_terminal_and_never_cuts_state_age_or_leases(
    fleet_url: str, columns: int
) -> None:
    output = on_terminal(
        ["--url", fleet_url, "watch", "--interval", "0.05", "--iterations", "3"], columns
    )
    rows = check_layout(output, columns)
    assert any("…" in cells[2] for cells in rows)  # names had to shrink, from the middle
    assert all(cells[2].startswith("settle") for cells in rows)
    assert "CHANGE" in output
    assert "┃" not in output  # no box that squeezes the cells


def test_watch_markers_stay_whole_at_80_columns(fleet_url: str) -> None:
    def join() -> None:
        with RedisPresenceRegistry.from_url(fleet_url) as registry:
            registry.heartbeat(QUEUE, GROUP, "settlement-reconciler-7d9f8c6b5-new01")

    output = on_terminal(
        ["--url", fleet_url, "watch", "--interval", "0.2", "--iterations", "5"],
        80,
        when=("CHANGE", join),
    )
    marked = re.compile(r"\+ joined \d\d:\d\d:\d\d$")  # the marker and the time of the change
    joined = [line for line in output.splitlines() if marked.search(line)]
    assert len(joined) >= 2, output  # the mark stays for a few refreshes
    assert all(cell_len(line) <= 80 for line in joined)
    pattern = r"settl\S*new01\s+active\s+≤?\d+s ago\s+0\s+\+ joined \d\d:\d\d:\d\d$"
    assert re.search(pattern, joined[0]), joined


@pytest.mark.parametrize("columns", [80, 120])
def test_ls_fits_the_terminal(fleet_url: str, columns: int) -> None:
    output = on_terminal(["--url", fleet_url, "ls"], columns)
    check_layout(output, columns)
    header = output.splitlines()[0]
    assert header.split()[:4] == ["QUEUE", "GROUP", "CONSUMER", "STATE"]
    assert "REGISTERED" not in header  # left out first, before names shrink further


def test_ls_wide_shows_everything(fleet_url: str) -> None:
    output = on_terminal(["--url", fleet_url, "ls", "--wide"], 80)
    assert "REGISTERED (UTC)" in output
    for consumer in CONSUMERS:
        assert consumer in output
    assert QUEUE in output
    assert GROUP in output


def test_columns_overrides_the_terminal_width(fleet_url: str) -> None:
    output = on_terminal(["--url", fleet_url, "ls"], 200, env={"COLUMNS": "90"})
    check_layout(output, 90)
    assert any(cell_len(line) > 80 for line in output.splitlines())  # it used the 90


def test_a_pipe_gets_every_name_in_full(fleet_url: str) -> None:
    done = subprocess.run(
        [*CLI, "--url", fleet_url, "ls"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "80"},
        timeout=60,
        check=True,
    )
    for consumer in CONSUMERS:
        assert consumer in done.stdout
    assert "…" not in done.stdout

"""`watch` and `events --follow` agree with the truth (issue 22 items 1, 10; issue 24 item 6).

Real processes on a real server: `watch` shows an active consumer's real age and leases
(not "<=57s ago" and the leases of its last event), re-reads after Redis restarted empty
(no ghosts), says it cannot reach a Redis it never reached (not "no consumers"), and
`events --follow` prints its resume cursor on SIGTERM and SIGHUP as on Ctrl-C.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import pytest
from processes import ManagedProcess
from servers import MakeRedisServer, free_port
from test_cli_terminal import on_terminal
from test_demo import cli_env
from waiting import wait_until

from redis_presence import RedisPresenceRegistry

CLI = [sys.executable, "-c", "from redis_presence.cli import main; main()"]
S = 1_000_000_000

pytestmark = pytest.mark.timeout(120)


class Watch(ManagedProcess):
    """`redis-presence watch` with its output in files: every line it printed so far, on
    both streams; `stop` is a Ctrl-C."""

    stop_timeout_s = 30.0

    def __init__(self, url: str, *args: str) -> None:
        super().__init__(
            [*CLI, "--url", url, "--timeout", "1", "watch", "--interval", "0.1", *args],
            name="watch",
            env=cli_env(),
            separate_stderr=True,
        )

    @property
    def out(self) -> list[str]:
        return self.lines()

    @property
    def err(self) -> list[str]:
        return self.lines(stderr=True)

    def frames(self) -> list[list[str]]:
        """The tables printed so far, each as its lines (one table per refresh)."""
        frames: list[list[str]] = []
        for line in self.out:
            if line.startswith("redis-presence watch"):
                frames.append([])
            elif frames:
                frames[-1].append(line.rstrip("\n"))
        return frames

    def row(self, consumer: str, frame: list[str]) -> str | None:
        return next((line for line in frame if f" {consumer} " in line), None)

    def _ask_to_stop(self) -> None:
        self.send_signal(signal.SIGINT)


def test_watch_shows_the_real_age_and_leases_of_active_consumers(
    make_redis_server: MakeRedisServer,
) -> None:
    server = make_redis_server()
    registry = RedisPresenceRegistry.from_url(server.url)
    now = registry.clock_ns()
    registry.heartbeat("orders", "billing", "w1", 1, now_ns=now - 20 * S)  # 20 s old, active
    watch = Watch(server.url).start()
    try:
        wait_until(lambda: len(watch.frames()) >= 2, timeout_s=30, what="two refreshes")
        registry.heartbeat("orders", "billing", "w1", 7)  # an active beat: no event

        def fresh() -> bool:
            frames = watch.frames()
            line = watch.row("w1", frames[-1]) if len(frames) > 2 else None
            return line is not None and re.search(r"active\s+[01]s ago\s+7\b", line) is not None

        wait_until(fresh, timeout_s=10, what="w1 with its real age (0-1 s) and 7 leases")
        assert all("≤" not in line for frame in watch.frames()[-1:] for line in frame)
    finally:
        assert watch.stop() == 0
        registry.close()


def test_watch_rereads_after_redis_restarts_empty(make_redis_server: MakeRedisServer) -> None:
    server = make_redis_server()
    with RedisPresenceRegistry.from_url(server.url) as registry:
        registry.heartbeat("orders", "billing", "ghost")
    watch = Watch(server.url).start()
    try:
        wait_until(
            lambda: any(watch.row("ghost", f) for f in watch.frames()), timeout_s=30, what="ghost"
        )
        server.restart()  # empty: no persistence
        with RedisPresenceRegistry.from_url(server.url) as registry:
            registry.heartbeat("orders", "billing", "alive")

        def truthful() -> bool:
            frames = watch.frames()
            return (
                bool(frames)
                and bool(watch.row("alive", frames[-1]))
                and not watch.row("ghost", frames[-1])
            )

        wait_until(truthful, timeout_s=15, what="alive listed, the ghost gone")
        marked = [watch.row("ghost", f) for f in watch.frames()]
        assert any(line and "- left" in line for line in marked), marked  # said it went
    finally:
        assert watch.stop() == 0


def test_watch_says_when_redis_is_unreachable_and_since_when(
    make_redis_server: MakeRedisServer,
) -> None:
    server = make_redis_server()
    with RedisPresenceRegistry.from_url(server.url) as registry:
        registry.heartbeat("orders", "billing", "w1")
    watch = Watch(server.url).start()
    try:
        wait_until(
            lambda: any(watch.row("w1", f) for f in watch.frames()), timeout_s=30, what="a frame"
        )
        server.stop()
        wait_until(
            lambda: any("unreachable" in line for line in watch.err),
            timeout_s=30,
            what="the outage",
        )
        line = next(line for line in watch.err if "unreachable" in line)
        assert re.match(r"watch: Redis unreachable since \d\d:\d\d:\d\d: cannot reach Redis", line)
        assert re.search(r"the table is as read at \d\d:\d\d:\d\d; retrying$", line)
        server.restart()
        wait_until(
            lambda: any("is back" in line for line in watch.err), timeout_s=30, what="the recovery"
        )
    finally:
        assert watch.stop() == 0


def test_watch_that_never_reached_redis_says_it_cannot() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    args = ["--url", url, "--timeout", "0.5", "watch", "--interval", "0.05", "--iterations", "3"]
    output = on_terminal(args, 100, exit_code=3)  # the last read's error: cannot reach Redis
    assert "(no consumers" not in output
    assert "cannot reach Redis: nothing read yet" in output
    assert "counts: unknown (nothing read yet)" in output
    assert "no groups tracked" not in output
    assert re.search(r"Redis unreachable since \d\d:\d\d:\d\d", output), output


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_events_follow_prints_its_cursor_on_sigterm_and_sighup(
    redis_url: str, signum: signal.Signals
) -> None:
    """SIGTERM (what a container runtime or systemd sends) and SIGHUP (its terminal closed,
    or a supervisor's reload) end `events --follow` as Ctrl-C does: exit code 0, and the
    last line is the cursor to resume from."""
    proc = subprocess.Popen(
        [*CLI, "--url", redis_url, "events", "--follow", "--format", "json", "--interval", "0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(),
        text=True,
    )
    assert proc.stderr is not None
    assert "events: TTL" in proc.stderr.readline()  # following: it has a cursor
    with RedisPresenceRegistry.from_url(redis_url) as registry:
        registry.heartbeat("orders", "billing", "w1")
    time.sleep(0.3)  # a read or two; what is asserted is the end, whenever it comes
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert list(lines[-1]) == ["cursor"], out
    printed = [(e["kind"], e["consumer"]) for e in lines[:-1] if "kind" in e]
    with RedisPresenceRegistry.from_url(redis_url) as registry:
        resumed, _ = registry.changes(lines[-1]["cursor"])
    # Every event once: printed before the signal, or given from the cursor it printed.
    assert printed + [(e.kind.value, e.consumer) for e in resumed] == [("joined", "w1")]


def test_events_since_a_cursor_of_another_queue_says_so(redis_url: str) -> None:
    env = cli_env()
    made = subprocess.run(
        [*CLI, "--url", redis_url, "events", "--queue", "orders", "--format", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    cursor = json.loads(made.stdout.splitlines()[-1])["cursor"]
    other = subprocess.run(
        [*CLI, "--url", redis_url, "events", "--queue", "mail", "--since", cursor],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert other.returncode == 2
    assert other.stderr.startswith("Error: Invalid value for '--since': cursor was returned for")
    assert "queue='orders'" in other.stderr


def test_events_since_gives_a_long_window_whole_in_pages(redis_url: str) -> None:
    """1,500 joins (more than one page of `changes`): `events --since` prints them all, once,
    and a cursor after them."""
    with RedisPresenceRegistry.from_url(redis_url) as registry:
        _, cursor = registry.changes()
        for start in range(0, 1_500, 5):  # entries of 5 events, so pages cut near 1,000
            registry.heartbeat_many([("q", "g", f"w{i:04}", 0) for i in range(start, start + 5)])
    out = subprocess.run(
        [*CLI, "--url", redis_url, "events", "--since", cursor, "--format", "json"],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    *events, last = [json.loads(line) for line in out.splitlines()]
    assert sorted(e["consumer"] for e in events) == [f"w{i:04}" for i in range(1_500)]
    with RedisPresenceRegistry.from_url(redis_url) as registry:
        assert registry.changes(last["cursor"])[0] == []

"""Issue 12 in the CLI: `events` (once, resumed, followed as a live JSON stream, through a
resync) and `ttl` (get, set, unset, and where every read's TTL comes from)."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from cli_invoke import DEFAULT_TTL_NOTE, Backend, backend, invoke, one_error_line
from test_cli_failures import CLI, cli_env

from redis_presence import FollowCursor, FollowSnapshot, RedisPresenceRegistry
from redis_presence.contract import PresenceRegistry

__all__ = ["backend"]  # the fixture, used by name below

pytestmark = pytest.mark.timeout(120)


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


# ---------------------------------------------------------------- events, once


def test_events_without_since_gives_only_a_cursor_and_since_resumes(backend: Backend) -> None:
    reg = backend.registry
    first = backend.run("events", "--format", "json")
    assert first.exit_code == 0, first.output
    [line] = json_lines(first.stdout)
    cursor = line["cursor"]
    reg.heartbeat("orders", "billing", "w1", 3)
    reg.heartbeat("orders", "billing", "w2")
    reg.deregister("orders", "billing", "w1")
    second = backend.run("events", "--since", cursor, "--format", "json")
    assert second.exit_code == 0, second.output
    *events, last = json_lines(second.stdout)
    assert [(e["kind"], e["consumer"], e["lease_count"]) for e in events] == [
        ("joined", "w1", 3),
        ("joined", "w2", 0),
        ("left", "w1", 3),
    ]
    assert set(events[0]) >= {"kind", "queue", "group", "consumer", "at_ns", "lease_count"}
    assert list(last) == ["cursor"]
    # From the new cursor: nothing again, and then only what came after.
    again = backend.run("events", "--since", last["cursor"], "--format", "json")
    assert json_lines(again.stdout)[:-1] == []
    # A cursor goes on only with the filter it was made for.
    of_emails = json_lines(backend.run("events", "--queue", "emails", "--format", "json").stdout)
    narrower = backend.run("events", "--since", last["cursor"], "--queue", "emails")
    assert narrower.exit_code == 2
    assert "Invalid value for '--since': cursor was returned for queue=None" in narrower.output
    reg.heartbeat("emails", "sender", "m1")
    table = backend.run("events", "--since", of_emails[0]["cursor"], "--queue", "emails")
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["AT", "(UTC)", "EVENT", "QUEUE", "GROUP", "CONSUMER", "LEASES"]
    assert lines[1].split()[1:] == ["joined", "emails", "sender", "m1", "0"]
    assert lines[-1].startswith("cursor: ")
    assert "events: TTL 30000 ms (the default" in table.stderr


def test_a_bad_cursor_is_one_line_naming_since(backend: Backend) -> None:
    for args in (["events", "--since", "garbage"], ["events", "--follow", "--since", "x"]):
        line = one_error_line(backend.run(*args))
        assert line == (
            "Error: Invalid value for '--since': not a cursor that 'redis-presence events' printed"
        )
    assert backend.run("events", "--since", "garbage").exit_code == 2


def test_events_since_a_time_without_a_saved_cursor(backend: Backend) -> None:
    reg = backend.registry
    reg.heartbeat("orders", "billing", "w1", 3)
    reg.heartbeat("emails", "sender", "m1")
    reg.deregister("orders", "billing", "w1")
    found = backend.run("events", "--since", "5m", "--format", "json")
    assert found.exit_code == 0, found.output
    *events, last = json_lines(found.stdout)
    assert sorted((e["kind"], e["consumer"]) for e in events) == [
        ("joined", "m1"),
        ("joined", "w1"),
        ("left", "w1"),
    ]
    # The cursor it ends with goes on as any cursor does (with the same filter).
    again = backend.run("events", "--since", last["cursor"], "--format", "json")
    assert json_lines(again.stdout)[:-1] == []
    of_orders = backend.run("events", "--since", "1h", "--queue", "orders", "--format", "json")
    assert [e["consumer"] for e in json_lines(of_orders.stdout)[:-1]] == ["w1", "w1"]
    for bad in ("25h", "2999-01-01T00:00:00Z"):
        line = one_error_line(backend.run("events", "--since", bad))
        assert line.startswith("Error: Invalid value for '--since': since must "), line


# ---------------------------------------------------------------- events --follow, resync


class Trimming:
    """Wraps a registry: its `follow` trims the event log past the cursor right after the
    first snapshot (so the next read must resync), beats once after the second snapshot,
    and stops (Ctrl-C) after the cursor that follows it."""

    def __init__(self, inner: RedisPresenceRegistry) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def follow(self, **options: Any) -> Iterator[Any]:
        snapshots = 0
        for message in self.inner.follow(**{**options, "interval_s": 0.01}):
            yield message
            if isinstance(message, FollowSnapshot):
                snapshots += 1
                if snapshots == 1:
                    for i in range(200):  # 400 entries; the log keeps about 50
                        self.inner.heartbeat("q", "g", f"c{i}")
                        self.inner.deregister("q", "g", f"c{i}")
                else:
                    self.inner.heartbeat("q", "g", "after")
            elif isinstance(message, FollowCursor) and snapshots == 2:
                raise KeyboardInterrupt


@pytest.mark.parametrize("fmt", ["json", "table"])
def test_follow_resyncs_when_the_log_was_trimmed_and_ends_with_the_cursor(
    fake_client: Any, fmt: str
) -> None:
    def factory(url: str, prefix: str, read_only: bool) -> PresenceRegistry:
        inner = RedisPresenceRegistry(fake_client, prefix=prefix, events_kept=50)
        return Trimming(inner)

    result = invoke(["events", "--follow", "--format", fmt], obj=factory)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    if fmt == "json":
        resync, joined, last = map(json.loads, lines)
        assert resync["resync"].startswith("the event log was trimmed past the cursor")
        assert (joined["kind"], joined["consumer"]) == ("joined", "after")
        assert list(last) == ["cursor"]
    else:
        assert lines[0].startswith("resync: the event log was trimmed past the cursor")
        assert lines[1].split()[1:] == ["joined", "q/g", "after", "0", "leases"]
        assert lines[2].startswith("cursor: ")


def test_follow_as_a_process_prints_each_change_within_a_second(redis_url: str) -> None:
    """`events --follow --format json` against a real server while other processes beat and
    deregister: each expected line arrives, in order, within one second; Ctrl-C ends it
    with the cursor, which resumes without repeating anything."""
    env = cli_env(REDIS_PRESENCE_URL=redis_url)
    proc = subprocess.Popen(
        [*CLI, "events", "--follow", "--format", "json", "--interval", "0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()

    def run(*args: str) -> None:
        subprocess.run([*CLI, *args], env=env, check=True, capture_output=True, timeout=30)

    def next_line(within_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + within_s
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                return dict(json.loads(line))
            except queue.Empty:
                raise AssertionError(f"no line within {within_s}s") from None

    try:
        # It says where the TTL comes from once it follows (it has its first cursor).
        assert proc.stderr is not None
        assert "events: TTL" in proc.stderr.readline()
        for action, kind in (
            (("heartbeat", "orders", "billing", "w1", "--lease-count", "2"), "joined"),
            (("heartbeat", "orders", "billing", "w2"), "joined"),
            (("deregister", "orders", "billing", "w1"), "left"),
        ):
            run(*action)
            done = time.monotonic()
            event = next_line(1.0)
            assert time.monotonic() - done <= 1.0
            assert (event["kind"], event["consumer"]) == (kind, action[3]), event
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
        reader.join(timeout=10)
        last = next_line(1.0)
        assert list(last) == ["cursor"]
        assert lines.empty()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    resumed = subprocess.run(
        [*CLI, "events", "--since", last["cursor"], "--format", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert [list(item) for item in json_lines(resumed.stdout)] == [["cursor"]]


# ---------------------------------------------------------------- ttl


def test_ttl_get_set_unset_and_where_each_read_takes_it_from(backend: Backend) -> None:
    reg = backend.registry
    got = backend.run("ttl")
    assert got.stdout == f"prefix 'presence': {DEFAULT_TTL_NOTE}\n"
    assert backend.run("ttl", "get").stdout == got.stdout
    stored = backend.run("ttl", "set", "5000")
    assert stored.exit_code == 0, stored.output
    assert stored.stdout.startswith("stored: prefix 'presence': TTL 5000 ms (stored for prefix")
    group = backend.run(
        "ttl", "set", "60000", "--queue", "slow", "--group", "batch", "--format", "json"
    )
    assert json.loads(group.stdout) == {
        "ttl_ms": 60_000,
        "source": "group",
        "queue": "slow",
        "group": "batch",
        "prefix": "presence",
    }
    assert reg.ttl_source("slow", "batch") == (60_000, "group")
    assert reg.ttl_source("fast", "any") == (5_000, "prefix")

    # Reads without --ttl-ms use the stored TTL, and say so on stderr.
    reg.heartbeat("slow", "batch", "s", now_ns=None)
    now = int(reg.client.time()[0]) * 1_000_000_000
    reg.heartbeat("fast", "any", "f", now_ns=now - 20_000 * 1_000_000)  # 20 s ago
    ls = backend.run("ls", "--format", "json", "--queue", "fast", "--group", "any")
    assert [row["state"] for row in json.loads(ls.stdout)] == ["expired"]  # under 5 s
    assert ls.stderr == "redis-presence: TTL 5000 ms (stored for prefix 'presence')\n"
    assert backend.run("counts").stderr == (  # each group with the TTL it was read with
        "redis-presence: TTL 60000 ms for queue 'slow' group 'batch' (its own)\n"
        "redis-presence: TTL 5000 ms for the other groups (stored for prefix 'presence')\n"
    )
    counted = backend.run("counts", "--queue", "slow", "--group", "batch")
    assert (
        counted.stderr == "redis-presence: TTL 60000 ms (stored for queue 'slow', group 'batch')\n"
    )
    explicit = backend.run("--ttl-ms", "30000", "ls", "--format", "json")
    assert {row["consumer"]: row["state"] for row in json.loads(explicit.stdout)} == {
        "f": "active",
        "s": "active",
    }
    assert explicit.stderr == "redis-presence: TTL 30000 ms (--ttl-ms)\n"
    from_env = backend.run("ls", env={"REDIS_PRESENCE_TTL_MS": "30000"})
    assert from_env.stderr == "redis-presence: TTL 30000 ms (REDIS_PRESENCE_TTL_MS)\n"

    # prune never removes a consumer that is active under the TTL the brokers share.
    dry = backend.run("prune", "--dry-run", "--format", "json")
    assert [row["consumer"] for row in json.loads(dry.stdout)] == ["f"]
    backend.run("ttl", "set", "30000")
    pruned = backend.run("prune", "--format", "json")
    assert json.loads(pruned.stdout) == {"pruned": 0, "ttl_ms": 30_000, "ttl_source": "prefix"}

    unset = backend.run("ttl", "unset", "--queue", "slow", "--group", "batch")
    assert unset.stdout == (
        "unset; now queue 'slow', group 'batch': TTL 30000 ms (stored for prefix 'presence')\n"
    )
    backend.run("ttl", "unset")
    assert reg.ttl_source() == (30_000, "default")


def test_ttl_refuses_bad_input_in_one_line(backend: Backend) -> None:
    for args, exit_code in (
        (["ttl", "set", "0"], 2),
        (["ttl", "set", "many"], 2),
        (["ttl", "set", "5000", "--queue", "only-a-queue"], 2),
        (["--read-only", "ttl", "set", "5000"], 6),
        (["--read-only", "ttl", "unset"], 6),
    ):
        result = backend.run(*args)
        one_error_line(result)
        assert result.exit_code == exit_code, (args, result.output)
    assert backend.registry.ttl_source() == (30_000, "default")  # nothing was written
    assert backend.run("--read-only", "ttl", "get").exit_code == 0


def test_watch_and_events_help_and_the_command_list() -> None:
    listing = invoke(["--help"]).stdout
    assert "events" in listing
    assert "ttl" in listing
    assert "--since CURSOR" in invoke(["events", "--help"]).stdout


# ---------------------------------------------------------------- watch, on the events


def test_event_watcher_takes_the_events_of_active_consumers_beats_in_its_stride() -> None:
    """Protocol version 2's draining, conflict, restarted and drain_requested say nothing of
    a consumer's state: the row stays as held, unmarked, the tallies unchanged. Before: a
    KeyError (watch died on the first draining beat)."""
    from redis_presence import ConsumerPresence, EventKind, PresenceEvent
    from redis_presence.cli.frames import EventWatcher, GroupTally

    s = 1_000_000_000
    t0 = 1_750_000_000 * s
    watcher = EventWatcher()
    watcher.start([ConsumerPresence.at("q", "g", "a", t0, t0, 1, now_ns=t0, ttl_ms=30_000)], t0)
    kinds = (EventKind.DRAINING, EventKind.CONFLICT, EventKind.RESTARTED)
    events = [PresenceEvent(kind, "q", "g", "a", t0 + s, 1, t0, t0 + s) for kind in kinds]
    events.append(PresenceEvent(EventKind.DRAIN_REQUESTED, "q", "g", "a", t0 + s, 1, t0, t0))
    watcher.apply(events, t0 + 2 * s)
    frame = watcher.frame()
    assert frame.changes == {}
    assert [item.row.consumer for item in frame.rows] == ["a"]
    assert frame.tallies == {("q", "g"): GroupTally(active=1)}


def test_event_watcher_applies_events_and_keeps_marks_for_a_few_refreshes() -> None:
    from redis_presence import ConsumerPresence, EventKind, PresenceEvent, PresenceState
    from redis_presence.cli.frames import MARK_REFRESHES, Change, EventWatcher, GroupTally

    s = 1_000_000_000
    t0 = 1_750_000_000 * s
    start = [
        ConsumerPresence.at("q", "g", "a", t0, t0, 1, now_ns=t0, ttl_ms=30_000),
        ConsumerPresence.at("q", "g", "b", t0, t0 - 40 * s, 0, now_ns=t0, ttl_ms=30_000),
    ]
    watcher = EventWatcher()
    watcher.start(start, t0)
    first = watcher.frame()
    assert first.changes == {}
    assert first.tallies == {("q", "g"): GroupTally(active=1, stale=1)}
    assert not any(item.age_bound for item in first.rows)  # the snapshot's ages are exact
    events = [
        PresenceEvent(EventKind.JOINED, "q", "g", "c", t0 + s, 2, t0 + s, t0 + s),
        PresenceEvent(EventKind.RECOVERED, "q", "g", "b", t0 + s, 0, t0, t0 + s),
        PresenceEvent(EventKind.LEFT, "q", "g", "a", t0 + 2 * s, 1, t0, t0),
    ]
    watcher.apply(events, t0 + 3 * s)
    frames = [watcher.frame() for _ in range(MARK_REFRESHES + 1)]
    marked = {item.row.consumer: (item.change, item.changed_at_ns) for item in frames[0].rows}
    assert marked == {
        "a": (Change.LEFT, t0 + 2 * s),
        "b": (Change.BACK, t0 + s),
        "c": (Change.JOINED, t0 + s),
    }
    assert frames[0].tallies == {("q", "g"): GroupTally(active=2)}
    rows = {item.row.consumer: item for item in frames[0].rows}
    assert rows["b"].row.state is PresenceState.ACTIVE
    assert rows["b"].row.last_seen_age_ms == 2_000
    assert rows["b"].age_bound  # it may have beaten since, writing no event
    assert frames[MARK_REFRESHES - 1].changes  # still marked on the last of the few
    last = frames[MARK_REFRESHES]
    assert last.changes == {}
    assert sorted(item.row.consumer for item in last.rows) == ["b", "c"]  # "a" left

    # A resync: what differs from the state before is marked at the new snapshot's instant.
    later = t0 + 10 * s
    watcher.start(
        [ConsumerPresence.at("q", "g", "d", later, later, 0, now_ns=later, ttl_ms=30_000)], later
    )
    resynced = watcher.frame()
    assert resynced.changes == {
        ("q", "g", "b"): Change.LEFT,
        ("q", "g", "c"): Change.LEFT,
        ("q", "g", "d"): Change.JOINED,
    }

"""Immortal timestamps are refused (issue 16, item 6).

A heartbeat whose explicit ``now_ns`` lies far ahead of the server's clock would stay
"active" for as long as that future lasts (a beat stamped in 2255 never goes stale): every
backend refuses a beat more than ``max_future_ms`` (default 10 s) ahead of the server clock
with a `PresenceClockError`, a `ValueError` that names ``now_ns``, and writes nothing.
``max_future_ms=None`` turns the guard off for synthetic time (tests, replays).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from typing import Any

import pytest
from backends import BACKENDS, dump, make_registry, raw_client
from click.testing import CliRunner
from conftest import RUN_COUNTS
from webservers import ROOT, cli_argv

from redis_presence import (
    DEFAULT_MAX_FUTURE_MS,
    ConsumerPresenceRegistry,
    PresenceClockError,
    PresenceState,
    RedisPresenceRegistry,
)
from redis_presence.cli import cli

MS = 1_000_000
HOUR_MS = 3_600_000
YEAR_2255_NS = 9_000_000_000 * 1_000_000_000


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def store_of(request: pytest.FixtureRequest, backend: str, registry: Any) -> Any:
    """What the store holds: every key for a Redis backend, the rows for the model."""
    if backend == "memory":  # the stored fields (an age depends on when it is asked)
        rows = registry.snapshot(now_ns=time.time_ns())
        return [(r.key, r.registered_at_ns, r.last_heartbeat_ns, r.lease_count) for r in rows]
    return dump(raw_client(request, backend))


def refused(error: pytest.ExceptionInfo[PresenceClockError], max_future_ms: int) -> None:
    """The refusal is a ValueError that names now_ns and the guard."""
    assert isinstance(error.value, ValueError)
    message = str(error.value)
    assert "now_ns" in message, message
    assert re.search(rf"max_future_ms={max_future_ms}\b", message), message
    RUN_COUNTS["clock guard: beats from the future refused, nothing written"] += 1


def test_the_default_guard_is_ten_seconds() -> None:
    assert DEFAULT_MAX_FUTURE_MS == 10_000
    assert ConsumerPresenceRegistry().max_future_ms == 10_000


def test_a_beat_an_hour_ahead_is_refused_and_nothing_written(
    request: pytest.FixtureRequest, backend: str
) -> None:
    registry = make_registry(request, backend)
    registry.heartbeat("orders", "billing", "w0", 1)  # the server's own clock
    before = store_of(request, backend, registry)
    ahead = time.time_ns() + HOUR_MS * MS
    with pytest.raises(PresenceClockError) as error:
        registry.heartbeat("orders", "billing", "w1", 1, now_ns=ahead)
    refused(error, DEFAULT_MAX_FUTURE_MS)
    with pytest.raises(PresenceClockError) as error:  # an existing consumer is not moved on
        registry.heartbeat("orders", "billing", "w0", 1, now_ns=ahead)
    refused(error, DEFAULT_MAX_FUTURE_MS)
    with pytest.raises(PresenceClockError) as error:
        registry.heartbeat("orders", "billing", "w1", 1, now_ns=YEAR_2255_NS)
    refused(error, DEFAULT_MAX_FUTURE_MS)
    assert store_of(request, backend, registry) == before
    assert len(registry) == 1


def test_a_batch_from_the_future_is_refused_whole(
    request: pytest.FixtureRequest, backend: str
) -> None:
    registry = make_registry(request, backend)
    before = store_of(request, backend, registry)
    beats = [("orders", "billing", f"w{i}", i) for i in range(5)] + [("mail", "send", "m", 0)]
    with pytest.raises(PresenceClockError) as error:
        registry.heartbeat_many(beats, now_ns=time.time_ns() + HOUR_MS * MS)
    refused(error, DEFAULT_MAX_FUTURE_MS)
    assert store_of(request, backend, registry) == before
    assert len(registry) == 0


def test_a_beat_a_few_seconds_ahead_is_written(
    request: pytest.FixtureRequest, backend: str
) -> None:
    """Clocks of brokers and server differ a little: 5 s ahead is inside the default."""
    registry = make_registry(request, backend)
    ahead = (time.time_ns() + 5_000 * MS) // 1000 * 1000  # Redis stores microseconds
    registry.heartbeat("orders", "billing", "w1", 3, now_ns=ahead)
    registry.heartbeat_many([("orders", "billing", "w2", 1)], now_ns=ahead)
    rows = {row.consumer: row for row in registry.snapshot(now_ns=ahead)}
    assert set(rows) == {"w1", "w2"}
    assert rows["w1"].last_heartbeat_ns == ahead
    assert rows["w1"].state == PresenceState.ACTIVE


def test_a_tighter_guard(request: pytest.FixtureRequest, backend: str) -> None:
    registry = make_registry(request, backend, max_future_ms=1_000)
    with pytest.raises(PresenceClockError) as error:
        registry.heartbeat("orders", "billing", "w1", now_ns=time.time_ns() + 5_000 * MS)
    refused(error, 1_000)
    registry.heartbeat("orders", "billing", "w1", now_ns=time.time_ns() - HOUR_MS * MS)
    assert len(registry) == 1  # the past is never refused


def test_no_guard_for_synthetic_time(request: pytest.FixtureRequest, backend: str) -> None:
    registry = make_registry(request, backend, max_future_ms=None)
    assert registry.max_future_ms is None
    registry.heartbeat("orders", "billing", "w1", now_ns=YEAR_2255_NS)
    registry.heartbeat_many([("orders", "billing", "w2", 0)], now_ns=YEAR_2255_NS)
    assert registry.count_active_by_group(now_ns=YEAR_2255_NS) == {("orders", "billing"): 2}


def test_reads_and_removals_are_not_guarded(request: pytest.FixtureRequest, backend: str) -> None:
    """Asking what the fleet will look like in an hour, or pruning by a later clock, writes no
    timestamp: only beats are guarded."""
    registry = make_registry(request, backend)
    registry.heartbeat("orders", "billing", "w1")
    later = time.time_ns() + HOUR_MS * MS
    (row,) = registry.snapshot(now_ns=later, ttl_ms=30_000)
    assert row.state == PresenceState.EXPIRED
    assert registry.prune_expired(now_ns=later, ttl_ms=30_000) == 1


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("10", TypeError),
        (1.5, TypeError),
        (True, TypeError),
        (-1, ValueError),
        (10**12, ValueError),
    ],
)
def test_a_bad_guard_is_refused_by_name(value: Any, error: type[Exception]) -> None:
    for make in (
        lambda: ConsumerPresenceRegistry(max_future_ms=value),
        lambda: RedisPresenceRegistry.from_url("redis://127.0.0.1:1", max_future_ms=value),
    ):
        with pytest.raises(error, match="max_future_ms"):
            make()


@pytest.mark.redis_server
def test_the_cli_refuses_a_beat_from_the_future_in_one_line(redis_server: Any) -> None:
    ahead = time.time_ns() + HOUR_MS * MS
    done = subprocess.run(
        [
            *cli_argv(),
            "--url",
            redis_server.url,
            "--now-ns",
            str(ahead),
            "heartbeat",
            "orders",
            "billing",
            "w1",
        ],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("Error: "), line
    assert "now_ns" in line, line
    assert "ahead of the server clock" in line, line
    with RedisPresenceRegistry.from_url(redis_server.url) as registry:
        assert len(registry) == 0


@pytest.mark.redis_server
def test_ls_marks_beats_stamped_ahead_of_the_server_clock(redis_server: Any) -> None:
    """A broker whose clock runs 7 s ahead (inside the guard) writes beats from the server's
    future: `ls` shows them as AHEAD instead of a reassuring "0s ago"; JSON keeps the
    contract's fields and values."""
    with RedisPresenceRegistry.from_url(redis_server.url) as registry:
        server_now = registry.clock_ns()
        registry.heartbeat("orders", "billing", "skewed", now_ns=server_now + 7_000 * MS)
        registry.heartbeat("orders", "billing", "true", now_ns=server_now - 2_000 * MS)
    env = {"COLUMNS": "200", "NO_COLOR": "1"}
    table = CliRunner(env=env).invoke(cli, ["--url", redis_server.url, "ls"])
    assert table.exit_code == 0, table.output
    lines = {line.split()[2]: line for line in table.stdout.splitlines() if "orders" in line}
    assert re.search(r"active\s+[67]s AHEAD", lines["skewed"]), lines["skewed"]
    assert re.search(r"active\s+[23]s ago", lines["true"]), lines["true"]
    assert "AHEAD" not in lines["true"]
    as_json = CliRunner(env=env).invoke(cli, ["--url", redis_server.url, "ls", "--format", "json"])
    rows = {row["consumer"]: row for row in json.loads(as_json.stdout)}
    assert rows["skewed"]["last_seen_age_ms"] == 0
    assert rows["skewed"]["state"] == "active"

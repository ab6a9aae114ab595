"""`redis-presence prune --every` and `--retention` (issue 32 item 5): automatic removal
from the CLI, one line per pass, stopped cleanly by SIGTERM or Ctrl-C."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
import time
from typing import Any, cast

import pytest
import redis
from cli_invoke import invoke, one_error_line
from test_cli_failures import CLI, cli_env

from redis_presence import RedisPresenceRegistry
from redis_presence.contract import PresenceRegistry

MS = 1_000_000
TTL = 30_000


def _seed(registry: RedisPresenceRegistry, now: int) -> None:
    registry.heartbeat("orders", "billing", "live", now_ns=now)
    # Expired 2 minutes ago: within the default retention (60 TTLs, 30 minutes).
    registry.heartbeat("orders", "billing", "recent", now_ns=now - (2 * TTL + 120_000) * MS)
    # Expired 31 minutes ago: past it.
    registry.heartbeat("orders", "billing", "old", now_ns=now - (2 * TTL + 31 * 60_000) * MS)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_every_prunes_past_the_retention_one_line_a_pass_and_stops_cleanly(
    redis_url: str, redis_client: redis.Redis, stop: signal.Signals
) -> None:
    registry = RedisPresenceRegistry(redis_client, max_future_ms=None)
    _seed(registry, time.time_ns())
    proc = subprocess.Popen(
        [*CLI, "prune", "--every", "200ms", "--format", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(REDIS_PRESENCE_URL=redis_url),
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        first = json.loads(lines.get(timeout=20))
        assert (first["pruned"], first["retention_ms"], first["error"]) == (1, None, None)
        second = json.loads(lines.get(timeout=20))
        assert second["pruned"] == 0
        proc.send_signal(stop)
        assert proc.wait(timeout=20) == 0
        assert proc.stderr is not None
        assert "Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    left = sorted(r.consumer for r in registry.snapshot())
    assert left == ["live", "recent"]


def test_retention_once_keeps_the_recently_expired(
    redis_url: str, redis_client: redis.Redis
) -> None:
    registry = RedisPresenceRegistry(redis_client, max_future_ms=None)
    _seed(registry, time.time_ns())
    result = invoke(["--url", redis_url, "prune", "--retention", "10m"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "pruned 1 expired consumer(s)\n"
    result = invoke(["--url", redis_url, "prune"])
    assert result.stdout == "pruned 1 expired consumer(s)\n"
    assert [r.consumer for r in registry.snapshot()] == ["live"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["prune", "--every", "1m", "--dry-run"], "--dry-run removes nothing"),
        (["prune", "--every", "1m", "--queue", "orders"], "--every prunes the whole prefix"),
        (["prune", "--every", "10ms"], "must be a duration from 100 ms"),
        (["prune", "--every", "soon"], "is not a duration"),
        (["prune", "--retention", "-5s"], "must be a duration from 0 ms"),
        (["prune", "--dry-run", "--retention", "5m"], "drop --retention"),
        (["--read-only", "prune", "--every", "1m"], "--read-only"),
    ],
)
def test_bad_every_or_retention_is_one_error_line(args: list[str], says: str) -> None:
    result = invoke(["--url", "redis://127.0.0.1:1/0", *args])
    assert says in one_error_line(result)


def test_every_keeps_going_when_redis_is_unreachable(fake_client: Any) -> None:
    """A pass that fails is a line, not the end of the loop (the test stops it by its
    second pass's wait)."""
    calls = []

    class Failing:
        def prune_expired(self, **options: Any) -> int:
            from redis_presence import PresenceConnectionError

            calls.append(options)
            if len(calls) == 2:
                raise KeyboardInterrupt  # as SIGTERM does
            raise PresenceConnectionError("Redis unreachable at 127.0.0.1:1")

    def factory(url: str, prefix: str, read_only: bool) -> PresenceRegistry:
        return cast(PresenceRegistry, Failing())

    result = invoke(["prune", "--every", "100ms"], obj=factory)
    assert result.exit_code == 0, result.output
    assert result.stdout.split(" ", 1)[1] == "prune failed: Redis unreachable at 127.0.0.1:1\n"
    assert calls[0] == {"ttl_ms": None, "retention_ms": None}


def test_every_counts_what_went_when_a_group_is_refused() -> None:
    """A pass that pruned some and had a group refused (bad data) says both, and goes on."""
    from redis_presence import PresenceBatchError, PresenceDataError

    calls = []

    class Partly:
        def prune_expired(self, **options: Any) -> int:
            calls.append(options)
            if len(calls) == 2:
                raise KeyboardInterrupt
            spoilt = PresenceDataError("WRONGTYPE presence:{q}:g:c holds a list")
            raise PresenceBatchError({("q", "g"): spoilt}, 3)

    def factory(url: str, prefix: str, read_only: bool) -> PresenceRegistry:
        return cast(PresenceRegistry, Partly())

    result = invoke(["prune", "--every", "100ms", "--format", "json"], obj=factory)
    assert result.exit_code == 0, result.output
    line = json.loads(result.stdout)
    assert line["pruned"] == 3
    assert line["error"].startswith("refused in 1 group, 3 done: q/g: WRONGTYPE")

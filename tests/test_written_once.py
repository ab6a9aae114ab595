"""Metadata and progress are written once per change, counted on the server (INFO
commandstats): the hot path pays nothing for them."""

from __future__ import annotations

import pytest
import redis

from redis_presence import PresenceReporter, RedisPresenceRegistry
from redis_presence.reporter import default_meta

MS = 1_000_000
LONG_MS = 3_600_000

pytestmark = [pytest.mark.redis_server, pytest.mark.timeout(60)]


def calls(client: redis.Redis, command: str) -> int:
    stats = client.info("commandstats").get(f"cmdstat_{command}")
    return int(stats["calls"]) if stats else 0


class Clock:
    def __init__(self) -> None:
        self.now = 10**15

    def __call__(self) -> int:
        return self.now


def test_describe_writes_only_a_change(redis_client: redis.Redis) -> None:
    registry = RedisPresenceRegistry(redis_client)
    registry.heartbeat("q", "g", "w1")
    redis_client.config_resetstat()
    for _ in range(3):
        assert registry.describe("q", "g", "w1", {"host": "h-1"}) is True
    assert calls(redis_client, "hset") == 1  # the first; the same value twice writes nothing
    registry.describe("q", "g", "w1", {"host": "h-2"})
    assert calls(redis_client, "hset") == 2
    registry.describe("q", "g", "w1", {})
    registry.describe("q", "g", "w1", {})
    assert calls(redis_client, "hdel") == 1


def test_a_reporter_with_unchanged_metadata_writes_it_with_its_first_flush_only(
    redis_client: redis.Redis,
) -> None:
    registry = RedisPresenceRegistry(redis_client)
    clock = Clock()
    with PresenceReporter(registry, LONG_MS, clock=clock, meta={"pod": "billing-0"}) as reporter:
        reporter.beat("warm", "up", "c")
        reporter.flush()  # loads both scripts
        redis_client.config_resetstat()
        reporter.beat("q", "g", "w1", 1)
        reporter.flush()
        # the beat (a function), then the new consumer's metadata (a script)
        assert calls(redis_client, "fcall") + calls(redis_client, "evalsha") == 2
        meta = {**default_meta(), "pod": "billing-0"}
        (row,) = registry.snapshot(queue="q", with_meta=True)
        assert dict(row.meta) == meta
        redis_client.config_resetstat()
        for _ in range(5):
            reporter.beat("q", "g", "w1", 1)
            reporter.flush()
        assert calls(redis_client, "fcall") == 5  # the beats only: no metadata write
        assert calls(redis_client, "evalsha") == 0
        assert calls(redis_client, "hset") == 5
        reporter.describe({"pod": "billing-1"})
        reporter.beat("q", "g", "w1", 1)
        reporter.flush()
        assert calls(redis_client, "fcall") + calls(redis_client, "evalsha") == 7  # once more
        assert registry.snapshot(queue="q", with_meta=True)[0].meta["pod"] == "billing-1"


def test_progress_is_coalesced_into_the_next_flush_at_its_own_instant(
    redis_client: redis.Redis,
) -> None:
    registry = RedisPresenceRegistry(redis_client)
    clock = Clock()
    with PresenceReporter(registry, LONG_MS, clock=clock, default_meta=False) as reporter:
        reporter.beat("warm", "up", "c")
        reporter.flush()
        redis_client.config_resetstat()
        seconds, micros = redis_client.time()
        before = (int(seconds) * 1_000_000 + int(micros)) * 1_000
        for _i in range(10):  # ten acknowledgements between two flushes
            reporter.beat("q", "g", "w1", 1, progressed=True)
            clock.now += 100 * MS
        reporter.beat("q", "g", "w1", 1)  # a plain beat after the last progress keeps it
        clock.now += 1_000 * MS
        reporter.flush()
        assert calls(redis_client, "fcall") == 1  # one write for all of it
        assert calls(redis_client, "hset") == 1
        (row,) = registry.snapshot(queue="q")
        # The last progress was 1.1 s before the flush, the last beat 1 s: both kept apart.
        assert row.last_progress_ns is not None
        assert row.last_heartbeat_ns - row.last_progress_ns == pytest.approx(100 * MS, abs=MS)
        assert row.last_progress_ns < before
        redis_client.config_resetstat()
        reporter.beat("q", "g", "w1", 1)
        reporter.flush()
        assert registry.snapshot(queue="q")[0].last_progress_ns == row.last_progress_ns


def test_a_heartbeat_of_an_active_consumer_without_news_is_one_lean_script_call(
    redis_client: redis.Redis,
) -> None:
    registry = RedisPresenceRegistry(redis_client)
    registry.heartbeat("q", "g", "w1", 1, progressed=True)
    registry.describe("q", "g", "w1", {"host": "h"})
    redis_client.config_resetstat()
    registry.heartbeat("q", "g", "w1", 1)
    stats = {
        k.removeprefix("cmdstat_"): v["calls"] for k, v in redis_client.info("commandstats").items()
    }
    # What heartbeat.lua does for an active consumer: no metadata, no event, no look at the
    # index (its group was listed when it joined); the GET is the protocol version, checked
    # in the script (docs/protocol.md, section 1). The heartbeats are Redis functions.
    stats.pop("config|resetstat")
    assert stats == {
        "fcall": 1,
        "get": 1,
        "hget": 1,
        "time": 1,
        "zadd": 1,
        "hset": 1,
    }
    (row,) = registry.snapshot(with_meta=True)
    assert row.last_progress_ns is not None
    assert dict(row.meta) == {"host": "h"}

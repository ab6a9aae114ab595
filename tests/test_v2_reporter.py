"""The reporters with protocol version 2: capacity and draining per consumer (coalesced like
progress), and `on_drain_requested`, called after a flush whose reply names a consumer."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
import redis
import redis.asyncio

from redis_presence import AsyncRedisPresenceRegistry, PresenceReporter, RedisPresenceRegistry
from redis_presence.coalescer import Coalescer
from redis_presence.reporter import AsyncPresenceReporter

LONG_MS = 3_600_000
Q, G = "orders", "billing"

pytestmark = pytest.mark.redis_server


def stored(client: redis.Redis, consumer: str) -> list[str]:
    value = client.hget(f"presence:{{{Q}}}:{G}:c", consumer)
    assert value is not None
    return (value if isinstance(value, str) else value.decode()).split(" ")


def test_capacity_and_draining_are_written_and_kept_across_coalesced_beats(
    redis_client: redis.Redis,
) -> None:
    registry = RedisPresenceRegistry(redis_client, instance="rep-1")
    with PresenceReporter(registry, LONG_MS, default_meta=False) as reporter:
        reporter.beat(Q, G, "w1", 2, capacity=8)
        reporter.beat(Q, G, "w1", 3)  # coalesced: the capacity said before is kept
        reporter.beat(Q, G, "w2", 0)
        assert reporter.flush() == 2
        assert stored(redis_client, "w1")[2:8] == ["3", "0", "8", "0", "0", "rep-1"]
        assert stored(redis_client, "w2")[4:6] == ["0", "0"]
        reporter.beat(Q, G, "w1", 3)  # a flush without it: the stored capacity is kept
        reporter.beat(Q, G, "w2", 0, draining=True, progressed=True)
        reporter.flush()
        assert stored(redis_client, "w1")[4] == "8"
        assert stored(redis_client, "w2")[5] == "1"
        assert stored(redis_client, "w2")[3] != "0"  # progress went with it
        reporter.beat(Q, G, "w2", 0, draining=False)
        reporter.flush()
        assert stored(redis_client, "w2")[5] == "0"


def test_bad_capacity_or_draining_raise_at_the_beat(redis_client: redis.Redis) -> None:
    with PresenceReporter(RedisPresenceRegistry(redis_client), LONG_MS) as reporter:
        with pytest.raises(TypeError, match="capacity"):
            reporter.beat(Q, G, "w1", capacity=True)
        with pytest.raises(ValueError, match="capacity"):
            reporter.beat(Q, G, "w1", capacity=-1)
        with pytest.raises(TypeError, match="draining"):
            reporter.beat(Q, G, "w1", draining=1)  # type: ignore[arg-type]
        assert reporter.pending == 0


def test_on_drain_requested_is_called_after_the_flush_until_a_draining_beat(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    asked: list[tuple[str, str, str]] = []
    registry = RedisPresenceRegistry(redis_client)
    with PresenceReporter(
        registry, LONG_MS, on_drain_requested=lambda *key: asked.append(key)
    ) as reporter:
        reporter.beat(Q, G, "w1")
        reporter.beat(Q, G, "w2")
        reporter.flush()
        assert asked == []
        assert registry.request_drain(Q, G, "w2") is True
        reporter.beat(Q, G, "w1")
        reporter.beat(Q, G, "w2")
        reporter.flush()
        assert asked == [(Q, G, "w2")]
        reporter.beat(Q, G, "w2")
        reporter.flush()
        assert asked == [(Q, G, "w2")] * 2  # again, until it says it drains
        reporter.beat(Q, G, "w2", draining=True)
        reporter.flush()
        reporter.beat(Q, G, "w2")
        reporter.flush()
        assert asked == [(Q, G, "w2")] * 2

    def broken(queue: str, group: str, consumer: str) -> None:
        raise RuntimeError("the callback's own bug")

    with PresenceReporter(registry, LONG_MS, on_drain_requested=broken) as reporter:
        registry.request_drain(Q, G, "w1")
        reporter.beat(Q, G, "w1")
        with caplog.at_level(logging.ERROR, logger="redis_presence.reporter"):
            assert reporter.flush() == 1  # logged, never raised
        assert "on_drain_requested" in caplog.text
    with pytest.raises(TypeError, match="on_drain_requested"):
        PresenceReporter(registry, LONG_MS, on_drain_requested="no")  # type: ignore[arg-type]


def test_the_asyncio_reporter_tells_drains_alike(redis_server: Any) -> None:
    asked: list[tuple[str, str, str]] = []

    async def main() -> None:
        client = redis.asyncio.Redis(host=redis_server.host, port=redis_server.port)
        await client.flushall()
        registry = AsyncRedisPresenceRegistry(client)
        async with AsyncPresenceReporter(
            registry, LONG_MS, on_drain_requested=lambda *key: asked.append(key)
        ) as reporter:
            reporter.beat(Q, G, "w1", capacity=4)
            await reporter.flush()
            assert await registry.request_drain(Q, G, "w1") is True
            reporter.beat(Q, G, "w1")
            await reporter.flush()
        await registry.aclose()
        await client.aclose()

    asyncio.run(main())
    assert asked == [(Q, G, "w1")]


def test_the_coalescer_sends_the_full_beat_only_when_it_says_more() -> None:
    now = [10**12]
    core = Coalescer(1_000, track=False, clock=lambda: now[0])
    core.beat(Q, G, "plain", 1)
    core.beat(Q, G, "rich", 1, capacity=5)
    core.beat(Q, G, "rich", 2, draining=True)
    _, taken = core.begin()
    assert taken is not None
    now[0] += 3_000
    assert sorted(core.delayed(taken)) == [
        (Q, G, "plain", 1, 3),
        (Q, G, "rich", 2, 3, None, 5, True),
    ]

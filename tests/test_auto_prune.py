"""Automatic removal by a long-running process (issue 32 item 5): `serve --prune-every` and
a reporter's ``prune_every_ms``; off by default, refused where the process may not write."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis
from cli_invoke import invoke, one_error_line
from waiting import wait_until
from web_client import make_client

from redis_presence import AsyncRedisPresenceRegistry, PresenceReporter, RedisPresenceRegistry

MS = 1_000_000
TTL = 30_000


def _seed(registry: RedisPresenceRegistry) -> None:
    now = time.time_ns()
    registry.heartbeat("q", "g", "live", now_ns=now)
    registry.heartbeat("q", "g", "recent", now_ns=now - (2 * TTL + 60_000) * MS)
    registry.heartbeat("q", "g", "old", now_ns=now - (2 * TTL + 31 * 60_000) * MS)


def _left(registry: RedisPresenceRegistry) -> list[str]:
    return sorted(r.consumer for r in registry.snapshot())


@pytest.mark.redis_server
def test_serve_prunes_past_the_retention_when_asked(
    redis_url: str, redis_client: redis.Redis
) -> None:
    writer = RedisPresenceRegistry(redis_client, max_future_ms=None)
    _seed(writer)
    with make_client(redis_url, ttl_ms=None, prune_every_s=0.1) as client:
        wait_until(
            lambda: _left(writer) == ["live", "recent"], timeout_s=10, what="old pruned by serve"
        )
        assert client.get("/healthz").status_code == 200
    # The default retention kept the one expired a minute ago.
    assert _left(writer) == ["live", "recent"]


def test_a_read_only_serve_cannot_prune() -> None:
    result = invoke(
        ["--url", "redis://127.0.0.1:1/0", "--read-only", "serve", "--prune-every", "1m"]
    )
    assert "a read-only serve cannot prune" in one_error_line(result)
    result = invoke(["--url", "redis://127.0.0.1:1/0", "serve", "--prune-retention", "1h"])
    assert "--prune-retention needs --prune-every" in one_error_line(result)


@pytest.mark.redis_server
def test_a_reporter_prunes_when_asked(redis_client: redis.Redis) -> None:
    registry = RedisPresenceRegistry(redis_client, max_future_ms=None)
    _seed(registry)
    with PresenceReporter(registry, interval_ms=50, prune_every_ms=100, prune_retention_ms=0):
        wait_until(lambda: _left(registry) == ["live"], timeout_s=10, what="pruned by reporter")


@pytest.mark.redis_server
def test_a_reporter_prunes_nothing_unless_asked(redis_client: redis.Redis) -> None:
    registry = RedisPresenceRegistry(redis_client, max_future_ms=None)
    _seed(registry)
    redis_client.config_resetstat()
    with PresenceReporter(registry, interval_ms=50) as reporter:
        reporter.beat("q", "g", "live")
        time.sleep(0.3)  # several flushes: none of them prunes
    assert _left(registry) == ["live", "old", "recent"]
    assert "cmdstat_zrem" not in redis_client.info("commandstats")


@pytest.mark.redis_server
def test_an_async_reporter_prunes_when_asked(redis_url: str, redis_client: redis.Redis) -> None:
    from redis_presence import AsyncPresenceReporter

    _seed(RedisPresenceRegistry(redis_client, max_future_ms=None))

    async def main() -> None:
        registry = AsyncRedisPresenceRegistry.from_url(redis_url)
        try:
            async with AsyncPresenceReporter(registry, interval_ms=50, prune_every_ms=100):
                for _ in range(200):
                    if len(await registry.snapshot()) == 2:
                        return
                    await asyncio.sleep(0.05)
                raise AssertionError("the async reporter did not prune")
        finally:
            await registry.aclose()

    asyncio.run(main())
    assert _left(RedisPresenceRegistry(redis_client)) == ["live", "recent"]


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"prune_every_ms": 50}, ValueError),
        ({"prune_every_ms": "1m"}, TypeError),
        ({"prune_every_ms": 1_000, "prune_retention_ms": -1}, ValueError),
    ],
)
def test_a_reporter_refuses_a_bad_prune_option_naming_it(
    fake_client: redis.Redis, options: dict[str, object], error: type[Exception]
) -> None:
    registry = RedisPresenceRegistry(fake_client)
    with pytest.raises(error, match="prune_"):
        PresenceReporter(registry, **options)  # type: ignore[arg-type]

"""AsyncRedisPresenceRegistry specifics. The contract suite runs on it through the backend
matrix (`backends.py`, ids ``async`` and ``async-cluster``); these cover what only the async
shell does: coroutines, size(), aclose/async with, errors, and read-only replicas."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from servers import MakeRedisServer, RedisServer, free_port

from redis_presence import (
    AsyncPresenceReporter,
    AsyncRedisPresenceRegistry,
    PresenceConnectionError,
    PresenceReadOnlyError,
    RedisPresenceRegistry,
)

MS = 1_000_000
T0 = 1_796_000_000_123_456_000

pytestmark = pytest.mark.timeout(60)


def async_client(server: RedisServer) -> redis.asyncio.Redis:
    return redis.asyncio.Redis(host=server.host, port=server.port)


def test_every_method_is_a_coroutine_and_len_is_size(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    sync = RedisPresenceRegistry(redis_client)

    async def main() -> None:
        async with AsyncRedisPresenceRegistry.from_url(redis_server.url) as registry:
            assert asyncio.iscoroutinefunction(registry.heartbeat)
            await registry.heartbeat("orders", "billing", "a", 2, now_ns=T0)
            assert await registry.heartbeat_many([("orders", "billing", "b", 1)], now_ns=T0) == 1
            assert await registry.size() == len(sync) == 2
            assert await registry.snapshot(now_ns=T0) == sync.snapshot(now_ns=T0)
            assert await registry.count_active_by_group(now_ns=T0) == {("orders", "billing"): 2}
            assert await registry.deregister("orders", "billing", "a") is True
            assert await registry.prune_expired(now_ns=T0 + 10**15) == 1
            assert await registry.size() == 0
        # Leaving the block closed from_url's client: an open one would be a ResourceWarning,
        # which the test configuration turns into an error.

    asyncio.run(main())


def test_bad_arguments_raise_before_any_io() -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(port=free_port(), retry=Retry(NoBackoff(), 0))
        registry = AsyncRedisPresenceRegistry(client)
        calls: list[Callable[[], Awaitable[Any]]] = [
            lambda: registry.heartbeat("", "g", "c"),
            lambda: registry.heartbeat("q", "g", "c", -1),
            lambda: registry.heartbeat_many([("q", "g")]),  # type: ignore[list-item]
            lambda: registry.snapshot(ttl_ms=0),
            lambda: registry.prune_expired(now_ns=-1),
            lambda: registry.deregister("q", 7, "c"),  # type: ignore[arg-type]
        ]
        for call in calls:
            with pytest.raises((TypeError, ValueError)):
                await call()
        with pytest.raises(PresenceConnectionError):
            await registry.size()
        await client.aclose()

    asyncio.run(main())


def test_read_only_async_registry_reads_a_replica_and_refuses_writes(
    make_redis_server: MakeRedisServer,
) -> None:
    primary = make_redis_server()
    replica = make_redis_server(replicaof=primary)
    replica.wait_replica_synced()
    with primary.client() as client:
        RedisPresenceRegistry(client).heartbeat_many(
            [("orders", "billing", "a", 1), ("mail", "send", "b", 2)], now_ns=T0
        )
    primary.wait_for_replicas(1)

    async def main() -> None:
        async with AsyncRedisPresenceRegistry.from_url(replica.url, read_only=True) as reader:
            assert reader.read_only
            rows = await reader.snapshot(now_ns=T0)  # EVALSHA_RO; NOSCRIPT loads it first
            assert [row.key for row in rows] == [
                ("mail", "send", "b"),
                ("orders", "billing", "a"),
            ]
            assert await reader.count_active_by_group(now_ns=T0) == {
                ("mail", "send"): 1,
                ("orders", "billing"): 1,
            }
            for write in (
                reader.heartbeat("q", "g", "c"),
                reader.heartbeat_many([("q", "g", "c", 0)]),
                reader.prune_expired(),
                reader.deregister("orders", "billing", "a"),
            ):
                with pytest.raises(PresenceReadOnlyError, match="read-only"):
                    await write
            with pytest.raises(ValueError, match="read_only"):
                AsyncPresenceReporter(reader)
            assert await reader.size() == 2

    asyncio.run(main())

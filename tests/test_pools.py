"""Connection pools under many concurrent callers: calls past the pool's size wait for a
free connection (`pool_timeout`) instead of failing, a pool that stays full is a
`PresencePoolExhausted` (never "cannot reach Redis"), and an asyncio registry works again
in a new event loop. Against a real redis-server."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
from servers import RedisServer

from redis_presence import (
    AsyncRedisPresenceRegistry,
    BeatReply,
    PresenceConnectionError,
    PresenceError,
    PresencePoolExhausted,
    RedisPresenceRegistry,
)
from redis_presence.errors import server_answered
from redis_presence.urls import DEFAULT_MAX_CONNECTIONS, DEFAULT_POOL_TIMEOUT_S

pytestmark = [pytest.mark.redis_server, pytest.mark.timeout(120)]

MS = 1_000_000
T0 = 1_796_000_000_000 * MS


@pytest.fixture(autouse=True)
def leave_it_empty(redis_server: RedisServer) -> Iterator[None]:
    """Flush the session server after each test (later modules expect it empty)."""
    yield
    with redis_server.client() as client:
        client.flushall()


def tracked(server: RedisServer, queue: str) -> int:
    """How many consumers of `queue` Redis holds (a read of its own connection)."""
    sync = RedisPresenceRegistry.from_url(server.url)
    try:
        return sum(1 for row in sync.snapshot(now_ns=T0, queue=queue))
    finally:
        sync.close()


@pytest.mark.slow
def test_1000_concurrent_asyncio_heartbeats_are_all_written(
    redis_server: RedisServer, redis_url: str
) -> None:
    async def main() -> list[BeatReply | BaseException]:
        async with AsyncRedisPresenceRegistry.from_url(redis_url, max_future_ms=None) as registry:
            return await asyncio.gather(
                *(registry.heartbeat("many", "g", f"c{i:04d}", now_ns=T0) for i in range(1000)),
                return_exceptions=True,
            )

    results = asyncio.run(main())
    failed = [r for r in results if not isinstance(r, BeatReply)]
    assert failed == []
    assert tracked(redis_server, "many") == 1000


def test_the_pool_size_and_wait_are_options(redis_url: str) -> None:
    async def main() -> None:
        registry = AsyncRedisPresenceRegistry.from_url(redis_url)
        pool = registry.client.connection_pool
        assert (pool.max_connections, pool.timeout) == (
            DEFAULT_MAX_CONNECTIONS,
            DEFAULT_POOL_TIMEOUT_S,
        )
        await registry.aclose()
        registry = AsyncRedisPresenceRegistry.from_url(
            redis_url + "?max_connections=3&pool_timeout=0.5"
        )
        pool = registry.client.connection_pool
        assert (pool.max_connections, pool.timeout) == (3, 0.5)
        await registry.aclose()
        registry = AsyncRedisPresenceRegistry.from_url(redis_url, max_connections=4, pool_timeout=1)
        pool = registry.client.connection_pool
        assert (pool.max_connections, pool.timeout) == (4, 1)
        # Many more calls than connections: they wait their turn, and all are written.
        await asyncio.gather(
            *(registry.heartbeat("small", "g", f"c{i}", now_ns=T0) for i in range(200))
        )
        assert len(await registry.snapshot(now_ns=T0, queue="small")) == 200
        await registry.aclose()

    asyncio.run(main())
    sync = RedisPresenceRegistry.from_url(redis_url + "?max_connections=2&pool_timeout=0.25")
    pool = sync.client.connection_pool
    assert (pool.max_connections, pool.timeout) == (2, 0.25)
    sync.close()


@pytest.mark.parametrize(
    "bad",
    ["pool_timeout=0", "pool_timeout=-1", "pool_timeout=soon", "max_connections=0"],
)
def test_bad_pool_options_are_config_errors(redis_url: str, bad: str) -> None:
    with pytest.raises(PresenceError, match=bad.partition("=")[0]):
        AsyncRedisPresenceRegistry.from_url(f"{redis_url}?{bad}")
    with pytest.raises(PresenceError, match=bad.partition("=")[0]):
        RedisPresenceRegistry.from_url(f"{redis_url}?{bad}")


def test_a_pool_that_stays_full_is_pool_exhausted_not_unreachable(redis_url: str) -> None:
    async def main() -> None:
        registry = AsyncRedisPresenceRegistry.from_url(
            redis_url, max_connections=1, pool_timeout=0.2
        )
        pool = registry.client.connection_pool
        held = await pool.get_connection()  # the only connection, taken
        try:
            with pytest.raises(PresencePoolExhausted) as caught:
                await registry.heartbeat("q", "g", "c", now_ns=T0)
            assert not isinstance(caught.value, PresenceConnectionError)
            assert "cannot reach Redis" not in str(caught.value)
            assert "max_connections" in str(caught.value)
            assert not server_answered(caught.value)
            with pytest.raises(PresencePoolExhausted):
                await registry.snapshot(now_ns=T0)
        finally:
            await pool.release(held)
        await registry.heartbeat("q", "g", "c", now_ns=T0)  # free again: it goes through
        await registry.aclose()

    asyncio.run(main())

    sync = RedisPresenceRegistry.from_url(redis_url, max_connections=1, pool_timeout=0.2)
    pool = sync.client.connection_pool
    held = pool.get_connection()
    failed: list[BaseException] = []

    def beat() -> None:
        try:
            sync.heartbeat("q", "g", "t", now_ns=T0)
        except BaseException as exc:  # collected for the assertion
            failed.append(exc)

    thread = threading.Thread(target=beat)
    thread.start()
    thread.join(10)
    pool.release(held)
    assert len(failed) == 1, failed
    assert isinstance(failed[0], PresencePoolExhausted), failed
    sync.heartbeat("q", "g", "t", now_ns=T0)
    sync.close()


def test_more_threads_than_connections_all_write(redis_server: RedisServer, redis_url: str) -> None:
    sync = RedisPresenceRegistry.from_url(redis_url, max_connections=4, max_future_ms=None)
    failed: list[BaseException] = []
    start = threading.Barrier(40)

    def beat(n: int) -> None:
        start.wait()
        try:
            for i in range(10):
                sync.heartbeat("threads", "g", f"t{n}-{i}", now_ns=T0)
        except BaseException as exc:  # collected for the assertion
            failed.append(exc)

    threads = [threading.Thread(target=beat, args=(n,)) for n in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    sync.close()
    assert failed == []
    assert tracked(redis_server, "threads") == 400


def test_the_asyncio_registry_works_again_in_a_new_event_loop(redis_url: str) -> None:
    registry = AsyncRedisPresenceRegistry.from_url(redis_url, max_future_ms=None)

    async def beat(consumer: str) -> int:
        await registry.heartbeat("loops", "g", consumer, now_ns=T0)
        return await registry.size()

    assert asyncio.run(beat("first")) == 1
    assert asyncio.run(beat("second")) == 2  # a new loop: new connections, no RuntimeError
    assert asyncio.run(beat("third")) == 3
    asyncio.run(registry.aclose())

"""Every kind of client the package opens or is handed, with every warning an error.

redis-py 8.2 warns when a sync ``redis.retry.Retry`` reaches an asyncio client (it converts
it and drops a custom ``call_with_retry``): the web service and the asyncio Sentinel path
did that, so `serve` printed a ``UserWarning`` at every start and the suite, whose warnings
are errors, failed. Each case below opens one kind (sync or asyncio; standalone, cluster or
Sentinel; from a URL or from a client the caller made), writes a beat and reads it back on
a real server, inside ``warnings.catch_warnings()`` with every warning an error, whatever
the suite's own filters say.
"""

from __future__ import annotations

import asyncio
import gc
import os
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.cluster
import redis.retry
import redis.sentinel
from clusters import RedisClusterProcesses
from redis.backoff import NoBackoff
from sentinels import SentinelProcesses
from servers import RedisServer
from webservers import ServeProcess

from redis_presence import (
    AsyncRedisPresenceRegistry,
    PresenceConfigError,
    RedisPresenceRegistry,
)
from redis_presence.web.service import WebConfig

T0 = 1_796_000_000_123_456_000

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def sentinels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelProcesses]:
    with SentinelProcesses(tmp_path_factory.mktemp("kinds-sentinel")) as topology:
        yield topology


@pytest.fixture
def flushed(redis_server: RedisServer) -> RedisServer:
    with redis_server.client() as client:
        client.flushall()
    return redis_server


def beat_and_read(registry: RedisPresenceRegistry) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with registry:
            registry.heartbeat("orders", "billing", "w1", 1, now_ns=T0)
            assert [row.key for row in registry.snapshot(now_ns=T0)] == [
                ("orders", "billing", "w1")
            ]
            assert registry.deregister("orders", "billing", "w1")


def beat_and_read_async(
    open_registry: Any, open_client: Any = None, also_close: Sequence[Any] = ()
) -> None:
    """`open_registry` is called inside the event loop (an asyncio client belongs to one),
    with the client `open_client` made there, if any, which is closed after (with the
    clients in `also_close`: a Sentinel's own)."""

    async def main() -> None:
        client = None if open_client is None else open_client()
        registry = open_registry() if client is None else open_registry(client)
        async with registry:
            await registry.heartbeat("orders", "billing", "w1", 1, now_ns=T0)
            rows = await registry.snapshot(now_ns=T0)
            assert [row.key for row in rows] == [("orders", "billing", "w1")]
            assert await registry.deregister("orders", "billing", "w1")
        if client is not None:  # the caller's client: the registry leaves it open
            await client.aclose()
        for other in also_close:
            await other.aclose()

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        asyncio.run(main())
    gc.collect()  # a connection left open fails this test, not a later one


# --- standalone -----------------------------------------------------------------------------


def test_sync_from_url(flushed: RedisServer) -> None:
    beat_and_read(RedisPresenceRegistry.from_url(flushed.url))


def test_sync_from_a_client(flushed: RedisServer) -> None:
    with redis.Redis(host=flushed.host, port=flushed.port) as client:
        beat_and_read(RedisPresenceRegistry(client))


def test_asyncio_from_url(flushed: RedisServer) -> None:
    beat_and_read_async(lambda: AsyncRedisPresenceRegistry.from_url(flushed.url))


def test_asyncio_from_url_with_an_asyncio_retry(flushed: RedisServer) -> None:
    retry = redis.asyncio.retry.Retry(NoBackoff(), 1)
    beat_and_read_async(lambda: AsyncRedisPresenceRegistry.from_url(flushed.url, retry=retry))


def test_asyncio_from_a_client(flushed: RedisServer) -> None:
    beat_and_read_async(
        AsyncRedisPresenceRegistry,
        lambda: redis.asyncio.Redis(host=flushed.host, port=flushed.port),
    )


def test_the_web_services_registry(flushed: RedisServer) -> None:
    """`serve`'s own registry (before: a sync Retry, converted with a UserWarning)."""
    beat_and_read_async(lambda: WebConfig(url=flushed.url).open_registry())


def test_a_retry_of_the_other_flavour_is_refused_naming_retry(flushed: RedisServer) -> None:
    """A sync policy would block an asyncio client's loop between attempts (redis-py 8.2
    converts it with a warning); an asyncio one cannot run in a sync client."""
    with pytest.raises(PresenceConfigError, match=r"^retry must be a redis\.asyncio\.retry"):
        AsyncRedisPresenceRegistry.from_url(flushed.url, retry=redis.retry.Retry(NoBackoff(), 0))
    with pytest.raises(
        PresenceConfigError, match=r"^retry must be a redis\.retry\.Retry for a sync"
    ):
        RedisPresenceRegistry.from_url(flushed.url, retry=redis.asyncio.retry.Retry(NoBackoff(), 0))


def test_serve_starts_and_reads_without_a_warning(flushed: RedisServer) -> None:
    """A real `serve` process: a page and an API read reach Redis, and its stderr carries
    no warning (Python shows a UserWarning by default; before: one at every start)."""
    env = {name: value for name, value in os.environ.items() if name != "PYTHONWARNINGS"}
    env["PYTHONWARNINGS"] = "default"
    with redis.Redis(host=flushed.host, port=flushed.port) as client:
        RedisPresenceRegistry(client).heartbeat("orders", "billing", "w1", 1)
    with ServeProcess(flushed.url, env=env) as serve, serve.client() as http:
        assert http.get("/api/v1/groups").status_code == 200
        assert http.get("/").status_code == 200
        log = "".join(serve.lines(stderr=True))
    assert "Warning" not in log, log


# --- cluster --------------------------------------------------------------------------------


def test_cluster_sync_from_url(redis_cluster: RedisClusterProcesses) -> None:
    redis_cluster.flushall()
    url = "redis+cluster://" + ",".join(f"{h}:{p}" for h, p in redis_cluster.startup_nodes)
    beat_and_read(RedisPresenceRegistry.from_url(url))


def test_cluster_sync_from_a_client(redis_cluster: RedisClusterProcesses) -> None:
    redis_cluster.flushall()
    client = redis_cluster.client()
    beat_and_read(RedisPresenceRegistry(client))
    client.close()


def test_cluster_asyncio_from_url(redis_cluster: RedisClusterProcesses) -> None:
    redis_cluster.flushall()
    url = "redis+cluster://" + ",".join(f"{h}:{p}" for h, p in redis_cluster.startup_nodes)
    beat_and_read_async(lambda: AsyncRedisPresenceRegistry.from_url(url))


def test_cluster_asyncio_from_a_client(redis_cluster: RedisClusterProcesses) -> None:
    redis_cluster.flushall()
    beat_and_read_async(AsyncRedisPresenceRegistry, redis_cluster.async_client)


# --- Sentinel -------------------------------------------------------------------------------


def test_sentinel_sync_from_url(sentinels: SentinelProcesses) -> None:
    beat_and_read(RedisPresenceRegistry.from_url(sentinels.url()))


def test_sentinel_sync_from_a_client(sentinels: SentinelProcesses) -> None:
    sentinel = redis.sentinel.Sentinel(sentinels.nodes, socket_timeout=5)
    with sentinel.master_for(sentinels.service) as client:
        beat_and_read(RedisPresenceRegistry(client))


def test_sentinel_asyncio_from_url(sentinels: SentinelProcesses) -> None:
    beat_and_read_async(lambda: AsyncRedisPresenceRegistry.from_url(sentinels.url()))


def test_sentinel_asyncio_from_a_client(sentinels: SentinelProcesses) -> None:
    asked: list[redis.asyncio.Redis] = []

    def primary() -> Any:
        sentinel = redis.asyncio.sentinel.Sentinel(sentinels.nodes, socket_timeout=5)
        asked.extend(sentinel.sentinels)
        return sentinel.master_for(sentinels.service)

    beat_and_read_async(AsyncRedisPresenceRegistry, primary, also_close=asked)

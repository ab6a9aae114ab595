"""The backend matrix: every registry the contract suite runs against, declared once.

A new backend gets the whole contract suite by adding one `pytest.param` to
`BACKENDS` and one branch to `make_registry`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio
import redis.cluster
from aio_adapter import SyncAdapter

from redis_presence import (
    AsyncRedisPresenceRegistry,
    ConsumerPresenceRegistry,
    RedisPresenceRegistry,
)
from redis_presence.contract import PresenceRegistry
from redis_presence.plans import Limits

BACKENDS = [
    pytest.param("memory", id="memory"),
    pytest.param("fakeredis", id="fakeredis"),
    pytest.param("redis", id="redis-server", marks=pytest.mark.redis_server),
    pytest.param("cluster", id="cluster", marks=pytest.mark.redis_server),
    pytest.param("async", id="async", marks=pytest.mark.redis_server),
    pytest.param("async-cluster", id="async-cluster", marks=pytest.mark.redis_server),
    # The version matrix: Debian's redis-server above is Redis 7.0; these binaries come
    # from pinned packages of the `test` extra (see pyproject.toml).
    pytest.param("redis-8", id="redis-8", marks=pytest.mark.redis_server),
    pytest.param("valkey-9", id="valkey-9", marks=pytest.mark.redis_server),
]
MATRIX_FIXTURES = {"redis-8": "redis8", "valkey-9": "valkey9"}
"""Backend -> the prefix of its ``<prefix>_server`` / ``<prefix>_client`` fixtures."""
REDIS_BACKENDS = [p for p in BACKENDS if p.values[0] != "memory"]

SMALL = Limits(*[2] * len(Limits._fields))
"""Bounds so small that every read and prune crosses its page boundaries."""
SMALL_BACKENDS = [
    pytest.param("fakeredis-small", id="fakeredis-small"),
    pytest.param("redis-small", id="redis-small", marks=pytest.mark.redis_server),
    pytest.param("cluster-small", id="cluster-small", marks=pytest.mark.redis_server),
]
"""The same stores, read and pruned through registries with `SMALL` limits; the real
server's hashes and sorted sets are hash tables and skip lists there, so HSCAN takes
several steps (`small_redis_server`)."""


def make_registry(
    request: pytest.FixtureRequest, backend: str, prefix: str = "presence", **options: Any
) -> Any:
    """A registry of `backend` on an empty store; a second call shares the same store.
    `options` go to the registry's constructor (``max_future_ms``, ``limits``, ...).

    Every synchronous registry must offer the `PresenceRegistry` methods (checked here);
    the async ones run through `SyncAdapter`, which forwards by `__getattr__`.
    """
    registry = _make_registry(request, backend, prefix, options)
    assert isinstance(registry, SyncAdapter | PresenceRegistry), f"{backend}: {registry!r}"
    return registry


def _make_registry(
    request: pytest.FixtureRequest, backend: str, prefix: str, options: dict[str, Any]
) -> Any:
    if backend.endswith("-small"):
        fixture = {
            "fakeredis-small": "fake_client",
            "redis-small": "small_redis_client",
            "cluster-small": "cluster_client",
        }[backend]
        options = {"limits": SMALL, **options}
        return RedisPresenceRegistry(request.getfixturevalue(fixture), prefix=prefix, **options)
    if backend == "memory":
        options.pop("limits", None)  # the model does no bounded work
        return ConsumerPresenceRegistry(**options)
    if backend in ("fakeredis", "redis", "cluster"):
        fixture = {"fakeredis": "fake_client", "redis": "redis_client"}.get(
            backend, "cluster_client"
        )
        return RedisPresenceRegistry(request.getfixturevalue(fixture), prefix=prefix, **options)
    if backend in MATRIX_FIXTURES:
        return RedisPresenceRegistry(raw_client(request, backend), prefix=prefix, **options)
    if backend == "async":
        server = request.getfixturevalue("redis_server")
        host, port = server.host, server.port
        return _async(
            request, backend, lambda: redis.asyncio.Redis(host=host, port=port), prefix, options
        )
    if backend == "async-cluster":
        make_client = request.getfixturevalue("redis_cluster").async_client
        return _async(request, backend, make_client, prefix, options)
    raise ValueError(f"unknown backend {backend!r}")


def _async(
    request: pytest.FixtureRequest,
    backend: str,
    make_client: Callable[[], Any],
    prefix: str,
    options: dict[str, Any],
) -> SyncAdapter:
    """The async registry on a fresh asyncio client, driven from sync tests."""
    raw_client(request, backend)  # the fixture flushes the store
    adapter = SyncAdapter(
        lambda: AsyncRedisPresenceRegistry(make_client(), prefix=prefix, **options)
    )
    request.addfinalizer(adapter.close)
    return adapter


def second_client(request: pytest.FixtureRequest, backend: str) -> Any:
    backend = backend.removesuffix("-small")
    """Another connection to the same store (a second broker process)."""
    if backend == "fakeredis":
        fake = request.getfixturevalue("fake_client")
        import fakeredis

        return fakeredis.FakeRedis(server=fake.connection_pool.connection_kwargs["server"])
    if backend in ("redis", "async"):
        client = request.getfixturevalue("redis_server").client()
        request.addfinalizer(client.close)
        return client
    if backend in ("cluster", "async-cluster"):
        client = request.getfixturevalue("redis_cluster").client()
        request.addfinalizer(client.close)
        return client
    if backend in MATRIX_FIXTURES:
        client = request.getfixturevalue(f"{MATRIX_FIXTURES[backend]}_server").client()
        request.addfinalizer(client.close)
        return client
    raise ValueError(f"backend {backend!r} has no second connection")


def raw_client(request: pytest.FixtureRequest, backend: str) -> Any:
    """The backend's own Redis client, to inspect stored keys (Redis backends only)."""
    if backend == "redis-small":
        return request.getfixturevalue("small_redis_client")
    backend = backend.removesuffix("-small")
    if backend == "fakeredis":
        return request.getfixturevalue("fake_client")
    if backend in ("redis", "async"):
        return request.getfixturevalue("redis_client")
    if backend in ("cluster", "async-cluster"):
        return request.getfixturevalue("cluster_client")
    if backend in MATRIX_FIXTURES:
        return request.getfixturevalue(f"{MATRIX_FIXTURES[backend]}_client")
    raise ValueError(f"backend {backend!r} has no Redis client")


def without_logs(keys: Any) -> list[bytes]:
    """The keys that are not event logs (``P:{Q}:events``), their index (``P:events``), the
    epoch marker (``P:{P:events}:epoch``) nor the prefix's protocol version (``P:protocol``):
    a queue's log outlives its last consumer (readers of `changes` must still see who left)
    and expires a day after its last event; the marker stays (readers tell data loss by it),
    and the version stays as long as the prefix is used."""
    ends = (":events", "events}:epoch", ":protocol")
    return sorted(k for k in keys if not (k.decode() if isinstance(k, bytes) else k).endswith(ends))


def all_keys(client: Any) -> list[Any]:
    """Every key of the store: a cluster client's ``KEYS`` asks one node unless told to ask
    every primary."""
    if isinstance(client, redis.cluster.RedisCluster):
        return list(client.keys("*", target_nodes=redis.cluster.RedisCluster.PRIMARIES))
    return list(client.keys("*"))


def dump(client: Any) -> dict[bytes, Any]:
    """Every key with its type, content and whether it expires: equal dumps prove a store
    unchanged (keys of any type, including foreign ones a test planted), on every primary
    of a cluster."""
    out: dict[bytes, Any] = {}
    for key in sorted(all_keys(client)):
        kind = client.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        if kind == "zset":
            value: Any = client.zrange(key, 0, -1, withscores=True)
        elif kind == "hash":
            value = sorted(client.hgetall(key).items())
        elif kind == "set":
            value = sorted(client.smembers(key))
        elif kind == "list":
            value = client.lrange(key, 0, -1)
        elif kind == "stream":
            value = client.xrange(key)
        else:
            value = client.get(key)
        out[key] = (kind, value, client.pttl(key) > 0)
    return out

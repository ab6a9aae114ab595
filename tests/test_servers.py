"""The test fixtures themselves: real servers start, persist, die, speak TLS, cluster, replicate."""

from __future__ import annotations

import asyncio
import socket
import ssl
from pathlib import Path

import pytest
import redis
import redis.cluster
import servers
from binaries import REQUIRE_SERVERS_ENV, need_binary
from clusters import RedisClusterProcesses
from redis.backoff import NoBackoff
from redis.retry import Retry
from servers import MakeRedisServer, free_port
from tls_files import TlsFiles, make_ca


def no_retry() -> Retry:
    """redis-py 8 retries a failed connection 10 times with backoff; these tests want the error."""
    return Retry(NoBackoff(), 0)


def test_need_binary_skips_locally_and_fails_when_servers_are_required(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    missing = "redis-presence-no-such-binary"
    monkeypatch.delenv(REQUIRE_SERVERS_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception):
        need_binary(missing)
    monkeypatch.setenv(REQUIRE_SERVERS_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match=REQUIRE_SERVERS_ENV):
        need_binary(missing)


def test_free_port_is_bindable_and_never_repeated() -> None:
    ports = [free_port() for _ in range(5)]
    assert len(set(ports)) == len(ports)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", ports[0]))


def test_a_port_another_server_took_is_never_mistaken_for_ours(
    make_redis_server: MakeRedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As when another pytest-xdist worker's server binds the port between `free_port` and
    this server: its PING answers, but the start tries another port for this server."""
    other = make_redis_server()
    picks = iter([other.port])
    monkeypatch.setattr(servers, "free_port", lambda: next(picks, None) or free_port())
    server = servers.RedisServer(dir=tmp_path / "late")
    assert server.port == other.port
    with server:
        assert server.port != other.port
        assert server.pid is not None
        assert servers.listens_on(server.pid, server.port)
        assert servers.listens_on(server.pid, other.port) is False
    fixed = servers.RedisServer(dir=tmp_path / "fixed", port=other.port)
    with pytest.raises(servers.ServerError, match=f"port {other.port} is another process's"):
        fixed.start()
    assert not fixed.is_running


def test_standalone_server_answers(redis_client: redis.Redis, redis_url: str) -> None:
    assert redis_client.ping()
    redis_client.set("k", "v")
    with redis.Redis.from_url(redis_url) as other:
        assert other.get("k") == b"v"


def test_redis_client_starts_flushed(redis_client: redis.Redis) -> None:
    assert redis_client.dbsize() == 0
    redis_client.set("left-behind", "1")  # the next test's flush removes it


def test_restart_keeps_aof_data(make_redis_server: MakeRedisServer) -> None:
    server = make_redis_server(appendonly=True)
    port = server.port
    with server.client() as client:
        # Every write is on disk before it is acknowledged: then even a SIGKILL loses nothing.
        client.config_set("appendfsync", "always")
        client.set("graceful", "1")
    server.restart()
    with server.client() as client:
        assert client.get("graceful") == b"1"
        client.config_set("appendfsync", "always")
        client.set("crash", "2")
    server.kill()
    assert not server.is_running
    server.restart()
    assert server.port == port
    with server.client() as client:
        assert client.mget("graceful", "crash") == [b"1", b"2"]


def test_killed_server_refuses_connections(make_redis_server: MakeRedisServer) -> None:
    server = make_redis_server()
    with server.client(retry=no_retry()) as client:
        assert client.ping()
        server.kill()
        assert not server.is_running
        with pytest.raises(redis.ConnectionError):
            client.ping()


def test_requirepass_url_and_client(make_redis_server: MakeRedisServer) -> None:
    server = make_redis_server(requirepass="s3cret/:@")
    with server.client() as client:
        assert client.ping()
    with redis.Redis.from_url(server.url) as client:
        assert client.ping()
    anonymous = server.client(password=None, retry=no_retry())
    with anonymous, pytest.raises(redis.AuthenticationError):
        anonymous.set("k", "v")


def test_tls_server_needs_the_right_ca(
    make_redis_server: MakeRedisServer, tls_files: TlsFiles, tmp_path: Path
) -> None:
    server = make_redis_server(tls=tls_files)
    assert server.url.startswith("rediss://")
    # The strict X.509 checks are Python 3.13's default; our certificates must pass them.
    strict = [ssl.VERIFY_X509_STRICT]
    with server.client(ssl_include_verify_flags=strict) as client:
        assert client.ping()
    with redis.Redis.from_url(server.url) as client:
        assert client.ping()
    wrong_ca, _ = make_ca(tmp_path / "other-ca")
    distrusting = server.client(ssl_ca_certs=str(wrong_ca), retry=no_retry())
    with distrusting, pytest.raises(redis.ConnectionError, match="certificate verify failed"):
        distrusting.ping()
    plaintext = server.client(ssl=False, retry=no_retry(), socket_timeout=2)
    with plaintext, pytest.raises(redis.ConnectionError):
        plaintext.ping()


def test_tls_server_can_require_client_certificates(
    make_redis_server: MakeRedisServer, tls_files: TlsFiles
) -> None:
    server = make_redis_server(tls=tls_files, tls_auth_clients=True)
    assert "ssl_certfile=" in server.url
    assert "ssl_keyfile=" in server.url
    strict = [ssl.VERIFY_X509_STRICT]
    with server.client(ssl_include_verify_flags=strict) as client:
        assert client.ping()
    with redis.Redis.from_url(server.url) as client:
        assert client.ping()
    anonymous = server.client(ssl_certfile=None, ssl_keyfile=None, retry=no_retry())
    with anonymous, pytest.raises(redis.ConnectionError):
        anonymous.ping()


@pytest.mark.slow
def test_replica_syncs_from_its_primary(make_redis_server: MakeRedisServer) -> None:
    primary = make_redis_server()
    replica = make_redis_server(replicaof=primary)
    replica.wait_replica_synced()
    with primary.client() as client:
        client.set("k", "v")
    primary.wait_for_replicas(1)
    with replica.client() as client:
        assert client.get("k") == b"v"
        with pytest.raises(redis.ReadOnlyError):
            client.set("k", "w")


@pytest.mark.slow
def test_cluster_is_ok_and_round_trips(
    redis_cluster: RedisClusterProcesses, cluster_client: redis.cluster.RedisCluster
) -> None:
    for node in redis_cluster.nodes:
        with node.client() as client:
            info = client.cluster("INFO")
        assert info["cluster_state"] == "ok"
        assert int(info["cluster_slots_assigned"]) == 16384
    keys = [f"key-{i}" for i in range(30)]  # spread over every node's slots
    for key in keys:
        cluster_client.set(key, key)
    assert [cluster_client.get(key) for key in keys] == [key.encode() for key in keys]
    per_node = []
    for node in redis_cluster.nodes:
        with node.client() as client:
            per_node.append(client.dbsize())
    assert sum(per_node) == len(keys)
    assert all(per_node), per_node  # every primary owns some of them


async def _cluster_async_round_trip(cluster: RedisClusterProcesses) -> object:
    client = cluster.async_client()
    try:
        await client.set("async-key", "1")
        return await client.get("async-key")
    finally:
        await client.aclose()


@pytest.mark.slow
def test_cluster_async_client(
    redis_cluster: RedisClusterProcesses, cluster_client: redis.cluster.RedisCluster
) -> None:
    assert asyncio.run(_cluster_async_round_trip(redis_cluster)) == b"1"
    assert cluster_client.get("async-key") == b"1"


def test_fake_client_is_isolated(fake_client: redis.Redis) -> None:
    assert fake_client.dbsize() == 0
    fake_client.set("k", "v")
    assert fake_client.eval("return redis.call('GET', KEYS[1])", 1, "k") == b"v"

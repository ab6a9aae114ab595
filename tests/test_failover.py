"""Failover: a replica serves snapshot and counts read-only, then takes writes once promoted."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import redis
from servers import MakeRedisServer, RedisServer
from waiting import wait_until

from redis_presence import (
    PresenceConnectionError,
    PresenceError,
    PresenceReadOnlyError,
    PresenceState,
    RedisPresenceRegistry,
)

MS = 1_000_000
T0 = 1_796_000_000_123_456_000
TTL = 30_000

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def pair(make_redis_server: MakeRedisServer) -> tuple[RedisServer, RedisServer]:
    """A primary and a synced replica of it."""
    primary = make_redis_server()
    replica = make_redis_server(replicaof=primary)
    replica.wait_replica_synced()
    return primary, replica


@pytest.fixture
def clients(pair: tuple[RedisServer, RedisServer]) -> Iterator[tuple[redis.Redis, redis.Redis]]:
    primary, replica = pair
    with primary.client() as p, replica.client() as r:
        yield p, r


def seed(writer: RedisPresenceRegistry) -> None:
    writer.heartbeat("orders", "billing", "active", 3, now_ns=T0)
    writer.heartbeat("orders", "billing", "stale", 1, now_ns=T0 - 45_000 * MS)
    writer.heartbeat("orders", "audit", "expired", 0, now_ns=T0 - 90_000 * MS)
    writer.heartbeat("mail", "send", "a{b}:c", 2**32 - 1, now_ns=T0 - 7)


def test_replica_serves_reads_through_a_read_only_registry(
    pair: tuple[RedisServer, RedisServer], clients: tuple[redis.Redis, redis.Redis]
) -> None:
    primary = pair[0]
    writer = RedisPresenceRegistry(clients[0])
    seed(writer)
    primary.wait_for_replicas(1)
    reader = RedisPresenceRegistry(clients[1], read_only=True)
    assert reader.read_only is True
    clients[1].config_resetstat()
    for now in (T0, T0 + 20_000 * MS, T0 + 70_000 * MS):
        assert reader.snapshot(now_ns=now, ttl_ms=TTL) == writer.snapshot(now_ns=now, ttl_ms=TTL)
        assert reader.count_active_by_group(now_ns=now) == writer.count_active_by_group(now_ns=now)
    # Reads are plain read commands: the replica runs no script and loads none.
    stats = clients[1].info("commandstats")
    assert not {"cmdstat_evalsha", "cmdstat_evalsha_ro", "cmdstat_script|load"} & set(stats)
    assert len(reader) == len(writer) == 4
    states = {row.consumer: row.state for row in reader.snapshot(now_ns=T0)}
    assert states == {
        "active": PresenceState.ACTIVE,
        "stale": PresenceState.STALE,
        "expired": PresenceState.EXPIRED,
        "a{b}:c": PresenceState.ACTIVE,
    }
    # Server clock (now_ns=None) on the replica: ages are measured by the replica's TIME.
    assert {row.consumer for row in reader.snapshot()} == set(states)

    # Later writes on the primary reach the reader.
    writer.heartbeat("orders", "billing", "late", now_ns=T0 + MS)
    primary.wait_for_replicas(1)
    assert reader.count_active_by_group(now_ns=T0 + MS)[("orders", "billing")] == 2

    # SCRIPT FLUSH on the replica: the read-only path reloads on its next call.
    clients[1].script_flush()
    assert len(reader.snapshot(now_ns=T0)) == 5
    clients[1].script_flush()
    assert reader.count_active_by_group(now_ns=T0 + MS)[("orders", "billing")] == 2


def test_read_only_registry_refuses_every_write_before_sending_it(
    pair: tuple[RedisServer, RedisServer], clients: tuple[redis.Redis, redis.Redis]
) -> None:
    primary, _ = pair
    seed(RedisPresenceRegistry(clients[0]))
    primary.wait_for_replicas(1)
    for client in clients:  # on the replica, and even pointed at the primary
        reader = RedisPresenceRegistry(client, read_only=True)
        before = reader.snapshot(now_ns=T0)
        writes: dict[str, Callable[[RedisPresenceRegistry], object]] = {
            "heartbeat": lambda r: r.heartbeat("orders", "billing", "new", now_ns=T0),
            "heartbeat_many": lambda r: r.heartbeat_many([("q", "g", "c", 0)]),
            "prune_expired": lambda r: r.prune_expired(now_ns=T0 + 10**15),
            "deregister": lambda r: r.deregister("orders", "billing", "active"),
        }
        for name, write in writes.items():
            with pytest.raises(PresenceReadOnlyError, match=f"{name} .*read-only") as info:
                write(reader)
            assert isinstance(info.value, PresenceError)
        assert reader.snapshot(now_ns=T0) == before
    with pytest.raises(TypeError, match="read_only"):
        RedisPresenceRegistry(clients[1], read_only="yes")  # type: ignore[arg-type]


def test_writes_sent_to_a_replica_are_read_only_errors(
    pair: tuple[RedisServer, RedisServer], clients: tuple[redis.Redis, redis.Redis]
) -> None:
    """A normal registry pointed at a replica by mistake gets the same typed error."""
    primary, _ = pair
    seed(RedisPresenceRegistry(clients[0]))
    primary.wait_for_replicas(1)
    wrong = RedisPresenceRegistry(clients[1])
    with pytest.raises(PresenceReadOnlyError, match="read-only replica"):
        wrong.heartbeat("orders", "billing", "active", now_ns=T0)
    with pytest.raises(PresenceReadOnlyError, match="read-only replica"):
        wrong.deregister("orders", "billing", "active")
    assert len(RedisPresenceRegistry(clients[1], read_only=True)) == 4


def test_promoted_replica_takes_writes(
    pair: tuple[RedisServer, RedisServer], clients: tuple[redis.Redis, redis.Redis]
) -> None:
    primary, replica = pair
    writer = RedisPresenceRegistry(clients[0])
    seed(writer)
    primary.wait_for_replicas(1)
    before = writer.snapshot(now_ns=T0)

    primary.kill()  # the primary dies; the operator promotes the replica
    assert clients[1].replicaof("NO", "ONE")
    assert clients[1].info("replication")["role"] == "master"

    promoted = RedisPresenceRegistry.from_url(replica.url)
    try:
        assert promoted.snapshot(now_ns=T0) == before  # every acknowledged row carried over
        promoted.heartbeat("orders", "billing", "active", 4, now_ns=T0 + 5 * MS)
        promoted.heartbeat("orders", "billing", "after-failover", now_ns=T0 + 5 * MS)
        rows = {row.consumer: row for row in promoted.snapshot(now_ns=T0 + 5 * MS)}
        assert rows["active"].registered_at_ns == T0  # registration survives the failover
        assert rows["active"].lease_count == 4
        assert rows["after-failover"].state is PresenceState.ACTIVE
        assert promoted.prune_expired(now_ns=T0 + 5 * MS) == 1
        assert promoted.deregister("orders", "billing", "stale") is True
        assert promoted.count_active_by_group(now_ns=T0 + 5 * MS) == {
            ("orders", "billing"): 2,
            ("mail", "send"): 1,
        }
        assert len(promoted) == 3
    finally:
        promoted.close()


def test_replica_that_refuses_stale_reads_is_a_connection_error_until_promoted(
    make_redis_server: MakeRedisServer,
) -> None:
    primary = make_redis_server()
    # Made a replica only once it answers PING: until its first sync it would answer MASTERDOWN.
    replica = make_redis_server(extra_args=["--replica-serve-stale-data", "no"])
    with replica.client() as r:
        r.replicaof(primary.host, primary.port)
    replica.wait_replica_synced()
    with primary.client() as p, replica.client() as r:
        seed(RedisPresenceRegistry(p))
        primary.wait_for_replicas(1)
        reader = RedisPresenceRegistry(r, read_only=True)
        assert len(reader.snapshot(now_ns=T0)) == 4
        primary.kill()

        def link_down() -> bool:
            return bool(r.info("replication")["master_link_status"] == "down")

        wait_until(link_down, timeout_s=10, what="the replica to notice its primary died")
        with pytest.raises(PresenceConnectionError, match="MASTER"):
            reader.snapshot(now_ns=T0)
        with pytest.raises(PresenceConnectionError, match="MASTER"):
            reader.count_active_by_group(now_ns=T0)
        r.replicaof("NO", "ONE")
        assert len(reader.snapshot(now_ns=T0)) == 4
        RedisPresenceRegistry(r).heartbeat("orders", "billing", "new", now_ns=T0)
        assert len(reader) == 5

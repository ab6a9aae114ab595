"""Redis Sentinel: ``redis+sentinel://`` URLs, credentials, and writes that follow a failover.

Real processes only: a primary, a replica and three ``redis-sentinel`` processes (Debian's
``redis-sentinel`` package), with passwords on the data nodes and on the sentinels.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from conftest import RUN_SUMMARY
from failover import Broker, Probe
from redis.backoff import NoBackoff
from redis.retry import Retry
from sentinels import SentinelProcesses
from servers import free_port
from waiting import wait_until

from redis_presence import (
    AsyncRedisPresenceRegistry,
    ConsumerPresence,
    PresenceAuthError,
    PresenceConnectionError,
    PresenceState,
    RedisPresenceRegistry,
)
from redis_presence.cli import cli
from redis_presence.keys import Keyspace

DATA_PASSWORD = "data-s3cret:/@?"
SENTINEL_PASSWORD = "sentinel-s3cret#&="
T0 = 1_796_000_000_123_456_000
FAST: dict[str, Any] = {"retry": Retry(NoBackoff(), 0), "socket_timeout": 2}

SPACE = Keyspace("presence")
BILLING = SPACE.group("orders", "billing")

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def sentinels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelProcesses]:
    """One Sentinel deployment, with passwords, for the tests that do not fail it over."""
    topology = SentinelProcesses(
        tmp_path_factory.mktemp("sentinel"),
        requirepass=DATA_PASSWORD,
        sentinel_password=SENTINEL_PASSWORD,
    )
    with topology:
        yield topology


@pytest.fixture
def store(sentinels: SentinelProcesses) -> Iterator[redis.Redis]:
    """A client of the current primary, flushed first."""
    with sentinels.node_at(sentinels.primary_address()).client() as client:
        client.flushall()
        yield client


def leaked(text: str) -> bool:
    return any(
        secret in text
        for secret in (DATA_PASSWORD, SENTINEL_PASSWORD, "data-s3cret", "sentinel-s3cret")
    )


# --- URLs and credentials ------------------------------------------------------------------


def test_a_sentinel_url_writes_to_the_primary_and_reads_back(
    sentinels: SentinelProcesses, store: redis.Redis
) -> None:
    with RedisPresenceRegistry.from_url(sentinels.url()) as registry:
        registry.heartbeat("orders", "billing", "w1", 2, now_ns=T0)
        assert [row.key for row in registry.snapshot(now_ns=T0)] == [("orders", "billing", "w1")]
        assert registry.count_active_by_group(now_ns=T0) == {("orders", "billing"): 1}
        assert not registry.clustered
    assert store.hgetall(BILLING.data)  # on the primary itself
    replica = sentinels.data_nodes[1]
    sentinels.primary.wait_for_replicas(1)
    with replica.client() as client:
        assert client.exists(BILLING.data)


def test_the_database_in_a_sentinel_url_is_used(
    sentinels: SentinelProcesses, store: redis.Redis
) -> None:
    with RedisPresenceRegistry.from_url(sentinels.url(db=3)) as registry:
        registry.heartbeat("orders", "billing", "w1", now_ns=T0)
    assert store.dbsize() == 0
    store.select(3)
    stored: list[bytes] = store.keys("*")  # type: ignore[assignment]
    assert {key.decode() for key in stored} == {
        SPACE.groups,
        SPACE.events,
        SPACE.epoch,
        SPACE.protocol,
        SPACE.newest,
        SPACE.oldest,
        BILLING.hb,
        BILLING.data,
        BILLING.events,
    }


def test_the_async_registry_takes_a_sentinel_url(
    sentinels: SentinelProcesses, store: redis.Redis
) -> None:
    async def main() -> list[tuple[str, str, str]]:
        async with AsyncRedisPresenceRegistry.from_url(sentinels.url()) as registry:
            await registry.heartbeat("orders", "billing", "w1", now_ns=T0)
            assert await registry.size() == 1
            return [row.key for row in await registry.snapshot(now_ns=T0)]

    assert asyncio.run(main()) == [("orders", "billing", "w1")]
    assert store.exists(SPACE.groups)


def test_the_cli_takes_a_sentinel_url(sentinels: SentinelProcesses, store: redis.Redis) -> None:
    runner = CliRunner(env={"REDIS_PRESENCE_URL": sentinels.url()})
    beat = runner.invoke(cli, ["heartbeat", "orders", "billing", "w1"])
    assert beat.exit_code == 0, beat.output
    listed = runner.invoke(cli, ["ls", "--format", "json"])
    assert listed.exit_code == 0, listed.output
    assert [row["consumer"] for row in json.loads(listed.stdout)] == ["w1"]
    assert not leaked(beat.output + listed.output)


def test_sentinel_credentials_may_come_as_keyword_arguments(
    sentinels: SentinelProcesses, store: redis.Redis
) -> None:
    hosts = ",".join(f"{h}:{p}" for h, p in sentinels.nodes)
    url = f"redis+sentinel://{hosts}/{sentinels.service}"
    with RedisPresenceRegistry.from_url(
        url, password=DATA_PASSWORD, sentinel_password=SENTINEL_PASSWORD
    ) as registry:
        registry.heartbeat("orders", "billing", "w1", now_ns=T0)
        assert len(registry) == 1


def test_wrong_credentials_are_refused_without_showing_them(
    sentinels: SentinelProcesses, store: redis.Redis
) -> None:
    good = sentinels.url()
    cases = {
        "wrong sentinel password": (
            good.replace("sentinel-s3cret%23%26%3D", "sentinel-s3cretWRONG"),
            PresenceAuthError,
            4,
            r"a sentinel refused the credentials \(sentinel_username, sentinel_password\)",
        ),
        "wrong data password": (
            good.replace("data-s3cret", "data-s3cretWRONG"),
            PresenceAuthError,
            4,
            r"\(WRONGPASS\)|invalid username-password pair",
        ),
        "unknown service": (
            good.replace("/mymaster", "/nosuch"),
            PresenceConnectionError,
            3,
            r"no sentinel names a primary for 'nosuch' \(127.0.0.1:\d+: answers, but",
        ),
    }
    for name, (url, error, code, text) in cases.items():
        with pytest.raises(error, match=text) as info, RedisPresenceRegistry.from_url(url) as r:
            r.heartbeat("orders", "billing", "w1", now_ns=T0)
        assert not leaked(str(info.value)), name
        result = CliRunner().invoke(cli, ["--url", url, "ls"])
        assert result.exit_code == code, (name, result.output)
        assert not leaked(result.output), (name, result.output)
        assert len(result.output.strip().splitlines()) == 1, result.output
    assert store.dbsize() == 0


def test_a_sentinel_url_connects_while_any_sentinel_answers(
    sentinels: SentinelProcesses, store: redis.Redis
) -> None:
    """Two of the three sentinels named are not listening: the third is asked."""
    dead = [f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"]
    host, port = sentinels.nodes[2]
    url = sentinels.url().replace(
        ",".join(f"{h}:{p}" for h, p in sentinels.nodes), ",".join([*dead, f"{host}:{port}"])
    )
    with RedisPresenceRegistry.from_url(url, **FAST) as registry:
        registry.heartbeat("orders", "billing", "w1", now_ns=T0)
        assert len(registry) == 1


def test_closing_a_sentinel_registry_closes_the_sentinel_connections(
    sentinels: SentinelProcesses, store: redis.Redis
) -> None:
    registry = RedisPresenceRegistry.from_url(sentinels.url())
    registry.heartbeat("orders", "billing", "w1", now_ns=T0)
    manager = registry.client.connection_pool.sentinel_manager
    assert any(s.connection_pool._created_connections for s in manager.sentinels)
    registry.close()
    for sentinel in manager.sentinels:
        assert all(c._sock is None for c in sentinel.connection_pool._available_connections)


# --- failover -------------------------------------------------------------------------------


def rows_of(node: Any) -> list[ConsumerPresence]:
    """What the node itself holds (not through Sentinel), at its own clock, TTL 3 s.

    Only ever polled: while Sentinel reconfigures the node it closes every client
    connection, so a read that meets a reset counts as "nothing there yet".
    """
    try:
        with node.client() as client:
            return RedisPresenceRegistry(client).snapshot(ttl_ms=TTL_MS)
    except PresenceConnectionError:
        return []


def rows_on(node: Any) -> dict[tuple[str, str, str], PresenceState]:
    """The state of every consumer the node itself holds."""
    return {row.key: row.state for row in rows_of(node)}


TTL_MS = 3000


def server_time_ns(node: Any) -> int:
    """The node's clock (``TIME``) in nanoseconds."""
    with node.client() as client:
        seconds, micros = client.time()
    return (int(seconds) * 1_000_000 + int(micros)) * 1000


@pytest.mark.slow
@pytest.mark.redis_server
def test_writes_follow_a_sentinel_failover_and_a_killed_primary(
    tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    """Brokers beat through reporters while Sentinel fails the primary over (SENTINEL
    FAILOVER), then while the new primary is SIGKILLed: writes resume through each new
    primary, and every consumer whose broker kept beating is active after recovery."""
    with SentinelProcesses(
        tmp_path, requirepass=DATA_PASSWORD, sentinel_password=SENTINEL_PASSWORD
    ) as topology:
        url = topology.url()
        first = topology.primary
        second = topology.data_nodes[1]
        consumers = {
            name: [(f"queue-{q}", "group", f"{name}-c{q}") for q in range(3)]
            for name in ("broker-a", "broker-b", "broker-dead")
        }
        brokers = {name: Broker(url, name, keys) for name, keys in consumers.items()}
        probes = [
            Probe(lambda: RedisPresenceRegistry.from_url(url), "sync").start(),
            Probe(lambda: AsyncRedisPresenceRegistry.from_url(url), "async", True).start(),
        ]
        every = {key for keys in consumers.values() for key in keys}
        probed = set().union(*(p.keys for p in probes))
        alive = every - set(consumers["broker-dead"])
        try:
            wait_until(
                lambda: set(rows_on(first)) >= every,
                timeout_s=10,
                what="every consumer on the primary",
            )
            first.wait_for_replicas(1)
            brokers["broker-dead"].crash()
            crashed_ns = server_time_ns(first)

            # 1. A planned failover: the replica becomes the primary, the old one its replica.
            with topology.sentinel_client() as sentinel:
                failover = time.monotonic()
                assert sentinel.execute_command("SENTINEL", "FAILOVER", topology.service)
            topology.wait_primary((second.host, second.port))
            promoted = time.monotonic() - failover
            wait_until(
                lambda: first.has_role("slave"), timeout_s=30, what="the old primary to be demoted"
            )
            demoted = time.monotonic() - failover
            # Until then, connections open to the old primary kept writing there; its READONLY
            # replies then send them to the new one, and the reporters rewrite every consumer.
            wait_until(
                lambda: (
                    alive | {("probe", "sync", "probe"), ("probe", "async", "probe")}
                    <= set(rows_on(second))
                ),
                timeout_s=30,
                what="every beat on the new primary",
            )
            landed = time.monotonic() - failover
            planned_errors = {p.name: p.failures_after(failover, failover + 30) for p in probes}

            # 2. The new primary crashes: Sentinel promotes the old one back.
            killed_ns = server_time_ns(second)
            second.kill()
            killed = time.monotonic()
            topology.wait_primary((first.host, first.port))
            repromoted = time.monotonic() - killed
            for probe in probes:
                wait_until(
                    functools.partial(probe.wrote_after, killed), timeout_s=30, what="probe writes"
                )

            # A beat sent just before the kill may have reached the last primary by
            # replication, so "active" alone would not show that writes go through it: wait
            # for a beat of every live consumer stamped after the kill.
            def rewritten() -> bool:
                rows = {row.key: row for row in rows_of(first)}
                return all(
                    key in rows and rows[key].state == PresenceState.ACTIVE for key in probed
                ) and all(
                    key in rows
                    and rows[key].state == PresenceState.ACTIVE
                    and rows[key].last_heartbeat_ns > killed_ns
                    for key in alive
                )

            wait_until(
                rewritten, timeout_s=30, what="every beating consumer rewritten on the last primary"
            )
            crash_gap = max(p.gap_after(killed) for p in probes)
            crash_errors = {p.name: p.failures_after(killed, killed + 30) for p in probes}

            # Through Sentinel, as a dashboard reads it: no consumer lost; the beating ones
            # active and written through the last primary; the dead broker's ones not
            # written since it stopped.
            with RedisPresenceRegistry.from_url(url) as reader:
                rows = {row.key: row for row in reader.snapshot(ttl_ms=TTL_MS)}
            assert every <= set(rows)
            for key in alive:
                assert rows[key].state == PresenceState.ACTIVE, rows[key]
                assert rows[key].last_heartbeat_ns > killed_ns, rows[key]
            for key in consumers["broker-dead"]:
                assert rows[key].last_heartbeat_ns <= crashed_ns, rows[key]
        finally:
            for probe in probes:
                probe.close()
            for broker in brokers.values():
                broker.close()
    summary = (
        f"SENTINEL FAILOVER: new primary named after {promoted:.2f} s, old one demoted after "
        f"{demoted:.2f} s (connections open to it wrote there until then), every beat on the "
        f"new primary after {landed:.2f} s, errors seen: {planned_errors}; SIGKILL of the "
        f"primary: replica promoted after {repromoted:.2f} s, writes through again after "
        f"{crash_gap:.2f} s, errors seen meanwhile: {crash_errors}"
    )
    record_property(RUN_SUMMARY, summary)

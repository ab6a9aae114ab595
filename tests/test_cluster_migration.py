"""A slot migration under load (issue 22, item 9): a queue's slot moves from one master to
another (``CLUSTER SETSLOT ... IMPORTING`` / ``MIGRATING``, ``MIGRATE`` of its keys,
``SETSLOT ... NODE``) while a reporter and sync and asyncio probes beat it. While the slot
is on the move every script call of that queue is answered ``TRYAGAIN`` (its keys are
split between the nodes, or some do not exist yet) or ``ASK``; redis-py gives up after
about 0.4 s ("TTL exhausted.", a bare `PresenceError` before the fix). The registries
follow the migration for up to ``cluster_retry_ms``, and only past it raise
`PresenceClusterMigratingError`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.cluster
from binaries import need_binary
from click.testing import CliRunner
from clusters import RedisClusterProcesses
from servers import RedisServer
from waiting import wait_until

from redis_presence import (
    AsyncRedisPresenceRegistry,
    PresenceClusterMigratingError,
    PresenceConnectionError,
    PresenceError,
    PresenceReporter,
    PresenceState,
    RedisPresenceRegistry,
)
from redis_presence.cli import cli
from redis_presence.keys import Keyspace

pytestmark = pytest.mark.timeout(60)

HELD_TRYAGAINS = 48
"""How many TRYAGAIN replies the cluster gives while the test holds a migration half done:
three redis-py calls' worth (each gives up after 16 redirections), so that a client that
does not follow the migration has surely failed by then."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterProcesses]:
    """Three masters of the module's own (their slots move: no other test should see it)."""
    need_binary("redis-server")
    need_binary("redis-cli")
    with RedisClusterProcesses(Path(tmp_path_factory.mktemp("migration"))) as processes:
        yield processes


def cluster_url(cluster: RedisClusterProcesses) -> str:
    return "redis+cluster://" + ",".join(f"{h}:{p}" for h, p in cluster.startup_nodes)


def command(client: redis.Redis, *args: Any) -> Any:
    return client.execute_command(*args)  # type: ignore[no-untyped-call]


class Migration:
    """Moving one queue's slot from its master to another, step by step."""

    def __init__(self, cluster: RedisClusterProcesses, queue: str) -> None:
        self.key = Keyspace("presence").group(queue, "g").hb
        with cluster.client() as client:
            self.slot = int(client.keyslot(self.key))
            owner = client.get_node_from_key(self.key).name
        masters = cluster.masters()
        self.source = next(m for m in masters if f"{m.host}:{m.port}" == owner)
        self.target = next(m for m in masters if m is not self.source)
        self.others = [m for m in masters if m is not self.source and m is not self.target]
        self.clients = {node.port: node.client() for node in masters}
        self.ids = {port: command(c, "CLUSTER MYID") for port, c in self.clients.items()}

    def on(self, node: RedisServer) -> redis.Redis:
        return self.clients[node.port]

    def start(self) -> None:
        source, target = self.on(self.source), self.on(self.target)
        command(target, "CLUSTER SETSLOT", self.slot, "IMPORTING", self.ids[self.source.port])
        command(source, "CLUSTER SETSLOT", self.slot, "MIGRATING", self.ids[self.target.port])

    def keys(self) -> list[bytes]:
        keys = command(self.on(self.source), "CLUSTER GETKEYSINSLOT", self.slot, 1000)
        return list(keys)

    def move_keys(self, count: int | None = None) -> int:
        """MIGRATE `count` of the slot's keys (all by default) to the target."""
        keys = self.keys()[:count]
        if keys:
            target = self.target
            command(
                self.on(self.source),
                "MIGRATE",
                target.host,
                target.port,
                "",
                0,
                5000,
                "KEYS",
                *keys,
            )
        return len(keys)

    def finish(self) -> None:
        target_id = self.ids[self.target.port]
        for node in (self.target, self.source, *self.others):
            command(self.on(node), "CLUSTER SETSLOT", self.slot, "NODE", target_id)

    def tryagains(self) -> int:
        """TRYAGAIN replies given so far by the two nodes."""
        total = 0
        for node in (self.source, self.target):
            stats = self.on(node).info("errorstats")
            total += int(stats.get("errorstat_TRYAGAIN", {}).get("count", 0))
        return total

    def hold(
        self,
        tick: Callable[[], None],
        more: int = HELD_TRYAGAINS,
        timeout_s: float = 10.0,
    ) -> None:
        """Call `tick` every 10 ms (polling, with a deadline) until the nodes have answered
        `more` TRYAGAINs."""
        goal = self.tryagains() + more

        def held() -> bool:
            if self.tryagains() >= goal:
                return True
            tick()
            return False

        wait_until(held, timeout_s=timeout_s, what=f"{more} TRYAGAIN", seen=self.tryagains)

    def close(self) -> None:
        for client in self.clients.values():
            client.close()


def queue_of(tag: str) -> str:
    """A queue name whose slot holds nothing else yet."""
    return f"migrating-{tag}-{time.monotonic_ns()}"


class Probe:
    """Beats one consumer of `queue` as fast as it can until stopped, counting the beats
    and keeping every error."""

    def __init__(self, queue: str) -> None:
        self.queue = queue
        self.beats = 0
        self.errors: list[BaseException] = []
        self.stop = threading.Event()

    def run_sync(self, url: str) -> None:
        with RedisPresenceRegistry.from_url(url) as registry:
            while not self.stop.is_set():
                try:
                    registry.heartbeat(self.queue, "g", "sync-probe")
                    self.beats += 1
                except PresenceError as exc:
                    self.errors.append(exc)

    def run_async(self, url: str) -> None:
        async def main() -> None:
            async with AsyncRedisPresenceRegistry.from_url(url) as registry:
                while not self.stop.is_set():
                    try:
                        await registry.heartbeat(self.queue, "g", "async-probe")
                        self.beats += 1
                    except PresenceError as exc:
                        self.errors.append(exc)

        asyncio.run(main())


def test_a_queue_whose_slot_migrates_under_a_reporter_loses_nothing(
    cluster: RedisClusterProcesses, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="redis_presence")
    url = cluster_url(cluster)
    queue = queue_of("reporter")
    migration = Migration(cluster, queue)
    consumers = [f"c{i}" for i in range(8)]
    sync_probe, async_probe = Probe(queue), Probe(queue)
    threads = [
        threading.Thread(target=sync_probe.run_sync, args=(url,)),
        threading.Thread(target=async_probe.run_async, args=(url,)),
    ]
    with (
        RedisPresenceRegistry.from_url(url) as registry,
        PresenceReporter(registry, interval_ms=50, default_meta=False) as reporter,
    ):

        def beat_all(lease_count: int = 1) -> None:
            for consumer in consumers:
                reporter.beat(queue, "g", consumer, lease_count)
                reporter.beat("steady", "g", consumer, lease_count)  # on another slot

        beat_all()
        reporter.flush()
        for thread in threads:
            thread.start()
        try:
            migration.start()
            # The group's keys split between the two nodes: every script call of the queue
            # is answered TRYAGAIN, for longer than redis-py follows it on its own.
            moved = migration.move_keys(1)
            migration.hold(beat_all)
            moved += migration.move_keys()  # all on the target: ASK, then ASKING there
            migration.finish()
            beats = sync_probe.beats, async_probe.beats

            def through() -> bool:
                if (sync_probe.beats, async_probe.beats) > beats and not reporter.pending:
                    return True
                beat_all(2)
                return False

            wait_until(through, timeout_s=10, what="a beat through after the migration")
        finally:
            sync_probe.stop.set()
            async_probe.stop.set()
            for thread in threads:
                thread.join()
            migration.close()
        assert moved >= 2, moved  # the group's keys did move
        reporter.flush()
        rows = registry.snapshot(queue=queue)
    assert not sync_probe.errors, sync_probe.errors[:3]
    assert not async_probe.errors, async_probe.errors[:3]
    assert sync_probe.beats
    assert async_probe.beats
    failures = [r.getMessage() for r in caplog.records if r.name.startswith("redis_presence")]
    assert not failures, failures
    assert {row.consumer for row in rows} == {*consumers, "sync-probe", "async-probe"}
    assert {row.state for row in rows} == {PresenceState.ACTIVE}
    assert {row.lease_count for row in rows if row.consumer in consumers} == {2}
    with cluster.client() as client:
        owner = client.get_node_from_key(migration.key).name
    assert owner == f"{migration.target.host}:{migration.target.port}"


def test_a_migration_that_never_ends_is_a_cluster_migrating_error_past_the_bound(
    cluster: RedisClusterProcesses,
) -> None:
    url = cluster_url(cluster)
    queue = queue_of("stuck")
    migration = Migration(cluster, queue)
    with RedisPresenceRegistry.from_url(url, cluster_retry_ms=300) as registry:
        registry.heartbeat(queue, "g", "c1")
        migration.start()
        try:
            migration.move_keys(1)  # and never the others: TRYAGAIN for as long as it lasts
            began = time.monotonic()
            with pytest.raises(PresenceClusterMigratingError) as info:
                registry.heartbeat(queue, "g", "c1")
            waited_s = time.monotonic() - began

            async def beat() -> None:
                async with AsyncRedisPresenceRegistry.from_url(
                    url, cluster_retry_ms=300
                ) as aregistry:
                    await aregistry.heartbeat(queue, "g", "c1")

            with pytest.raises(PresenceClusterMigratingError):
                asyncio.run(beat())
            result = CliRunner().invoke(cli, ["--url", url, "heartbeat", queue, "g", "c1"])
        finally:
            migration.move_keys()
            migration.finish()
            migration.close()
        registry.heartbeat(queue, "g", "c1")  # the slot settled: it goes through again
    assert isinstance(info.value, PresenceConnectionError)
    assert 0.3 <= waited_s < 5, waited_s
    assert "cluster_retry_ms" in str(info.value), str(info.value)
    assert "TTL exhausted" not in str(info.value)
    # The CLI's default bound (2 s) passed too: one line, the exit code of connection trouble.
    assert result.exit_code == 3, result.output
    assert result.output.startswith("Error: "), result.output
    assert result.output.count("\n") == 1, result.output
    assert "slot" in result.output
    assert "TTL exhausted" not in result.output


def test_cluster_retry_ms_is_checked() -> None:
    for bad in (-1, 1.5, "2000", True):
        with pytest.raises((TypeError, ValueError), match="cluster_retry_ms"):
            RedisPresenceRegistry(redis.Redis(port=1), cluster_retry_ms=bad)  # type: ignore[arg-type]

"""Redis Cluster specifics: cluster URLs, one script call per queue, NOSCRIPT on every node,
and prune racing with first heartbeats from several threads.

The whole contract suite also runs on the cluster (sync and async) through the backend
matrix in `backends.py`; these are the cluster-only guarantees.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio.cluster
import redis.client
import redis.cluster
from backends import all_keys, without_logs
from clusters import RedisClusterProcesses
from servers import free_port

from redis_presence import (
    AsyncRedisPresenceRegistry,
    PresenceBatchError,
    PresenceConfigError,
    PresenceDataError,
    PresenceDataWarning,
    PresenceError,
    RedisPresenceRegistry,
)
from redis_presence.keys import Keyspace
from redis_presence.urls import SCHEMES, is_cluster_url, open_async_client

MS = 1_000_000
T0 = 1_796_000_000_123_456_000

pytestmark = pytest.mark.timeout(120)


def node_clients(cluster: RedisClusterProcesses) -> list[redis.Redis]:
    return [node.client() for node in cluster.nodes]


def command_calls(clients: list[redis.Redis], command: str) -> int:
    """How often `command` ran on the whole cluster since the last CONFIG RESETSTAT."""
    total = 0
    for client in clients:
        stats = client.info("commandstats").get(f"cmdstat_{command}")
        total += int(stats["calls"]) if stats else 0
    return total


@pytest.fixture
def nodes(redis_cluster: RedisClusterProcesses) -> Iterator[list[redis.Redis]]:
    clients = node_clients(redis_cluster)
    yield clients
    for client in clients:
        client.close()


def node_of(client: redis.cluster.RedisCluster, key: str) -> str:
    """The name (host:port) of the master that holds `key`."""
    return str(client.get_node_from_key(key).name)  # type: ignore[no-untyped-call]


def queues_on_every_node(client: redis.cluster.RedisCluster, per_node: int = 2) -> list[str]:
    """Queue names whose keys live on each master, `per_node` of them per master."""
    found: dict[str, list[str]] = {}
    space = Keyspace("presence")
    index_node = node_of(client, space.groups)
    for i in range(1000):
        queue = f"queue-{i}"
        node = node_of(client, space.group(queue, "g").hb)
        found.setdefault(node, [])
        if len(found[node]) < per_node:
            found[node].append(queue)
        if len(found) == 3 and all(len(q) == per_node for q in found.values()):
            break
    assert len(found) == 3, found
    assert any(node != index_node for node in found)
    return sorted(q for qs in found.values() for q in qs)


# --- URLs ---------------------------------------------------------------------------------


def test_cluster_url_opens_a_cluster_registry(redis_cluster: RedisClusterProcesses) -> None:
    node = redis_cluster.nodes[1]
    redis_cluster.flushall()
    with RedisPresenceRegistry.from_url(f"REDIS+Cluster://{node.host}:{node.port}") as registry:
        assert isinstance(registry.client, redis.cluster.RedisCluster)
        assert registry.clustered
        registry.heartbeat("orders", "billing", "w1", now_ns=T0)
        assert [row.key for row in registry.snapshot(now_ns=T0)] == [("orders", "billing", "w1")]
        nodes = registry.client.get_nodes()  # type: ignore[no-untyped-call]
        pools = [n.redis_connection.connection_pool for n in nodes]
    # Closing the registry that opened the client closes every connection it made.
    assert pools
    for pool in pools:
        held = [*pool._available_connections, *pool._in_use_connections]
        assert all(connection._sock is None for connection in held), pool


def test_async_cluster_url_opens_an_async_cluster_registry(
    redis_cluster: RedisClusterProcesses,
) -> None:
    node = redis_cluster.nodes[2]
    redis_cluster.flushall()

    async def main() -> list[tuple[str, str, str]]:
        url = f"redis+cluster://{node.host}:{node.port}"
        async with AsyncRedisPresenceRegistry.from_url(url) as registry:
            assert isinstance(registry.client, redis.asyncio.cluster.RedisCluster)
            assert registry.clustered
            await registry.heartbeat("orders", "billing", "w1", now_ns=T0)
            return [row.key for row in await registry.snapshot(now_ns=T0)]

    assert asyncio.run(main()) == [("orders", "billing", "w1")]


def test_tls_cluster_url_maps_to_rediss() -> None:
    client = open_async_client("rediss+cluster://user:secret@127.0.0.1:7000")
    assert isinstance(client, redis.asyncio.cluster.RedisCluster)
    assert client.connection_kwargs["connection_class"] is redis.asyncio.SSLConnection
    assert client.connection_kwargs["password"] == "secret"
    plain = open_async_client("redis+cluster://127.0.0.1:7000")
    assert plain.connection_kwargs["connection_class"] is redis.asyncio.Connection
    assert is_cluster_url("rediss+cluster://h:1")
    assert not is_cluster_url("rediss://h:1")


def test_unknown_cluster_schemes_name_the_accepted_ones() -> None:
    assert {"redis+cluster", "rediss+cluster"} <= set(SCHEMES)
    with pytest.raises(PresenceConfigError, match=r"redis\+cluster://, rediss\+cluster://"):
        RedisPresenceRegistry.from_url("unix+cluster:///tmp/redis.sock")


def test_unreachable_cluster_url_is_a_presence_error() -> None:
    url = f"redis+cluster://:hunter2@127.0.0.1:{free_port()}"
    with pytest.raises(PresenceError, match="cannot be connected") as info:
        RedisPresenceRegistry.from_url(url, socket_connect_timeout=1)
    assert "hunter2" not in str(info.value)


# --- one script call per queue ------------------------------------------------------------


def test_heartbeat_many_sends_one_script_call_per_queue(
    cluster_client: redis.cluster.RedisCluster, nodes: list[redis.Redis]
) -> None:
    registry = RedisPresenceRegistry(cluster_client)
    queues = queues_on_every_node(cluster_client)
    beats = [(q, g, f"c{i}", i) for q in queues for g in ("a", "b") for i in range(5)]
    registry.heartbeat_many(beats[:1])  # load the script on its node
    for client in nodes:
        client.config_resetstat()
    assert registry.heartbeat_many(beats) == len(beats)
    assert command_calls(nodes, "fcall") == len(queues)
    assert command_calls(nodes, "hset") == len(beats)
    # A ZADD per beat, one more that lists every group but the one already listed, and one
    # that lists the queues' event logs (their `joined` entries, one per group).
    assert command_calls(nodes, "zadd") == len(beats) + 2
    assert command_calls(nodes, "xadd") == 2 * len(queues)
    counts = registry.count_active_by_group()
    assert counts == {(q, g): 5 for q in queues for g in ("a", "b")}

    for client in nodes:
        client.config_resetstat()
    assert registry.heartbeat_many(beats) == len(beats)  # every group is marked: no SADD
    assert command_calls(nodes, "fcall") == len(queues)
    assert command_calls(nodes, "sadd") == 0


class PipelineSpy:
    """Counts the plain (per-node) pipelines executed and the script calls the cluster
    client sends on its own, one round trip each."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, client: redis.cluster.RedisCluster):
        self.pipelines = 0
        self.single_calls: list[str] = []
        execute = redis.client.Pipeline.execute
        send = client.execute_command

        def counted_execute(pipe: Any, *args: Any, **kwargs: Any) -> Any:
            self.pipelines += 1
            return execute(pipe, *args, **kwargs)

        def counted_send(*args: Any, **kwargs: Any) -> Any:
            if str(args[0]).upper().startswith(("EVAL", "FCALL")):
                self.single_calls.append(str(args[0]))
            return send(*args, **kwargs)  # type: ignore[no-untyped-call]

        monkeypatch.setattr(redis.client.Pipeline, "execute", counted_execute)
        monkeypatch.setattr(client, "execute_command", counted_send)


def test_per_queue_scripts_go_in_one_pipeline_per_node(
    cluster_client: redis.cluster.RedisCluster,
    nodes: list[redis.Redis],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """redis-py's cluster pipeline refuses EVALSHA, so the registry pipelines each node's
    script calls itself: one round trip per node, not one per queue."""
    queues = queues_on_every_node(cluster_client, per_node=4)  # 12 queues on 3 masters
    beats = [(q, "g", f"c{i}", i) for q in queues for i in range(3)]
    registry = RedisPresenceRegistry(cluster_client)
    for client in nodes:
        client.script_flush()
        client.function_flush()
    spy = PipelineSpy(monkeypatch, cluster_client)
    assert registry.heartbeat_many(beats, now_ns=T0) == len(beats)
    space = Keyspace("presence")
    index_nodes = {node_of(cluster_client, space.groups), node_of(cluster_client, space.events)}
    # The groups' shared TTLs read (one pipeline per node); "Function not found" on every
    # node: one FUNCTION LOAD (the cluster client sends it to every master), then each node's calls
    # again in one more pipeline, never one by one; then the new groups and the logs of
    # their `joined` events listed in the two indexes (one pipeline per index's node).
    assert (spy.pipelines, spy.single_calls) == (3 + 3 + 3 + len(index_nodes), [])
    assert registry.count_active_by_group(now_ns=T0)  # count.lua: loaded the same way
    assert registry.prune_expired(now_ns=T0) == 0  # and prune.lua

    reader = RedisPresenceRegistry(cluster_client, read_only=True)
    reader.count_active_by_group(now_ns=T0)  # reads the shared TTLs once, as any new registry
    counts = {(q, "g"): 3 for q in queues}
    cases: list[tuple[str, Callable[[], object], object]] = [
        ("count", lambda: registry.count_active_by_group(now_ns=T0), counts),
        ("count, read-only", lambda: reader.count_active_by_group(now_ns=T0), counts),
        ("heartbeat_many", lambda: registry.heartbeat_many(beats, now_ns=T0), len(beats)),
    ]
    for name, call, expected in cases:
        spy.pipelines, spy.single_calls = 0, []
        assert call() == expected, name
        assert (spy.pipelines, spy.single_calls) == (3, []), name
    spy.pipelines = 0
    assert registry.prune_expired(now_ns=T0 + 3_600_000 * MS) == len(beats)
    # prune.lua in one pipeline per node, then the re-checks of the emptied groups (EXISTS)
    # likewise; the index's SREM goes on its own to the index's node, and the event index's
    # ZADD with the epoch marker's SET NX (one slot) in one pipeline.
    assert spy.pipelines == 7
    assert spy.single_calls == []
    assert without_logs(all_keys(cluster_client)) == []


def test_a_script_call_sent_to_the_wrong_node_goes_again_through_the_cluster_client(
    cluster_client: redis.cluster.RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As if every slot had moved since the slot map was read: each node answers MOVED,
    the script does not run there, and the cluster client follows the redirection."""
    queues = queues_on_every_node(cluster_client, per_node=2)
    registry = RedisPresenceRegistry(cluster_client)
    registry.heartbeat_many([(q, "g", "c", 1) for q in queues], now_ns=T0)
    owner = cluster_client.get_node_from_key
    masters = cluster_client.get_primaries()  # type: ignore[no-untyped-call]

    def wrong_node(key: Any, replica: bool = False) -> Any:
        right = owner(key, replica)  # type: ignore[no-untyped-call]
        return next(node for node in masters if node.name != right.name)

    monkeypatch.setattr(cluster_client, "get_node_from_key", wrong_node)
    spy = PipelineSpy(monkeypatch, cluster_client)
    assert registry.count_active_by_group(now_ns=T0) == {(q, "g"): 1 for q in queues}
    assert registry.prune_expired(now_ns=T0) == 0
    assert len(spy.single_calls) >= len(queues)  # every prune call answered MOVED, sent again


def test_a_node_whose_connection_fails_has_its_calls_sent_again(
    cluster_client: redis.cluster.RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node pipeline that loses its connection leaves its calls to the cluster client,
    which refreshes the slot map and retries."""
    queues = queues_on_every_node(cluster_client, per_node=2)
    registry = RedisPresenceRegistry(cluster_client)
    registry.heartbeat_many([(q, "g", "c", 1) for q in queues], now_ns=T0)
    spy = PipelineSpy(monkeypatch, cluster_client)

    def broken(pipe: Any, *args: Any, **kwargs: Any) -> Any:
        spy.pipelines += 1
        raise redis.exceptions.ConnectionError("Connection reset by peer")

    monkeypatch.setattr(redis.client.Pipeline, "execute", broken)
    assert registry.count_active_by_group(now_ns=T0) == {(q, "g"): 1 for q in queues}
    spy.pipelines = 0
    assert registry.prune_expired(now_ns=T0) == 0
    assert spy.pipelines == 3
    assert len(spy.single_calls) >= len(queues)  # one each, and any NOSCRIPT retry


def test_foreign_data_in_one_queue_costs_that_queue_only(
    cluster_client: redis.cluster.RedisCluster,
) -> None:
    """A read meeting the foreign key fails naming it, after every node answered; a batch
    and a prune write every other queue, on every node, and name the one they could not."""
    queues = queues_on_every_node(cluster_client, per_node=1)
    registry = RedisPresenceRegistry(cluster_client)
    registry.heartbeat_many([(q, "g", "c", 1) for q in queues], now_ns=T0)
    foreign = Keyspace("presence").group(queues[1], "g").hb
    cluster_client.delete(foreign)
    cluster_client.rpush(foreign, "written by another program")
    with pytest.warns(PresenceDataWarning, match=f"WRONGTYPE.*key {re.escape(foreign)}, ZCOUNT"):
        counts = registry.count_active_by_group(now_ns=T0)
    assert counts == {(q, "g"): 1 for q in queues if q != queues[1]}  # the others, read
    with pytest.raises(PresenceDataError, match=f"WRONGTYPE.*key {re.escape(foreign)}, ZCOUNT"):
        registry.count_active_by_group(now_ns=T0, queue=queues[1], group="g")
    with pytest.raises(PresenceBatchError) as batch:
        registry.heartbeat_many([(q, "g", "d", 2) for q in queues], now_ns=T0 + 1)
    assert list(batch.value.failed) == [(queues[1], "g")]
    assert batch.value.completed == len(queues) - 1
    with pytest.raises(PresenceBatchError) as pruned:
        registry.prune_expired(now_ns=T0 + 10**15)
    assert list(pruned.value.failed) == [(queues[1], "g")]
    failure = pruned.value.failed[(queues[1], "g")]
    assert isinstance(failure, PresenceDataError)
    assert f"key {foreign} holds a list" in str(failure)
    assert pruned.value.completed == 2 * (len(queues) - 1)
    assert cluster_client.lrange(foreign, 0, -1) == [b"written by another program"]
    assert {k.decode() for k in without_logs(all_keys(cluster_client))} == {
        foreign,
        Keyspace("presence").group(queues[1], "g").data,
        Keyspace("presence").group(queues[1], "g").mark,
        Keyspace("presence").groups,
    }


def test_async_heartbeat_many_sends_one_script_call_per_queue(
    redis_cluster: RedisClusterProcesses,
    cluster_client: redis.cluster.RedisCluster,
    nodes: list[redis.Redis],
) -> None:
    queues = queues_on_every_node(cluster_client)
    beats = [(q, "g", f"c{i}", i) for q in queues for i in range(4)]

    async def main() -> tuple[int, int]:
        registry = AsyncRedisPresenceRegistry(redis_cluster.async_client())
        try:
            await registry.heartbeat(queues[0], "g", "warm-up")
            for client in nodes:
                client.config_resetstat()
            await registry.heartbeat_many(beats)
            calls = command_calls(nodes, "fcall")
            return calls, len(await registry.snapshot())
        finally:
            await registry.client.aclose()

    assert asyncio.run(main()) == (len(queues), len(beats) + 1)


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_snapshot_reads_every_group_on_its_node_at_one_instant(
    redis_cluster: RedisClusterProcesses,
    cluster_client: redis.cluster.RedisCluster,
    nodes: list[redis.Redis],
    flavour: str,
) -> None:
    """No transaction: each group is one HGETALL on its node (one pipeline per node), after
    one HLEN each; without now_ns, one TIME in all, on the index's node."""
    queues = queues_on_every_node(cluster_client)
    beats = [(q, g, "c", 0) for q in queues for g in ("g", "h")]
    RedisPresenceRegistry(cluster_client).heartbeat_many(beats, now_ns=T0)
    space = Keyspace("presence")
    index_node = node_of(cluster_client, space.groups)
    groups_on = {
        f"{node.host}:{node.port}": 2
        * sum(
            node_of(cluster_client, space.group(q, "g").data) == f"{node.host}:{node.port}"
            for q in queues
        )
        for node in redis_cluster.nodes
    }
    assert sorted(groups_on.values()) == [4, 4, 4]

    async def read_async() -> int:
        registry = AsyncRedisPresenceRegistry(redis_cluster.async_client())
        try:
            await registry.size()  # the slot map, before the counted read
            for client in nodes:
                client.config_resetstat()
            return len(await registry.snapshot())
        finally:
            await registry.client.aclose()

    if flavour == "async":
        assert asyncio.run(read_async()) == len(beats)
    else:
        for client in nodes:
            client.config_resetstat()
        assert len(RedisPresenceRegistry(cluster_client).snapshot()) == len(beats)
    for node, client in zip(redis_cluster.nodes, nodes, strict=True):
        name = f"{node.host}:{node.port}"
        here = groups_on[name]
        times = 1 if name == index_node else 0
        for command, calls in (("exec", 0), ("time", times), ("hlen", here), ("hgetall", here)):
            assert command_calls([client], command) == calls, (node.port, command)


# --- scripts survive a flushed cache on every node ----------------------------------------


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_every_operation_recovers_after_script_flush_on_every_node(
    redis_cluster: RedisClusterProcesses,
    cluster_client: redis.cluster.RedisCluster,
    nodes: list[redis.Redis],
    flavour: str,
) -> None:
    queues = queues_on_every_node(cluster_client, per_node=1)
    beats = [(q, "g", "c", 1) for q in queues]

    def flush_scripts() -> None:
        for client in nodes:
            client.script_flush()

    def operations(registry: Any) -> list[Callable[[], Any]]:
        return [
            lambda: registry.heartbeat(queues[0], "g", "solo", now_ns=T0),
            lambda: registry.heartbeat_many(beats, now_ns=T0),
            lambda: registry.snapshot(now_ns=T0),
            lambda: registry.count_active_by_group(now_ns=T0),
            lambda: registry.prune_expired(now_ns=T0),
            lambda: registry.deregister(queues[0], "g", "solo"),
            lambda: registry.prune_expired(now_ns=T0 + 3_600_000 * MS),
        ]

    if flavour == "sync":
        registry: Any = RedisPresenceRegistry(cluster_client)
        results = []
        for operation in operations(registry):
            flush_scripts()
            results.append(operation())
    else:

        async def main() -> list[Any]:
            registry = AsyncRedisPresenceRegistry(redis_cluster.async_client())
            try:
                out = []
                for operation in operations(registry):
                    flush_scripts()
                    out.append(await operation())
                return out
            finally:
                await registry.client.aclose()

        results = asyncio.run(main())
    assert results[2] == sorted(results[2], key=lambda row: row.key)
    assert len(results[2]) == len(queues) + 1
    assert results[3] == {(q, "g"): 2 if q == queues[0] else 1 for q in queues}
    assert results[4:] == [0, True, len(queues)]
    assert without_logs(all_keys(cluster_client)) == []


# --- prune racing with first heartbeats ---------------------------------------------------

ROUNDS = 12
QUEUES_PER_ROUND = 32
BEATERS = 4
PRUNERS = 2


def test_prune_racing_first_heartbeats_never_loses_a_consumer(
    redis_cluster: RedisClusterProcesses, cluster_client: redis.cluster.RedisCluster
) -> None:
    """Each round: every queue holds one long-expired consumer; pruner threads remove it
    (emptying the group) while beater threads send the first beats of new consumers of the
    same groups. Once the round's calls have returned, every new consumer is in the
    snapshot, and the index lists exactly the non-empty groups after a final prune."""
    registries = [
        RedisPresenceRegistry(redis_cluster.client()) for _ in range(BEATERS + PRUNERS + 1)
    ]
    reader, beaters, pruners = registries[0], registries[1 : BEATERS + 1], registries[BEATERS + 1 :]
    try:
        for round_ in range(ROUNDS):
            queues = [f"r{round_}-q{i:02}" for i in range(QUEUES_PER_ROUND)]
            seconds, micros = cluster_client.time()
            now_ns = (int(seconds) * 1_000_000 + int(micros)) * 1_000
            reader.heartbeat_many([(q, "g", "gone", 0) for q in queues], now_ns=now_ns - HOUR)
            race = Race()
            threads = [race.thread(beat, queues, i, r) for i, r in enumerate(beaters)]
            threads += [race.thread(prune, r) for r in pruners]
            race.run(threads)
            expected = {(q, "g", f"b{i % BEATERS}") for i, q in enumerate(queues)}
            seen = {row.key for row in reader.snapshot() if row.queue in queues}
            assert seen == expected, f"round {round_}: lost {sorted(expected - seen)}"
        reader.prune_expired()
        space = Keyspace("presence")
        members: list[bytes] = cluster_client.zrange(space.groups, 0, -1)  # type: ignore[assignment]
        listed = {space.from_member(m) for m in members}
        assert {(gk.queue, gk.group) for gk in listed} == {
            (f"r{r}-q{i:02}", "g") for r in range(ROUNDS) for i in range(QUEUES_PER_ROUND)
        }
    finally:
        for registry in registries:
            registry.client.close()


HOUR = 3_600_000 * MS


class Race:
    """Threads that start together; beaters hold back until a prune is under way, so their
    first beats land while it empties the groups (the GIL would otherwise let them finish
    before the pruner's first script)."""

    def __init__(self) -> None:
        self.pruning = threading.Event()
        self.errors: list[BaseException] = []
        self.barrier = threading.Barrier(BEATERS + PRUNERS)

    def thread(self, target: Callable[..., None], *args: Any) -> threading.Thread:
        def run() -> None:
            try:
                self.barrier.wait(timeout=30)
                target(self, *args)
            except BaseException as exc:
                self.errors.append(exc)
                self.pruning.set()

        return threading.Thread(target=run)

    def run(self, threads: list[threading.Thread]) -> None:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not self.errors, self.errors


def beat(race: Race, queues: list[str], index: int, registry: RedisPresenceRegistry) -> None:
    assert race.pruning.wait(timeout=30)
    # Each queue gets its first new consumer from one beater, walking against the prune's
    # (sorted) order: the two meet halfway, so some first beats land just after the prune
    # emptied their group and before it updated the index.
    for queue in reversed(queues[index::BEATERS]):
        registry.heartbeat(queue, "g", f"b{index}")


def prune(race: Race, registry: RedisPresenceRegistry) -> None:
    race.pruning.set()
    registry.prune_expired()


def test_the_cli_takes_a_cluster_url(redis_cluster: RedisClusterProcesses) -> None:
    from click.testing import CliRunner

    from redis_presence.cli import cli

    redis_cluster.flushall()
    node = redis_cluster.nodes[0]
    url = f"redis+cluster://{node.host}:{node.port}"
    runner = CliRunner(env={"REDIS_PRESENCE_URL": url})
    beat = runner.invoke(cli, ["heartbeat", "orders", "billing", "w1"])
    assert beat.exit_code == 0, beat.output
    listed = runner.invoke(cli, ["ls", "--format", "json"])
    assert listed.exit_code == 0, listed.output
    assert [(row["queue"], row["consumer"]) for row in json.loads(listed.stdout)] == [
        ("orders", "w1")
    ]

"""Case 9: every read and prune at the fleet sizes of issue 11, with the longest command.

Fleets (standalone unless said): 1,000,000 consumers over 100 groups; 200,000 consumers over
100,000 groups; 100,000 consumers over 100 groups on a three-master cluster started for the
case; and, as baselines for the ratios, 10,000 consumers over 100 groups and a store that
holds only the one group of 100 consumers that the filtered reads ask for (that group, the
"probe", is in every fleet besides its other groups).

For each operation: the median time over rounds (the operations interleaved round by round)
and, from one more run of each operation alone, the longest single server command it sent:
the largest of ``INFO latencystats`` p100 (which counts a whole script call, or a whole
``EXEC``, as one command) and of the top-level SLOWLOG entries at
``slowlog-log-slower-than 0`` (which also names the command). On a shared machine both
include time the server process was not scheduled, so the longest is an upper bound.
"""

from __future__ import annotations

import gc
import statistics
import tempfile
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
import redis.cluster

from redis_presence import RedisPresenceRegistry
from redis_presence.keys import Keyspace
from redis_presence.localserver import (
    NO_PERSISTENCE,
    LocalServer,
    LocalServerError,
    free_port,
    poll,
)

from .fleet import NOW_NS, TTL_MS, RawPresence, ScanDesign
from .server import BenchServer
from .stats import CaseResult, Check, Measure, interleaved, used_memory

MS = 1_000_000
LONGEST_MS = 2.0
"""The issue's bound on the longest single server command, at every size."""
PROBE = ("probe-queue", "probe-group")
PROBE_SIZE = 100
EXPIRED = 1_000
OLD_NS = NOW_NS - 10 * TTL_MS * MS
FILL_CHUNK = 1_000


@dataclass(frozen=True)
class Fleet:
    """A fleet: `consumers` spread evenly over `groups` groups (plus the probe group)."""

    key: str
    consumers: int
    groups: int
    rounds: int
    cluster: bool = False

    @property
    def label(self) -> str:
        where = ", cluster of 3 masters" if self.cluster else ""
        return f"{self.consumers:,} over {self.groups:,} groups{where}"


FULL_FLEETS = (
    Fleet("1m", 1_000_000, 100, 4),
    Fleet("200k-100k", 200_000, 100_000, 3),
    Fleet("cluster-100k", 100_000, 100, 5, cluster=True),
    Fleet("10k", 10_000, 100, 20),
)
QUICK_FLEETS = (
    Fleet("1m", 20_000, 100, 3),
    Fleet("200k-100k", 4_000, 2_000, 2),
    Fleet("cluster-100k", 5_000, 100, 2, cluster=True),
    Fleet("10k", 2_000, 100, 3),
)


def group_pairs(groups: int) -> list[tuple[str, str]]:
    """`groups` (queue, group) pairs, 100 groups a queue (at least one queue)."""
    per_queue = min(groups, 100)
    return [(f"queue-{i // per_queue:05d}", f"group-{i % per_queue:03d}") for i in range(groups)]


def consumer(i: int) -> str:
    return f"broker-{i % 7:02d}.worker-{i:07d}"


def _stored(name: str, lease: int, now_ns: int) -> str:
    """The version 2 value a beat of `name` stores (docs/protocol.md, section 4): capacity 8,
    no progress, flags or conflict, and its broker process's instance token (the name's
    first part: every consumer of one broker beats with one token)."""
    return f"{now_ns} {now_ns} {lease} 0 8 0 0 {name.partition('.')[0]} -"


def bulk_write(
    client: redis.Redis,
    keys: Keyspace,
    members: dict[tuple[str, str], list[tuple[str, int]]],
    now_ns: int,
) -> None:
    """Write a fleet in the package's layout (`Keyspace`) with pipelined ``ZADD``/``HSET``
    of up to FILL_CHUNK consumers: much faster than beats, and the same stored data (version
    2 values, `_stored`; the fleet indexes ``P:newest`` and ``P:oldest`` included)."""
    us = now_ns // 1_000
    pipe = client.pipeline(transaction=False)
    queued = 0
    for (queue, group), consumers in members.items():
        gk = keys.group(queue, group)
        for start in range(0, len(consumers), FILL_CHUNK):
            part = consumers[start : start + FILL_CHUNK]
            pipe.zadd(gk.hb, {name: us for name, _ in part})
            pipe.hset(gk.data, mapping={name: _stored(name, lease, now_ns) for name, lease in part})
            queued += 2
        pipe.zadd(keys.groups, {gk.member: 0})
        queued += 1
        if consumers:  # the fleet indexes a version-2 beat keeps (standalone)
            pipe.zadd(keys.newest, {gk.member: us})
            pipe.zadd(keys.oldest, {gk.member: us})
            queued += 2
        if queued >= 2_000:
            pipe.execute()
            queued = 0
    pipe.execute()


def fleet_members(fleet: Fleet) -> dict[tuple[str, str], list[tuple[str, int]]]:
    """The fleet's consumers by group, the probe group included."""
    pairs = group_pairs(fleet.groups)
    members: dict[tuple[str, str], list[tuple[str, int]]] = {pair: [] for pair in pairs}
    for i in range(fleet.consumers - PROBE_SIZE):
        members[pairs[i % len(pairs)]].append((consumer(i), i % 17))
    members[PROBE] = [(f"probe-{i:03d}", i % 5) for i in range(PROBE_SIZE)]
    return members


def doomed(fleet: Fleet) -> list[tuple[str, str, str, int]]:
    """EXPIRED consumers spread over (at most 100 of) the fleet's groups, written old."""
    pairs = group_pairs(fleet.groups)[:100]
    return [(*pairs[i % len(pairs)], f"expired-{i:05d}", 0) for i in range(EXPIRED)]


# -- the longest command -------------------------------------------------------------------


class Longest:
    """Reads the longest single command of one operation on the nodes of a store."""

    def __init__(self, nodes: Sequence[redis.Redis]) -> None:
        self.nodes = list(nodes)

    def __enter__(self) -> Longest:
        for node in self.nodes:
            node.config_set("latency-tracking-info-percentiles", "100")
            node.config_set("slowlog-max-len", 1_000_000)
        return self

    def __exit__(self, *exc: object) -> None:
        for node in self.nodes:
            node.config_set("slowlog-log-slower-than", 10_000)
            node.slowlog_reset()

    def measure(self, action: Callable[[], object]) -> tuple[float, str, float]:
        """(the longest command's server time in us, what it was, the median time of the
        commands of the same name) over one run of `action`."""
        for node in self.nodes:
            node.config_resetstat()
            node.slowlog_reset()
            node.config_set("slowlog-log-slower-than", 0)
        action()
        for node in self.nodes:
            node.config_set("slowlog-log-slower-than", -1)
        best: tuple[float, str] = (0.0, "")
        durations: dict[str, list[float]] = {}
        for node in self.nodes:
            stats: dict[str, Any] = node.info("latencystats")
            for name, values in stats.items():
                command = name.removeprefix("latency_percentiles_usec_")
                if command.split("|")[0] in IGNORED:
                    continue
                p100 = float(values.get("p100", 0.0)) if isinstance(values, dict) else 0.0
                best = max(best, (p100, f"{command.upper()} (latencystats p100)"))
            for entry in node.slowlog_get(1_000_000):
                if entry.get("client_address") in (b"?:0", "?:0"):
                    continue  # a script's own command: its script call counts it
                raw = entry["command"]
                text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
                name = text.split(" ", 1)[0].lower()
                if name in IGNORED:
                    continue
                best = max(best, (float(entry["duration"]), f"{name.upper()} (SLOWLOG)"))
                durations.setdefault(name.upper(), []).append(float(entry["duration"]))
        same = durations.get(best[1].split(" ")[0], [best[0]])
        return best[0], best[1], statistics.median(same)

    def runs(
        self, action: Callable[[], object], before: Callable[[], object], runs: int
    ) -> dict[str, Any]:
        """The longest command of each of `runs` runs of `action` (`before` untimed first):
        the least of them (a run's longest is raised by any moment the shared machine did
        not schedule the server; the least run shows what the command itself costs), the
        greatest, and what the greatest was."""
        found = []
        for _ in range(runs):
            before()
            found.append(self.measure(action))
        return {
            "usec": round(min(found)[0]),
            "worst_usec": round(max(found)[0]),
            "command": max(found)[1],
            "median_usec_of_that_command": round(max(found)[2]),
        }


IGNORED = ("config", "slowlog", "info", "ping")
LONGEST_RUNS = 3


# -- one fleet -----------------------------------------------------------------------------


def _operations(registry: RedisPresenceRegistry, fleet: Fleet) -> dict[str, Callable[[], object]]:
    q, g = PROBE
    return {
        "snapshot()": lambda: registry.snapshot(now_ns=NOW_NS, ttl_ms=TTL_MS),
        "iter_snapshot()": lambda: sum(
            1 for _ in registry.iter_snapshot(now_ns=NOW_NS, ttl_ms=TTL_MS)
        ),
        "count_active_by_group()": lambda: registry.count_active_by_group(
            now_ns=NOW_NS, ttl_ms=TTL_MS
        ),
        f"snapshot(queue=, group=) of one group of {PROBE_SIZE}": lambda: registry.snapshot(
            now_ns=NOW_NS, ttl_ms=TTL_MS, queue=q, group=g
        ),
        "count_active(queue, group)": lambda: registry.count_active(
            q, g, now_ns=NOW_NS, ttl_ms=TTL_MS
        ),
    }


def _prune_op(registry: RedisPresenceRegistry, fleet: Fleet) -> Callable[[], object]:
    def prune() -> object:
        removed = registry.prune_expired(now_ns=NOW_NS, ttl_ms=TTL_MS)
        if removed != EXPIRED:
            raise AssertionError(f"prune_expired removed {removed}, not {EXPIRED}")
        return removed

    return prune


def _restock(registry: RedisPresenceRegistry, fleet: Fleet) -> None:
    registry.heartbeat_many(doomed(fleet), now_ns=OLD_NS)


def measure_fleet(
    result: CaseResult,
    fleet: Fleet,
    registry: RedisPresenceRegistry,
    nodes: Sequence[redis.Redis],
    extra: dict[str, Callable[[], object]] | None = None,
) -> None:
    """Median and longest command of every operation on one written fleet."""
    ops = {**_operations(registry, fleet), **(extra or {})}
    prune_name = f"prune_expired() of {EXPIRED:,} expired"
    total = fleet.consumers
    # Warm-up and checks.
    rows = len(registry.snapshot(now_ns=NOW_NS, ttl_ms=TTL_MS))
    if rows != total:
        raise AssertionError(f"{fleet.label}: snapshot read {rows} rows")
    variants = dict(ops)
    variants[prune_name] = _prune_op(registry, fleet)

    def before(name: str) -> None:
        if name == prune_name:
            _restock(registry, fleet)

    samples = interleaved(variants, fleet.rounds, before=before, collect=fleet.consumers > 50_000)
    for name, values in samples.items():
        unit, scale = ("ms", 1_000) if statistics.median(values) > 5_000 else ("us", 1)
        result.measures.append(
            Measure(f"{name} @ {fleet.label}", unit, [v / scale for v in values], "call", total)
        )
    with Longest(nodes) as longest:
        found: dict[str, dict[str, Any]] = {}
        for name, fn in variants.items():
            restock = (lambda: _restock(registry, fleet)) if name == prune_name else _nothing
            baseline = name in (extra or {})
            found[name] = longest.runs(fn, restock, 1 if baseline else LONGEST_RUNS)
    result.facts[f"longest server command @ {fleet.label}"] = found
    ours = {k: v for k, v in found.items() if k not in (extra or {})}
    result.checks.append(
        Check(
            f"longest server command (ms) @ {fleet.label}",
            max(v["usec"] for v in ours.values()) / 1_000,
            "<=",
            LONGEST_MS,
            f"the longest single command of any package operation (latencystats p100, "
            f"SLOWLOG at 0), the least over {LONGEST_RUNS} runs of each",
        )
    )


BOUNDED = "diag: bounded transfer (the commands snapshot() sends, nothing decoded)"
"""A baseline beside the raw transfer: `RawPresence.bounded_transfer`."""

RAW = "raw transfer (ZRANGE + HGETALL, unbounded)"


def bounded_ratios(result: CaseResult, label: object) -> dict[str, float]:
    """Where `snapshot()`'s time goes at one size: the bounded reads against the unbounded
    ones (nothing decoded by either), and the rows against the bounded reads."""
    label = f"{label:,}" if isinstance(label, int) else label
    snap = result.measure(f"snapshot() @ {label}").median
    bounded = result.measure(f"{BOUNDED} @ {label}").median
    raw = result.measure(f"{RAW} @ {label}").median
    return {
        "bounded transfer / raw": round(bounded / raw, 2),
        "snapshot / bounded transfer": round(snap / bounded, 2),
    }


def _nothing() -> None:
    return None


def _median(result: CaseResult, name: str) -> float:
    m = result.measure(name)
    return m.median * (1_000 if m.unit == "ms" else 1)  # in us


def case_fleets(server: BenchServer, sizes: Any) -> CaseResult:
    """The fleet sizes of issue 11, every read and prune, with the longest command."""
    fleets = {f.key: f for f in sizes.fleets}
    result = CaseResult("fleets", "9. reads and prune at fleet scale, with the longest command")
    client = server.client()
    scan_client = server.client(db=1)
    try:
        # 1,000,000 over 100 groups, with the raw transfer and the SCAN design beside it.
        big = fleets["1m"]
        client.flushall()
        registry = RedisPresenceRegistry(client, prefix="fleet", max_future_ms=None)
        before = used_memory(client)
        bulk_write(client, registry.plans.keys, fleet_members(big), NOW_NS)
        result.facts[f"memory per consumer @ {big.label}"] = round(
            (used_memory(client) - before) / big.consumers, 1
        )
        raw = RawPresence(client, "fleet")
        scan = ScanDesign(scan_client)
        scan.write(
            [
                (q, g, name, lease)
                for (q, g), cs in fleet_members(big).items()
                for name, lease in cs
            ],
            NOW_NS,
        )
        extra: dict[str, Callable[[], object]] = {
            RAW: raw.transfer,
            BOUNDED: raw.bounded_transfer,
            "SCAN + MGET design": lambda: scan.snapshot(NOW_NS, TTL_MS),
        }
        measure_fleet(result, big, registry, [client], extra)
        _iter_memory(result, registry, big)
        scan_client.flushdb()
        # The probe group alone, in a store of its own (another prefix of the same server).
        alone = RedisPresenceRegistry(client, prefix="alone", max_future_ms=None)
        bulk_write(client, alone.plans.keys, {PROBE: fleet_members(big)[PROBE]}, NOW_NS)
        q, g = PROBE
        pair: dict[str, Callable[[], object]] = {
            "filtered @ big": lambda: registry.snapshot(
                now_ns=NOW_NS, ttl_ms=TTL_MS, queue=q, group=g
            ),
            "filtered @ alone": lambda: alone.snapshot(
                now_ns=NOW_NS, ttl_ms=TTL_MS, queue=q, group=g
            ),
        }
        filtered = interleaved(pair, 200)
        result.measures.append(
            Measure(
                "snapshot(queue=, group=) of the same group, alone in its store",
                "us",
                filtered["filtered @ alone"],
                "call",
                PROBE_SIZE,
            )
        )
        result.measures.append(
            Measure(
                f"snapshot(queue=, group=) of that group @ {big.label} (paired)",
                "us",
                filtered["filtered @ big"],
                "call",
                big.consumers,
            )
        )
        client.flushall()

        # 10,000 over 100 groups: the baseline of prune.
        small = fleets["10k"]
        registry = RedisPresenceRegistry(client, prefix="fleet", max_future_ms=None)
        bulk_write(client, registry.plans.keys, fleet_members(small), NOW_NS)
        measure_fleet(result, small, registry, [client])
        client.flushall()

        # 200,000 over 100,000 groups.
        many = fleets["200k-100k"]
        before = used_memory(client)
        bulk_write(client, registry.plans.keys, fleet_members(many), NOW_NS)
        result.facts[f"memory per consumer @ {many.label}"] = round(
            (used_memory(client) - before) / many.consumers, 1
        )
        measure_fleet(result, many, registry, [client])
        client.flushall()

        # 100,000 on a cluster of three masters.
        clustered = fleets["cluster-100k"]
        why = _on_cluster(result, server, clustered)
        if why:
            result.notes.append(f"cluster fleet not measured: {why}")
        _ratios(result, fleets)
    finally:
        client.flushall()
        client.close()
        scan_client.close()
    return result


ITER_MEMORY_MB = 85.0
"""Issue 33, item 6: `iter_snapshot()` of 1,000,000 consumers holds no more client memory
than the issue measured (85 MB)."""


def _iter_memory(result: CaseResult, registry: RedisPresenceRegistry, fleet: Fleet) -> None:
    """The peak client memory (`tracemalloc`) of one `iter_snapshot()` of `fleet`, measured
    apart from the timed rounds (tracing slows every allocation)."""
    gc.collect()
    tracemalloc.start()
    try:
        rows = sum(1 for _ in registry.iter_snapshot(now_ns=NOW_NS, ttl_ms=TTL_MS))
        peak = tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()
    result.facts[f"iter_snapshot() peak client memory @ {fleet.label}"] = {
        "MB": round(peak, 1),
        "rows": rows,
    }
    result.checks.append(
        Check(
            f"iter_snapshot() peak client memory @ {fleet.label} (MB)",
            peak,
            "<=",
            ITER_MEMORY_MB,
            "tracemalloc peak of one iter_snapshot(), version 2 values (issue 33, item 6)",
        )
    )


def _ratios(result: CaseResult, fleets: dict[str, Fleet]) -> None:
    big, small, many = fleets["1m"], fleets["10k"], fleets["200k-100k"]
    snap = _median(result, f"snapshot() @ {big.label}")
    raw = _median(result, f"{RAW} @ {big.label}")
    result.checks.append(
        Check(
            f"snapshot() / raw transfer @ {big.label}",
            snap / raw,
            "<=",
            2.0,
            "snapshot() median / raw transfer median, version 2 values (issue 33, item 6)",
        )
    )
    result.facts[f"SCAN + MGET design / snapshot() @ {big.label}"] = round(
        _median(result, f"SCAN + MGET design @ {big.label}") / snap, 2
    )
    result.facts[f"ratios @ {big.label}"] = bounded_ratios(result, big.label)
    result.facts[f"iter_snapshot() / snapshot() @ {big.label}"] = round(
        _median(result, f"iter_snapshot() @ {big.label}") / snap, 2
    )
    paired = _median(result, f"snapshot(queue=, group=) of that group @ {big.label} (paired)")
    alone = _median(result, "snapshot(queue=, group=) of the same group, alone in its store")
    result.checks.append(
        Check(
            f"filtered snapshot of one group of {PROBE_SIZE} @ {big.label} / alone",
            paired / alone,
            "<=",
            2.0,
            "the same one-group read in the big store / in a store holding only that group",
        )
    )
    per_group_many = _median(result, f"count_active_by_group() @ {many.label}") / (many.groups + 1)
    per_group_few = _median(result, f"count_active_by_group() @ {big.label}") / (big.groups + 1)
    result.checks.append(
        Check(
            f"counts per group visited @ {many.groups:,} groups / @ {big.groups} groups",
            per_group_many / per_group_few,
            "<=",
            2.0,
            "count_active_by_group() median / groups, at each size",
        )
    )
    name = f"prune_expired() of {EXPIRED:,} expired"
    result.checks.append(
        Check(
            f"prune of {EXPIRED:,} @ {big.consumers:,} / @ {small.consumers:,}",
            _median(result, f"{name} @ {big.label}") / _median(result, f"{name} @ {small.label}"),
            "<=",
            2.0,
            f"the same {EXPIRED:,} removed from both stores (100 groups each)",
        )
    )


def _on_cluster(result: CaseResult, server: BenchServer, fleet: Fleet) -> str | None:
    """Start a three-master cluster, write the fleet with heartbeat_many, measure it."""
    import shutil
    import subprocess

    cli = shutil.which("redis-cli")
    if cli is None:
        return "redis-cli is not on PATH"
    with tempfile.TemporaryDirectory(prefix="redis-presence-bench-cluster-") as tmp:
        nodes: list[LocalServer] = []
        try:
            for i in range(3):
                node_dir = Path(tmp) / f"node{i}"
                node_dir.mkdir()
                node = LocalServer(
                    server.binary,
                    dir=node_dir,
                    options={
                        **NO_PERSISTENCE,
                        "--loglevel": "warning",
                        "--cluster-enabled": "yes",
                        "--cluster-config-file": "nodes.conf",
                    },
                    pick_port=lambda: free_port(also_free=(10_000,)),
                    detach=True,
                    stop_with_parent=True,
                )
                nodes.append(node.start())
            addresses = [f"{n.host}:{n.port}" for n in nodes]
            done = subprocess.run(
                [
                    cli,
                    "--cluster",
                    "create",
                    *addresses,
                    "--cluster-replicas",
                    "0",
                    "--cluster-yes",
                ],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=60,
                check=False,
            )
            if done.returncode != 0:
                return f"redis-cli --cluster create failed: {done.stdout[-300:]!r}"
            cluster = _wait_cluster(nodes)
            try:
                registry = RedisPresenceRegistry(cluster, prefix="fleet", max_future_ms=None)
                beats = [
                    (q, g, name, lease)
                    for (q, g), cs in fleet_members(fleet).items()
                    for name, lease in cs
                ]
                node_clients = [n.client() for n in nodes]
                before = sum(used_memory(c) for c in node_clients)
                for start in range(0, len(beats), 5_000):
                    registry.heartbeat_many(beats[start : start + 5_000], now_ns=NOW_NS)
                result.facts[f"memory per consumer @ {fleet.label}"] = round(
                    (sum(used_memory(c) for c in node_clients) - before) / fleet.consumers, 1
                )
                measure_fleet(result, fleet, registry, node_clients)
                for c in node_clients:
                    c.close()
            finally:
                cluster.close()
        except (LocalServerError, redis.RedisError, subprocess.TimeoutExpired) as exc:
            return f"{type(exc).__name__}: {exc}"
        finally:
            for node in reversed(nodes):
                node.stop()
    return None


def _wait_cluster(nodes: Sequence[LocalServer]) -> redis.cluster.RedisCluster:
    """A cluster client once every node says the cluster is ok (polled, with a deadline)."""

    def ok() -> bool:
        for node in nodes:
            with node.client() as c:
                if c.cluster("INFO").get("cluster_state") != "ok":
                    return False
        return True

    poll(ok, timeout_s=60, what="the benchmark cluster to be ok")
    return redis.cluster.RedisCluster(
        startup_nodes=[
            redis.cluster.ClusterNode(n.host, n.port)  # type: ignore[no-untyped-call]
            for n in nodes
        ]
    )


__all__ = ["FULL_FLEETS", "QUICK_FLEETS", "Fleet", "case_fleets"]

"""Cases 4 to 7, the store as the fleet grows: reading every consumer (`snapshot()` against
raw transfer, the SCAN + MGET design and the in-process registry), counting active
consumers, pruning expired ones, and Redis memory per consumer.

Each takes the running `BenchServer` and the `Sizes` of the run and returns a `CaseResult`
(`benchmarks.cases` lists them); variants are interleaved round by round.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Sized
from functools import partial

import redis

from redis_presence import RedisPresenceRegistry
from redis_presence.keys import Keyspace

from .fleet import (
    GROUPS,
    HOT,
    NOW_NS,
    PREFIX,
    TTL_MS,
    Beat,
    RawPresence,
    ScanDesign,
    bench_registry,
    fleet,
    memory_fleet,
    write_fleet,
)
from .fleets import BOUNDED, bounded_ratios
from .server import BenchServer
from .sizes import Sizes
from .stats import CaseResult, Check, Measure, interleaved, server_usec, used_memory

# -- 4 ------------------------------------------------------------------------------------


def case_snapshot(server: BenchServer, sizes: Sizes) -> CaseResult:
    """snapshot() against raw transfer, the SCAN + MGET design and the in-process registry."""
    result = CaseResult("snapshot", f"4. snapshot() at fleet scale ({GROUPS} groups)")
    client = server.client()
    scan_client = server.client(db=1)
    try:
        registry = bench_registry(client)
        raw = RawPresence(client, PREFIX)
        scan = ScanDesign(scan_client)
        naive = ScanDesign(scan_client, scan_count=10)
        for n, rounds in zip(sizes.snapshot_sizes, sizes.snapshot_rounds, strict=True):
            client.flushall()
            beats = fleet(n)
            write_fleet(registry, beats, NOW_NS)
            scan.write(beats, NOW_NS)
            local = memory_fleet(beats, NOW_NS)
            variants: dict[str, Callable[[], Sized]] = {
                "snapshot()": lambda: registry.snapshot(now_ns=NOW_NS, ttl_ms=TTL_MS),
                "raw transfer (ZRANGE + HGETALL, unbounded)": raw.transfer,
                "SCAN + MGET design": lambda: scan.snapshot(NOW_NS, TTL_MS),
                "in-process registry": partial(local.snapshot, now_ns=NOW_NS, ttl_ms=TTL_MS),
                "info: SCAN design with COUNT 10 (default)": partial(
                    naive.snapshot, NOW_NS, TTL_MS
                ),
                "diag: raw transfer in one MULTI/EXEC (one command for the server)": partial(
                    raw.transfer, transaction=True
                ),
                BOUNDED: raw.bounded_transfer,
            }
            counts = {name: len(fn()) for name, fn in variants.items()}  # warm-up, and a check
            expected = dict.fromkeys(variants, n)
            expected["raw transfer (ZRANGE + HGETALL, unbounded)"] = GROUPS
            expected["diag: raw transfer in one MULTI/EXEC (one command for the server)"] = GROUPS
            expected[BOUNDED] = GROUPS
            if counts != expected:
                raise AssertionError(f"variants disagree on the fleet: {counts} != {expected}")
            usec: dict[str, float] = {}
            with server_usec(client, usec):
                samples = interleaved(dict(variants), rounds, collect=True)
            for name, values in samples.items():
                result.measures.append(
                    Measure(f"{name} @ {n:,}", "ms", [v / 1000 for v in values], "read", n)
                )
            result.facts[f"server_usec_per_call @ {n:,}"] = {
                k: round(v, 1) for k, v in sorted(usec.items())
            }
        big = sizes.snapshot_sizes[-1]
        _shared_keyspace(result, [client, scan_client], variants, sizes, big)
        snap = result.measure(f"snapshot() @ {big:,}").median
        raw_med = result.measure(f"raw transfer (ZRANGE + HGETALL, unbounded) @ {big:,}").median
        scan_med = result.measure(f"SCAN + MGET design @ {big:,}").median
        result.checks.append(
            Check(
                f"snapshot / raw transfer @ {big:,}",
                snap / raw_med,
                "<=",
                1.5,
                "snapshot median / raw transfer median",
            )
        )
        result.checks.append(
            Check(
                f"SCAN + MGET design (COUNT 10,000) / snapshot() @ {big:,}",
                scan_med / snap,
                ">=",
                2.0,
                "the fair SCAN design's median / snapshot() median",
            )
        )
        other = sizes.other_keys
        shared = (
            result.measure(
                f"info: SCAN + MGET design with {other:,} other keys in the database @ {big:,}"
            ).median
            / result.measure(
                f"info: snapshot() with {other:,} other keys in the database @ {big:,}"
            ).median
        )
        result.checks.append(
            Check(
                f"SCAN design / snapshot(), {other:,} other keys in the database @ {big:,}",
                shared,
                ">=",
                4.0,
                "both medians in a keyspace shared with a broker's keys",
            )
        )
        result.facts[f"SCAN design with COUNT 10 (redis-py's default) / snapshot() @ {big:,}"] = (
            round(
                result.measure(f"info: SCAN design with COUNT 10 (default) @ {big:,}").median
                / snap,
                2,
            )
        )
        for n in sizes.snapshot_sizes:
            result.facts[f"ratios @ {n:,}"] = {
                "snapshot / raw": round(
                    result.measure(f"snapshot() @ {n:,}").median
                    / result.measure(f"raw transfer (ZRANGE + HGETALL, unbounded) @ {n:,}").median,
                    2,
                ),
                "ceiling of any snapshot: SCAN / raw": round(
                    result.measure(f"SCAN + MGET design @ {n:,}").median
                    / result.measure(f"raw transfer (ZRANGE + HGETALL, unbounded) @ {n:,}").median,
                    2,
                ),
                "SCAN / snapshot": round(
                    result.measure(f"SCAN + MGET design @ {n:,}").median
                    / result.measure(f"snapshot() @ {n:,}").median,
                    2,
                ),
                **bounded_ratios(result, n),
            }
    finally:
        client.flushall()
        client.close()
        scan_client.close()
    return result


# The other keys: what a message broker keeps in the same Redis (one small string a message).
FILL_OTHER_KEYS = """
for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do
  redis.call('SET', 'broker:message:' .. i, 'payload')
end
return 0
"""


def _shared_keyspace(
    result: CaseResult,
    clients: list[redis.Redis],
    variants: dict[str, Callable[[], Sized]],
    sizes: Sizes,
    n: int,
) -> None:
    """``info:`` rows for the largest fleet when each database also holds
    `sizes.other_keys` unrelated keys, as a broker's Redis does: `snapshot()` reads only the
    groups its index lists, and the SCAN design walks every key of its database."""
    other = sizes.other_keys
    for client in clients:
        fill = client.register_script(FILL_OTHER_KEYS)
        for start in range(1, other + 1, 100_000):  # 100,000 keys a call (about 0.1 s)
            fill(args=[start, min(start + 99_999, other)])
    pair: dict[str, Callable[[], object]] = {
        name: variants[name] for name in ("snapshot()", "SCAN + MGET design")
    }
    rounds = sizes.snapshot_rounds[-1]
    samples = interleaved(pair, rounds, collect=True)
    for name, values in samples.items():
        result.measures.append(
            Measure(
                f"info: {name} with {other:,} other keys in the database @ {n:,}",
                "ms",
                [v / 1000 for v in values],
                "read",
                n,
            )
        )


# -- 5 ------------------------------------------------------------------------------------


def case_counts(server: BenchServer, sizes: Sizes) -> CaseResult:
    """count_active_by_group() on a small and a large fleet over the same groups."""
    small, large = sizes.count_sizes
    result = CaseResult("counts", f"5. count_active_by_group(), {small:,} vs {large:,} consumers")
    client = server.client()
    try:
        client.flushall()
        registries = {}
        for n in (small, large):
            registries[n] = bench_registry(client, f"{PREFIX}-{n}")
            write_fleet(registries[n], fleet(n), NOW_NS)
        variants: dict[str, Callable[[], object]] = {
            f"count_active_by_group @ {n:,}": (
                lambda r=r: r.count_active_by_group(now_ns=NOW_NS, ttl_ms=TTL_MS)  # type: ignore[misc]
            )
            for n, r in registries.items()
        }
        for name, fn in variants.items():
            got = fn()
            if not isinstance(got, dict) or len(got) != GROUPS:
                raise AssertionError(f"{name} counted {got!r:.200}")
        interleaved(variants, max(5, sizes.count_rounds // 10))
        usec: dict[str, float] = {}
        with server_usec(client, usec):
            samples = interleaved(variants, sizes.count_rounds)
        for (name, values), n in zip(samples.items(), (small, large), strict=True):
            result.measures.append(Measure(name, "us", values, "call", n))
        ratio = (
            result.measure(f"count_active_by_group @ {large:,}").median
            / result.measure(f"count_active_by_group @ {small:,}").median
        )
        result.checks.append(
            Check(
                f"counts @ {large:,} / @ {small:,}",
                ratio,
                "<=",
                2.0,
                "median at the large fleet / median at the small fleet",
            )
        )
        result.facts["server_usec_per_call"] = {k: round(v, 1) for k, v in sorted(usec.items())}
    finally:
        client.flushall()
        client.close()
    return result


# -- 6 ------------------------------------------------------------------------------------


def case_prune(server: BenchServer, sizes: Sizes) -> CaseResult:
    """prune_expired() removing the same number of consumers from a small and a large store."""
    small, large = sizes.prune_sizes
    removed = sizes.prune_removed
    result = CaseResult(
        "prune", f"6. prune_expired() removing {removed:,}, store of {small:,} vs {large:,}"
    )
    client = server.client()
    old_ns = NOW_NS - 10 * TTL_MS * 1_000_000
    try:
        client.flushall()
        registries: dict[int, RedisPresenceRegistry] = {}
        doomed: dict[int, list[Beat]] = {}
        for n in (small, large):
            registries[n] = bench_registry(client, f"{PREFIX}-{n}")
            write_fleet(registries[n], fleet(n - removed), NOW_NS)
            doomed[n] = fleet(removed, tag="-expired")
        result.facts["encodings (hb zset, c hash) of one group"] = {
            f"{n:,}": "/".join(
                str(client.object("encoding", f"{PREFIX}-{n}:{{queue-00}}:group-00:{kind}"))
                .removeprefix("b'")
                .removesuffix("'")
                for kind in ("hb", "c")
            )
            for n in (small, large)
        }
        names = {f"prune_expired @ {n:,}": n for n in (small, large)}
        pruned: list[int] = []

        def restock(name: str) -> None:
            n = names[name]
            registries[n].heartbeat_many(doomed[n], now_ns=old_ns)

        variants: dict[str, Callable[[], object]] = {
            name: (
                lambda n=n: pruned.append(  # type: ignore[misc]
                    registries[n].prune_expired(now_ns=NOW_NS, ttl_ms=TTL_MS)
                )
            )
            for name, n in names.items()
        }
        interleaved(variants, 2, before=restock)
        pruned.clear()
        samples = interleaved(variants, sizes.prune_rounds, before=restock)
        if set(pruned) != {removed}:
            raise AssertionError(f"prune_expired removed {sorted(set(pruned))}, not {removed}")
        for (name, values), n in zip(samples.items(), (small, large), strict=True):
            result.measures.append(Measure(name, "ms", [v / 1000 for v in values], "call", n))
        ratio = (
            result.measure(f"prune_expired @ {large:,}").median
            / result.measure(f"prune_expired @ {small:,}").median
        )
        result.checks.append(
            Check(
                f"prune @ {large:,} / @ {small:,}",
                ratio,
                "<=",
                2.0,
                f"same {removed:,} removed; cost must not follow the {large // small}x "
                "larger store",
            )
        )
    finally:
        client.flushall()
        client.close()
    return result


# -- 7 ------------------------------------------------------------------------------------


def case_memory(server: BenchServer, sizes: Sizes) -> CaseResult:
    """Redis memory per tracked consumer, against one key per consumer with a TTL.

    Measured at each size because Redis stores a small group compactly (listpack, up to
    128 consumers per group by default) and a large one in a skiplist and a hash table.
    """
    result = CaseResult("memory", "7. Redis memory per consumer")
    client = server.client()
    try:
        registry = bench_registry(client)
        registry.heartbeat(*HOT)  # the scripts are cached before the first reading
        for n in sizes.memory_sizes:
            beats = fleet(n)

            client.flushall()
            gc.collect()
            before = used_memory(client)
            write_fleet(registry, beats, NOW_NS)
            presence = (used_memory(client) - before) / n
            encoding = "/".join(
                str(client.object("encoding", f"{PREFIX}:{{queue-00}}:group-00:{kind}"))
                .removeprefix("b'")
                .removesuffix("'")
                for kind in ("hb", "c")
            )
            client.flushall()
            gc.collect()
            before = used_memory(client)
            ScanDesign(client).write(beats, NOW_NS)
            scan = (used_memory(client) - before) / n
            result.facts[f"@ {n:,} ({n // GROUPS:,} per group, {encoding})"] = {
                "redis-presence B/consumer": round(presence, 1),
                "SCAN design B/consumer": round(scan, 1),
                "presence / SCAN design": round(presence / scan, 2),
            }
            result.measures.append(
                Measure(f"redis-presence @ {n:,}", "B", [presence], "consumer", n)
            )
            result.measures.append(
                Measure(f"SCAN design (key + TTL) @ {n:,}", "B", [scan], "consumer", n)
            )
        _memory_one_per_queue(result, client, registry, max(sizes.memory_sizes))
    finally:
        client.flushall()
        client.close()
    return result


MEMORY_TARGET_B = 1024
"""Issue 33, item 5: at most 1 KB per consumer at 100,000 queues of one consumer each."""

BREAKDOWN_SAMPLE = 200
"""Queues whose keys `MEMORY USAGE` weighs for the breakdown of the one-per-queue fleet."""


def _memory_one_per_queue(
    result: CaseResult, client: redis.Redis, registry: RedisPresenceRegistry, n: int
) -> None:
    """`n` queues of one consumer each (the shape where per-queue overhead is all there is):
    bytes per consumer against the target, and where they go, by kind of key (``MEMORY
    USAGE`` of every key of `BREAKDOWN_SAMPLE` queues, and the fleet indexes' share)."""
    beats = [
        (f"tenant-{i:07d}", "workers", f"broker-{i % 7:02d}.worker-{i:07d}", 1) for i in range(n)
    ]
    client.flushall()
    gc.collect()
    before = used_memory(client)
    write_fleet(registry, beats, NOW_NS)
    per = (used_memory(client) - before) / n
    label = f"@ {n:,} queues of one consumer"
    result.measures.append(Measure(f"redis-presence {label}", "B", [per], "consumer", n))
    result.checks.append(
        Check(
            f"Redis memory per consumer {label} (B)",
            per,
            "<=",
            MEMORY_TARGET_B,
            "used_memory after - before, / consumers (issue 33, item 5)",
        )
    )
    keys = Keyspace(PREFIX)
    shares: dict[str, float] = {}
    for queue, group, _, _ in beats[:BREAKDOWN_SAMPLE]:
        gk = keys.group(queue, group)
        for kind, key in (
            ("beats zset P:{Q}:G:hb", gk.hb),
            ("values hash P:{Q}:G:c", gk.data),
            ("event log stream P:{Q}:events", gk.events),
        ):
            shares[kind] = shares.get(kind, 0.0) + (client.memory_usage(key, samples=0) or 0)
    breakdown = {kind: round(total / BREAKDOWN_SAMPLE, 1) for kind, total in shares.items()}
    for kind, key in (
        ("index P:groups", keys.groups),
        ("index P:newest", keys.newest),
        ("index P:oldest", keys.oldest),
        ("event index P:events", keys.events),
    ):
        breakdown[kind] = round((client.memory_usage(key, samples=0) or 0) / n, 1)
    result.facts[f"B/consumer by key {label}"] = breakdown
    client.flushall()

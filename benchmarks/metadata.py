"""Case 12: metadata and progress (issue 14). What a plain `snapshot()` costs once every
consumer is described (nothing more: it reads no metadata), what `snapshot(with_meta=True)`
costs, the memory the reporter's default metadata takes per consumer, and what a beat with
progress costs against a plain one."""

from __future__ import annotations

import gc
from functools import partial
from typing import Any

from redis_presence import PresenceReporter, RedisPresenceRegistry

from .fleet import GROUPS, fleet, write_fleet
from .server import BenchServer
from .stats import CaseResult, Check, Measure, interleaved, used_memory

PREFIX = "bench"
HOT = ("queue-00", "group-00", "hot", 1)


def _describe_all(registry: RedisPresenceRegistry, beats: list[tuple[str, str, str, int]]) -> None:
    """Every consumer described with the reporter's default metadata (host, pid, version),
    written the way brokers write it: through a reporter's flushes."""
    with PresenceReporter(registry, interval_ms=3_600_000) as reporter:
        for start in range(0, len(beats), 5_000):
            for queue, group, consumer, lease in beats[start : start + 5_000]:
                reporter.beat(queue, group, consumer, lease)
            reporter.flush()


def case_metadata(server: BenchServer, sizes: Any) -> CaseResult:
    """Plain and metadata snapshots of a described fleet, memory per consumer of the
    default metadata, and a heartbeat with progress against a plain one."""
    result = CaseResult("metadata", "12. Metadata and progress: what describing costs")
    client = server.client()
    try:
        registry = RedisPresenceRegistry(client, prefix=PREFIX, max_future_ms=None)
        plain = RedisPresenceRegistry(client, prefix=f"{PREFIX}-plain", max_future_ms=None)
        n = max(sizes.snapshot_sizes)
        rounds = max(5, min(sizes.snapshot_rounds))
        beats = fleet(n)
        client.flushall()
        # The same fleet twice, under two prefixes: one described, one not, read in turn.
        # Written at the server's clock, so that the reporter's beats find every consumer
        # active and log no event (the memory measured is the metadata's alone).
        now = registry.clock_ns()
        write_fleet(plain, beats, now)
        write_fleet(registry, beats, now)
        gc.collect()
        before = used_memory(client)
        _describe_all(registry, beats)
        per_consumer = (used_memory(client) - before) / n
        write_fleet(registry, beats, now)  # as the plain fleet: the reporter beat it later
        plain_rows = plain.snapshot(now_ns=now)
        described = interleaved(
            {
                "snapshot()": partial(registry.snapshot, now_ns=now),
                "snapshot(with_meta=True)": partial(registry.snapshot, now_ns=now, with_meta=True),
                "undescribed": partial(plain.snapshot, now_ns=now),
            },
            rounds,
            collect=True,
        )
        undescribed = described["undescribed"]
        rows = registry.snapshot(now_ns=now, with_meta=True)
        if len(rows) != len(plain_rows) or not all(row.meta for row in rows):
            raise AssertionError("every consumer should carry the reporter's metadata")

        for name, values in (
            ("snapshot(), no metadata stored", undescribed),
            ("snapshot(), every consumer described", described["snapshot()"]),
            ("snapshot(with_meta=True)", described["snapshot(with_meta=True)"]),
        ):
            result.measures.append(
                Measure(f"{name} @ {n:,}", "ms", [v / 1000 for v in values], "snapshot", n)
            )
        base = result.measure(f"snapshot(), no metadata stored @ {n:,}").median
        result.checks.append(
            Check(
                f"snapshot() with metadata stored / without @ {n:,}",
                result.measure(f"snapshot(), every consumer described @ {n:,}").median / base,
                "<=",
                1.05,
                "plain snapshot() median on the described fleet / on the same fleet before",
            )
        )
        result.facts[f"snapshot(with_meta=True) / snapshot() @ {n:,}"] = {
            "ratio": round(result.measure(f"snapshot(with_meta=True) @ {n:,}").median / base, 2)
        }
        result.facts["reporter's default metadata (host, pid, version)"] = {
            "B per consumer": round(per_consumer, 1)
        }
        result.measures.append(Measure("default metadata", "B", [per_consumer], "consumer", n))

        # One beat with progress (heartbeat_many.lua) against a plain one (heartbeat.lua).
        client.flushall()
        registry.heartbeat(*HOT)
        registry.heartbeat(*HOT, progressed=True)  # both scripts are cached
        calls = max(200, sizes.latency_calls // 5)
        beats_us = interleaved(
            {
                "heartbeat": partial(registry.heartbeat, *HOT),
                "heartbeat(progressed=True)": partial(registry.heartbeat, *HOT, progressed=True),
                "PING": client.ping,
            },
            calls,
        )
        for name, values in beats_us.items():
            result.measures.append(Measure(name, "us", values))
        result.facts["heartbeat(progressed=True) / heartbeat"] = {
            "ratio": round(
                result.measure("heartbeat(progressed=True)").median
                / result.measure("heartbeat").median,
                2,
            )
        }
        result.notes.append(
            f"{n:,} consumers in {GROUPS} groups, described by a PresenceReporter with its "
            "default metadata; reads at an explicit now_ns; beats on a pooled client."
        )
    finally:
        client.flushall()
        client.close()
    return result

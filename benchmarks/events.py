"""Case 11: events (issue 12). What one second of changes costs a reader, against a full
snapshot, at fleet scale; what `watch`'s steady-state refresh costs; what the event log
keeps in memory per queue at the default retention."""

from __future__ import annotations

import gc
from typing import Any

from redis_presence import RedisPresenceRegistry
from redis_presence.cli.frames import EventWatcher
from redis_presence.events import DEFAULT_EVENTS_KEPT

from .fleet import GROUPS, NOW_NS, TTL_MS, fleet, write_fleet
from .server import BenchServer
from .stats import CaseResult, Check, Measure, interleaved

PREFIX = "bench"
TRANSITIONS_PER_S = 10
S = 1_000_000_000


def case_events(server: BenchServer, sizes: Any) -> CaseResult:
    """`changes` over one second with 10 transitions, against one `snapshot()`; the watch
    refresh on top of it; the event log's memory per queue."""
    result = CaseResult("events", "11. Events: one second of changes against a snapshot")
    client = server.client()
    try:
        registry = RedisPresenceRegistry(client, prefix=PREFIX)
        n = max(sizes.snapshot_sizes)
        rounds = max(5, min(sizes.snapshot_rounds))
        client.flushall()
        registry.set_ttl(TTL_MS)
        beats = fleet(n)
        write_fleet(registry, beats, NOW_NS)
        _, cursor = registry.changes(now_ns=NOW_NS)
        # One second of the fleet's life: half the transitions join, half leave (each
        # logged by its own script call), at instants spread over the second.
        step = S // TRANSITIONS_PER_S
        for i in range(TRANSITIONS_PER_S):
            at = NOW_NS + (i + 1) * step
            if i % 2 == 0:
                registry.heartbeat("queue-00", "group-00", f"newcomer-{i}", now_ns=at)
            else:
                queue, group, consumer, _ = beats[i]
                registry.deregister(queue, group, consumer, now_ns=at)
        later = NOW_NS + S
        events, _ = registry.changes(cursor, now_ns=later)
        if len(events) != TRANSITIONS_PER_S:
            raise AssertionError(f"expected {TRANSITIONS_PER_S} events, got {events}")
        rows = registry.snapshot(now_ns=later)

        def refresh() -> int:
            watcher = watchers[0]
            changed, _ = registry.changes(cursor, now_ns=later)
            watcher.apply(changed, later)
            return len(changed)

        watchers = [EventWatcher()]
        watchers[0].start(rows, NOW_NS)
        variants = {
            "snapshot()": lambda: registry.snapshot(now_ns=later),
            "changes() over 1 s": lambda: registry.changes(cursor, now_ns=later),
            "watch refresh (changes + apply)": refresh,
        }
        samples = interleaved(dict(variants), rounds, collect=True)
        for name, values in samples.items():
            result.measures.append(
                Measure(f"{name} @ {n:,}", "ms", [v / 1000 for v in values], "call", n)
            )
        snap = result.measure(f"snapshot() @ {n:,}").median
        for name in ("changes() over 1 s", "watch refresh (changes + apply)"):
            result.checks.append(
                Check(
                    f"{name} / snapshot() @ {n:,}",
                    result.measure(f"{name} @ {n:,}").median / snap,
                    "<=",
                    0.02,
                    f"{name} median / snapshot() median, {TRANSITIONS_PER_S} transitions",
                )
            )
        frame_ms = interleaved({"frame": watchers[0].frame}, rounds)["frame"]
        result.facts[f"info: watch frame layout in Python @ {n:,} (every row, no Redis)"] = {
            "median ms": round(sorted(frame_ms)[len(frame_ms) // 2] / 1000, 1)
        }

        # The log of one queue at the default retention: far more entries than it keeps.
        client.flushall()
        gc.collect()
        for i in range(DEFAULT_EVENTS_KEPT + 2_000):
            registry.heartbeat("queue-00", "group-00", f"c{i}", now_ns=NOW_NS)
        key = registry.plans.keys.queue_events("queue-00")
        length = int(client.xlen(key))
        usage = int(client.memory_usage(key, samples=0) or 0)
        result.facts[f"event log of one queue, default retention ({DEFAULT_EVENTS_KEPT:,})"] = {
            "entries kept": length,
            "bytes": usage,
            "bytes per entry": round(usage / max(1, length), 1),
        }
        result.measures.append(Measure("event log per queue", "B", [usage], "queue", length))
        result.notes.append(
            f"{n:,} consumers in {GROUPS} groups; {TRANSITIONS_PER_S} transitions in the second "
            "(joins and deregisters, each its own script call); every read at an explicit "
            "now_ns, the changes always from the same cursor."
        )
    finally:
        client.flushall()
        client.close()
    return result

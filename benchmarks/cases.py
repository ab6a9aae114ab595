"""The comparisons of issue 6 (and the CLI's startup, in `startup.py`), each measured side by side.

Every case takes the running `BenchServer` and the `Sizes` of the run, and returns a
`CaseResult`: raw samples per variant (median and p99 are derived), the targets as
ratios, and plain facts (command counts, bytes). Variants of one case are interleaved
round by round, so the noise of a shared machine hits them alike.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import itertools
import time
from collections.abc import Awaitable, Callable, Sized
from dataclasses import dataclass
from functools import partial
from typing import Any

import redis
import redis.asyncio as aredis
from redis.utils import HIREDIS_AVAILABLE

from redis_presence import AsyncRedisPresenceRegistry, RedisPresenceRegistry
from redis_presence.scripts import source

from .fleet import (
    GROUPS,
    NOW_NS,
    TTL_MS,
    Beat,
    RawPresence,
    ScanDesign,
    fleet,
    memory_fleet,
    write_fleet,
)
from .fleets import BOUNDED, FULL_FLEETS, QUICK_FLEETS, Fleet, bounded_ratios, case_fleets
from .integrations import case_integrations
from .server import HOST, BenchServer
from .startup import case_startup
from .stats import (
    CaseResult,
    Check,
    Measure,
    ainterleaved,
    command_calls,
    delta,
    interleaved,
    server_usec,
    used_memory,
)

PREFIX = "bench"
HOT: Beat = ("queue-00", "group-00", "broker-00.worker-0000000", 3)
"""The consumer whose heartbeat the latency case refreshes over and over."""


@dataclass(frozen=True)
class Sizes:
    """How big and how long each case runs; `QUICK` keeps the whole run under a minute."""

    latency_calls: int
    """Single-call samples per variant for the heartbeat-vs-PING case."""
    batch_beats: int
    batch_rounds: int
    coalesce_beats: int
    coalesce_consumers: int
    coalesce_rounds: int
    snapshot_sizes: tuple[int, ...]
    snapshot_rounds: tuple[int, ...]
    count_sizes: tuple[int, int]
    count_rounds: int
    prune_sizes: tuple[int, int]
    prune_removed: int
    prune_rounds: int
    memory_sizes: tuple[int, ...]
    other_keys: int
    """Unrelated keys (a broker's own data) beside the largest snapshot fleet, for the
    ``info:`` rows that show what a keyspace scan pays for them."""
    fleets: tuple[Fleet, ...] = FULL_FLEETS
    """The fleets of case 9 (`benchmarks.fleets`)."""


FULL = Sizes(
    latency_calls=5_000,
    batch_beats=1_000,
    batch_rounds=200,
    coalesce_beats=1_000_000,
    coalesce_consumers=1_000,
    coalesce_rounds=20,
    snapshot_sizes=(1_000, 10_000, 100_000),
    snapshot_rounds=(50, 20, 15),
    count_sizes=(1_000, 100_000),
    count_rounds=300,
    prune_sizes=(10_000, 100_000),
    prune_removed=1_000,
    prune_rounds=30,
    memory_sizes=(10_000, 100_000),
    other_keys=1_000_000,
)

QUICK = Sizes(
    latency_calls=1_000,
    batch_beats=1_000,
    batch_rounds=30,
    coalesce_beats=100_000,
    coalesce_consumers=1_000,
    coalesce_rounds=10,
    snapshot_sizes=(1_000, 10_000),
    snapshot_rounds=(10, 5),
    count_sizes=(1_000, 100_000),
    count_rounds=50,
    prune_sizes=(10_000, 100_000),
    prune_removed=1_000,
    prune_rounds=5,
    memory_sizes=(10_000,),
    other_keys=20_000,
    fleets=QUICK_FLEETS,
)


def load_reporter() -> tuple[Any, str | None]:
    """``PresenceReporter`` when the package has it yet, else ``(None, why)``."""
    try:
        module = importlib.import_module("redis_presence.reporter")
        return module.PresenceReporter, None
    except (ImportError, AttributeError) as exc:
        return None, f"redis_presence.reporter.PresenceReporter is not importable ({exc})"


def _registry(client: redis.Redis, prefix: str = PREFIX) -> RedisPresenceRegistry:
    return RedisPresenceRegistry(client, prefix=prefix)


class _StubClient:
    """Answers every command and script call at once: the package's Python cost without
    any I/O (and without redis-py packing the command)."""

    def __init__(self, real: redis.Redis) -> None:
        self._encoder = real.get_encoder()

    def get_encoder(self) -> Any:
        return self._encoder

    def execute_command(self, *args: Any, **options: Any) -> Any:
        return None if args[0] == "GET" else []  # no shared TTL stored; scripts answer []

    def pipeline(self, transaction: bool = False) -> Any:
        return _StubPipeline(self)


class _StubPipeline:
    """The stub's pipeline: every command answered as `_StubClient` answers it."""

    def __init__(self, client: _StubClient) -> None:
        self._client = client
        self._commands: list[tuple[Any, ...]] = []

    def execute_command(self, *args: Any, **options: Any) -> None:
        self._commands.append(args)

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        return [self._client.execute_command(*args) for args in self._commands]


# -- 1 ------------------------------------------------------------------------------------


def case_heartbeat(server: BenchServer, sizes: Sizes) -> CaseResult:
    """One heartbeat against a bare PING on the same connection, and what it sends.

    The ``diag:`` rows split the gap: an empty script with the same arguments (the cost of
    any script call of this shape), the same script and arguments sent by hand through
    ``execute_command``, and the package's Python path with the network taken away.
    """
    result = CaseResult("heartbeat", "1. single heartbeat vs PING (same connection)")
    client = server.client(single_connection_client=True)
    try:
        client.flushall()
        registry = _registry(client)
        q, g, c, lease = HOT
        registry.heartbeat(q, g, c, lease)  # loads the script, creates the keys

        # What one heartbeat sends: MONITOR tells client commands from the script's own.
        result.facts["commands_sent"] = _commands_sent(
            server, client, lambda: registry.heartbeat(*HOT)
        )
        before = command_calls(client)
        registry.heartbeat(*HOT)
        result.facts["commands_run_on_server"] = delta(command_calls(client), before)

        # Diagnostics: the same call by hand, an empty script with the same arguments, and
        # the package's Python path with the network taken away.
        raw = RawPresence(client, PREFIX)
        keys, args = raw.beat_args(*HOT, None)
        sha = client.script_load(source("heartbeat"))
        stub = RedisPresenceRegistry(_StubClient(client), prefix=PREFIX)
        sha_empty = client.script_load("return {}")
        send = client.execute_command
        unguarded = RedisPresenceRegistry(client, prefix=PREFIX, max_future_ms=None)
        pooled_client = server.client()  # redis.Redis() as most applications make it
        pooled = _registry(pooled_client)
        pooled.heartbeat(q, g, c, lease)
        clock = time.time_ns
        variants: dict[str, Callable[[], object]] = {
            "heartbeat": lambda: registry.heartbeat(q, g, c, lease),
            "PING": client.ping,
            "heartbeat, default pooled client": lambda: pooled.heartbeat(q, g, c, lease),
            "PING, default pooled client": pooled_client.ping,
            "diag: heartbeat at an explicit now_ns, clock guard on (the default)": lambda: (
                registry.heartbeat(q, g, c, lease, now_ns=clock())
            ),
            "diag: heartbeat at an explicit now_ns, no guard (max_future_ms=None)": lambda: (
                unguarded.heartbeat(q, g, c, lease, now_ns=clock())
            ),
            "diag: EVALSHA of an empty script, same arguments": partial(
                send, "EVALSHA", sha_empty, len(keys), *keys, *args
            ),
            "diag: EVALSHA by hand, same script and args": partial(
                send, "EVALSHA", sha, len(keys), *keys, *args
            ),
            "diag: heartbeat, Python only (no I/O)": lambda: stub.heartbeat(q, g, c, lease),
        }
        interleaved(variants, max(50, sizes.latency_calls // 20))  # warm-up
        usec: dict[str, float] = {}
        with server_usec(client, usec):
            samples = interleaved(variants, sizes.latency_calls)
        for name, values in samples.items():
            result.measures.append(Measure(name, "us", values))
        hb, ping = result.measure("heartbeat"), result.measure("PING")
        result.checks.append(
            Check(
                "heartbeat median / PING median",
                hb.median / ping.median,
                "<=",
                1.3,
                "heartbeat median / PING median",
            )
        )
        pooled_ratio = (
            result.measure("heartbeat, default pooled client").median
            / result.measure("PING, default pooled client").median
        )
        result.checks.append(
            Check(
                "heartbeat / PING, default pooled client",
                pooled_ratio,
                "<=",
                1.3,
                "both medians through one redis.Redis() with its connection pool",
            )
        )
        _asyncio_heartbeat(result, server, sizes.latency_calls)
        sent = result.facts["commands_sent"]
        result.checks.append(
            Check(
                "commands one heartbeat sends",
                float(sum(sent.values())),
                "<=",
                1.0,
                f"client commands seen by MONITOR: {sent}",
            )
        )
        result.facts["hiredis_parser"] = HIREDIS_AVAILABLE
        inside = sorted(set(result.facts["commands_run_on_server"]) - {"evalsha"})
        result.facts["server_usec_per_call"] = {
            "evalsha (every variant)": round(usec.get("evalsha", 0.0), 2),
            "ping": round(usec.get("ping", 0.0), 2),
            **{f"{name} (inside the script)": round(usec.get(name, 0.0), 2) for name in inside},
        }
        # Server-side cost of each script alone, over a fresh stretch of calls.
        result.facts["server_usec_per_evalsha"] = {
            "heartbeat.lua": _evalsha_usec(client, sha, keys, args, sizes.latency_calls),
            "empty script, same arguments": _evalsha_usec(
                client, sha_empty, keys, args, sizes.latency_calls
            ),
        }
        guarded = [*args]
        guarded[4] = str(time.time_ns())  # now_ns given: the guard reads TIME
        result.facts["server_usec_per_evalsha"]["heartbeat.lua at an explicit now_ns, guard on"] = (
            _evalsha_usec(client, sha, keys, guarded, sizes.latency_calls)
        )
        pooled_client.close()
    finally:
        client.close()
    return result


def _evalsha_usec(
    client: redis.Redis, sha: str, keys: list[str], args: list[str | int], calls: int
) -> float:
    usec: dict[str, float] = {}
    with server_usec(client, usec):
        for _ in range(calls):
            client.evalsha(sha, len(keys), *keys, *args)
    return round(usec.get("evalsha", 0.0), 2)


def _commands_sent(
    server: BenchServer, client: redis.Redis, action: Callable[[], object]
) -> dict[str, int]:
    """Commands that `client` (not a script) sent while `action` ran, seen through MONITOR.

    `client` then sends a marker (ECHO) on the same connection: everything before it is
    what `action` sent.
    """
    marker = f"redis-presence-bench-{time.monotonic_ns()}"
    seen: dict[str, int] = {}
    watcher = server.client()
    try:
        with watcher.monitor() as monitor:  # type: ignore[no-untyped-call]
            action()
            client.echo(marker)
            for event in monitor.listen():
                command = str(event["command"])
                if marker in command:
                    break
                if event.get("client_type") == "lua":
                    continue
                name = command.split(" ", 1)[0].upper()
                seen[name] = seen.get(name, 0) + 1
    finally:
        watcher.close()
    return seen


# -- 2 ------------------------------------------------------------------------------------


AsyncVariants = dict[str, Callable[[], Awaitable[object]]]


def _asyncio_samples(
    server: BenchServer,
    variants_of: Callable[[aredis.Redis, AsyncRedisPresenceRegistry], AsyncVariants],
    rounds: int,
    warm: int,
) -> dict[str, list[float]]:
    """Interleaved samples of asyncio variants on one ``redis.asyncio.Redis()`` (its pool)
    and a registry over it, on an event loop of their own, after `warm` untimed rounds."""

    async def measure() -> dict[str, list[float]]:
        client = aredis.Redis(host=HOST, port=server.port)
        try:
            variants = variants_of(client, AsyncRedisPresenceRegistry(client, prefix=PREFIX))
            await ainterleaved(variants, warm)
            return await ainterleaved(variants, rounds)
        finally:
            await client.aclose()

    return asyncio.run(measure())


def _asyncio_heartbeat(result: CaseResult, server: BenchServer, rounds: int) -> None:
    """The same heartbeat and PING through one ``redis.asyncio.Redis()``: how an asyncio
    broker beats."""
    q, g, c, lease = HOT

    def variants(client: aredis.Redis, registry: AsyncRedisPresenceRegistry) -> AsyncVariants:
        return {
            "asyncio: heartbeat, default pooled client": lambda: registry.heartbeat(q, g, c, lease),
            "asyncio: PING, default pooled client": client.ping,
        }

    for name, values in _asyncio_samples(server, variants, rounds, max(50, rounds // 20)).items():
        result.measures.append(Measure(name, "us", values))
    result.facts["asyncio: heartbeat / PING, default pooled client"] = round(
        result.measure("asyncio: heartbeat, default pooled client").median
        / result.measure("asyncio: PING, default pooled client").median,
        3,
    )


def _asyncio_batched(
    result: CaseResult, server: BenchServer, beats: list[Beat], rounds: int, sha: str
) -> None:
    """`heartbeat_many` of the asyncio registry against the same script sent by hand
    through a ``redis.asyncio`` pipeline (which packs its arguments in Python)."""
    n = len(beats)
    with server.client() as sync_client:
        keys, args = RawPresence(sync_client, PREFIX).heartbeat_args(beats, None)

    def variants(client: aredis.Redis, registry: AsyncRedisPresenceRegistry) -> AsyncVariants:
        async def by_hand() -> object:
            pipe = client.pipeline(transaction=False)
            pipe.evalsha(sha, len(keys), *keys, *args)
            return await pipe.execute()

        return {
            "asyncio: heartbeat_many": lambda: registry.heartbeat_many(beats),
            "asyncio: raw pipeline (same script)": by_hand,
        }

    for name, values in _asyncio_samples(server, variants, rounds, max(3, rounds // 10)).items():
        result.measures.append(Measure(name, "us", values, per=f"batch of {n:,} beats"))
    result.facts["asyncio: heartbeat_many throughput / raw"] = round(
        result.measure("asyncio: raw pipeline (same script)").median
        / result.measure("asyncio: heartbeat_many").median,
        3,
    )


def case_batched(server: BenchServer, sizes: Sizes) -> CaseResult:
    """heartbeat_many and the reporter's flush against the same script sent by hand."""
    n = sizes.batch_beats
    result = CaseResult("batched", f"2. batched heartbeats, {n:,} beats over {GROUPS} groups")
    client = server.client()
    try:
        client.flushall()
        registry = _registry(client)
        raw = RawPresence(client, PREFIX)
        beats = fleet(n)
        sha = client.script_load(source("heartbeat_many"))

        def by_hand(delay_us: int) -> Callable[[], object]:
            def send() -> object:
                keys, args = raw.heartbeat_args(beats, None, delay_us)
                pipe = client.pipeline(transaction=False)
                pipe.evalsha(sha, len(keys), *keys, *args)
                return pipe.execute()

            return send

        variants: dict[str, Callable[[], object]] = {
            "heartbeat_many": lambda: registry.heartbeat_many(beats),
            "raw pipeline (same script)": by_hand(0),
        }
        reporter_cls, why = load_reporter()
        reporter: Any = None
        if reporter_cls is None:
            result.notes.append(f"reporter flush not measured: {why}")
        else:
            # A long interval: only our own flush() calls write during the rounds.
            reporter = reporter_cls(registry, interval_ms=_long_interval(reporter_cls, registry))
            variants["reporter flush"] = reporter.flush
            variants["raw pipeline, delayed beats"] = by_hand(1_500)

        def refill(name: str) -> None:
            if name == "reporter flush":
                for beat in beats:
                    reporter.beat(*beat)

        try:
            interleaved(variants, max(3, sizes.batch_rounds // 10), before=refill)
            samples = interleaved(variants, sizes.batch_rounds, before=refill)
        finally:
            if reporter is not None:
                reporter.close()
        for name, values in samples.items():
            result.measures.append(Measure(name, "us", values, per=f"batch of {n:,} beats"))
        _asyncio_batched(result, server, beats, sizes.batch_rounds, sha)
        raw_med = result.measure("raw pipeline (same script)").median
        many = result.measure("heartbeat_many").median
        result.facts["beats_per_s"] = {m.name: round(n / m.median * 1e6) for m in result.measures}
        result.checks.append(
            Check(
                "heartbeat_many throughput / raw",
                raw_med / many,
                ">=",
                0.8,
                "raw median / heartbeat_many median",
            )
        )
        if reporter is not None:
            flush = result.measure("reporter flush").median
            raw_delayed = result.measure("raw pipeline, delayed beats").median
            result.checks.append(
                Check(
                    "reporter flush throughput / raw",
                    raw_delayed / flush,
                    ">=",
                    0.8,
                    "raw (delayed beats) median / flush median",
                )
            )
    finally:
        client.close()
    return result


def _long_interval(reporter_cls: Any, registry: RedisPresenceRegistry) -> int:
    """The longest flush interval the reporter accepts, up to an hour."""
    for interval_ms in (3_600_000, 60_000, 6_000, 1_000):
        try:
            probe = reporter_cls(registry, interval_ms=interval_ms)
        except (ValueError, TypeError):
            continue
        probe.close()
        return interval_ms
    return 1_000


# -- 3 ------------------------------------------------------------------------------------


def _empty_beat(queue: str, group: str, consumer: str, lease_count: int = 0) -> None:
    """The floor a `beat` call is compared with: a Python call that does nothing."""


def case_coalescing(server: BenchServer, sizes: Sizes) -> CaseResult:
    """Many PresenceReporter.beat calls: writes that reach Redis and the cost of one call."""
    total, consumers = sizes.coalesce_beats, sizes.coalesce_consumers
    result = CaseResult(
        "coalescing", f"3. coalescing: {total:,} beat() calls on {consumers:,} consumers"
    )
    reporter_cls, why = load_reporter()
    if reporter_cls is None:
        result.skipped = why
        return result
    interval_ms = 100  # short, so the beating spans several flushes
    client = server.client()
    try:
        client.flushall()
        registry = _registry(client)
        registry.heartbeat(*HOT)  # scripts loaded before counting
        client.flushall()
        names = fleet(consumers)
        per_round = total // sizes.coalesce_rounds
        sequence = list(itertools.islice(itertools.cycle(names), per_round))
        reporter = reporter_cls(registry, interval_ms=interval_ms)
        before = command_calls(client)
        started = time.monotonic()
        beat = reporter.beat
        samples: dict[str, list[float]] = {"beat()": [], "empty function": []}
        try:
            for _ in range(sizes.coalesce_rounds):
                for name, fn in (("beat()", beat), ("empty function", _empty_beat)):
                    start = time.perf_counter_ns()
                    for q, g, c, lease in sequence:
                        fn(q, g, c, lease)
                    samples[name].append((time.perf_counter_ns() - start) / per_round)
            beating_s = time.monotonic() - started
        finally:
            reporter.close()
        counted = delta(command_calls(client), before)
        for name, values in samples.items():
            result.measures.append(Measure(name, "ns", values, per=f"call, {per_round:,}/round"))
        beat_ns, empty_ns = result.measure("beat()").median, result.measure("empty function").median
        flushes = counted.get("evalsha", 0)
        rows = counted.get("hset", 0)
        beats_sent = per_round * sizes.coalesce_rounds
        result.facts.update(
            {
                "beat_calls": beats_sent,
                "consumers": consumers,
                "interval_ms": interval_ms,
                "seconds_of_beating": round(beating_s, 3),
                "script_calls_sent (EVALSHA)": flushes,
                "consumer_rows_written (HSET)": rows,
                "writes_per_1000_beats": round(rows / beats_sent * 1000, 3),
                "bound: consumers x (flush intervals + 1)": consumers
                * (int(beating_s * 1000 / interval_ms) + 2),
                "beat_over_empty_call": round(beat_ns / empty_ns, 2),
                "server_commands": counted,
            }
        )
        result.checks.append(
            Check(
                "rows written / beat() calls",
                rows / beats_sent,
                "<=",
                consumers * (beating_s * 1000 / interval_ms + 2) / beats_sent,
                "at most one write per consumer per interval (+ the final flush)",
            )
        )
    finally:
        client.close()
    return result


# -- 4 ------------------------------------------------------------------------------------


def case_snapshot(server: BenchServer, sizes: Sizes) -> CaseResult:
    """snapshot() against raw transfer, the SCAN + MGET design and the in-process registry."""
    result = CaseResult("snapshot", f"4. snapshot() at fleet scale ({GROUPS} groups)")
    client = server.client()
    scan_client = server.client(db=1)
    try:
        registry = _registry(client)
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
            registries[n] = _registry(client, f"{PREFIX}-{n}")
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
            registries[n] = _registry(client, f"{PREFIX}-{n}")
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
        registry = _registry(client)
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
    finally:
        client.flushall()
        client.close()
    return result


CASES: dict[str, Callable[[BenchServer, Sizes], CaseResult]] = {
    "heartbeat": case_heartbeat,
    "batched": case_batched,
    "coalescing": case_coalescing,
    "snapshot": case_snapshot,
    "counts": case_counts,
    "prune": case_prune,
    "memory": case_memory,
    "startup": case_startup,
    "integrations": case_integrations,
    "fleets": case_fleets,
    "web": lambda server, sizes: importlib.import_module("benchmarks.web").case_web(server, sizes),
    "events": lambda server, sizes: importlib.import_module("benchmarks.events").case_events(
        server, sizes
    ),
    "metadata": lambda server, sizes: importlib.import_module("benchmarks.metadata").case_metadata(
        server, sizes
    ),
    "node": lambda server, sizes: importlib.import_module("benchmarks.node").case_node(
        server, sizes
    ),
    "queues": lambda server, sizes: importlib.import_module("benchmarks.queues").case_queues(
        server, sizes
    ),
    "pages": lambda server, sizes: importlib.import_module("benchmarks.pages").case_pages(
        server, sizes
    ),
    "streams": lambda server, sizes: importlib.import_module("benchmarks.streams").case_streams(
        server, sizes
    ),
}
"""Every case, in the order of issue 6, then the CLI's startup; the keys are the JSON's ``cases``
keys."""


def run_case(key: str, server: BenchServer, sizes: Sizes) -> CaseResult:
    """Run one case and time it."""
    started = time.monotonic()
    result = CASES[key](server, sizes)
    result.seconds = time.monotonic() - started
    return result


__all__ = ["CASES", "FULL", "QUICK", "Sizes", "run_case"]

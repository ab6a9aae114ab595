"""Cases 1 to 3, the write path: one heartbeat against a bare PING, batched heartbeats
against the same script sent by hand, and the reporter's coalescing of many `beat()` calls.

Each takes the running `BenchServer` and the `Sizes` of the run and returns a `CaseResult`
(`benchmarks.cases` lists them); variants are interleaved round by round.
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import redis
import redis.asyncio as aredis
from redis.utils import HIREDIS_AVAILABLE

from redis_presence import AsyncRedisPresenceRegistry, RedisPresenceRegistry
from redis_presence.scripts import source

from .fleet import GROUPS, HOT, PREFIX, Beat, RawPresence, bench_registry, fleet
from .server import HOST, BenchServer
from .sizes import Sizes
from .stats import (
    CaseResult,
    Check,
    Measure,
    ainterleaved,
    command_calls,
    delta,
    interleaved,
    server_usec,
)


def load_reporter() -> tuple[Any, str | None]:
    """``PresenceReporter`` when the package has it yet, else ``(None, why)``."""
    try:
        module = importlib.import_module("redis_presence.reporter")
        return module.PresenceReporter, None
    except (ImportError, AttributeError) as exc:
        return None, f"redis_presence.reporter.PresenceReporter is not importable ({exc})"


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
        registry = bench_registry(client)
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
        pooled = bench_registry(pooled_client)
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
        inside = sorted(set(result.facts["commands_run_on_server"]) - {"evalsha", "fcall"})
        result.facts["server_usec_per_call"] = {
            "fcall (the registry's heartbeats)": round(usec.get("fcall", 0.0), 2),
            "evalsha (the diag variants, and a registry without functions)": round(
                usec.get("evalsha", 0.0), 2
            ),
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
        registry = bench_registry(client)
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
        registry = bench_registry(client)
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
        flushes = counted.get("fcall", 0) + counted.get("evalsha", 0)
        rows = counted.get("hset", 0)
        beats_sent = per_round * sizes.coalesce_rounds
        result.facts.update(
            {
                "beat_calls": beats_sent,
                "consumers": consumers,
                "interval_ms": interval_ms,
                "seconds_of_beating": round(beating_s, 3),
                "script_calls_sent (FCALL or EVALSHA)": flushes,
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

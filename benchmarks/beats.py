"""Case ``beat_cost`` (issue 33, item 1): the server time one beat costs, from ``INFO
commandstats``, at 10,000 consumers over 100 groups, single and in batches of 100, beside
an empty script (and an empty function) called with the same keys and arguments.

Redis runs every script on one thread, so this figure decides how many beats one core
carries. The heartbeats are Redis functions (``FCALL``); the ``EVALSHA`` rows are the same
scripts sent the way a registry sends them where functions are refused (the fallback, and
what every beat cost before functions). Server time is measured in alternating blocks (one
block of each variant in turn, a fresh ``INFO commandstats`` around each) and reduced to the
median block, so the noise of a shared machine hits the variants alike.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from functools import partial
from typing import Any

import redis

from redis_presence import RedisPresenceRegistry

from .fleet import PREFIX, Beat, RawPresence, bench_registry, fleet, group_names
from .server import BenchServer
from .sizes import Sizes
from .stats import CaseResult, Check, Measure, command_usec, interleaved

CONSUMERS = 10_000
BATCH = 100
SINGLE_TARGET_US = 6.0
BATCHED_TARGET_US = 3.0
CLIENT_TARGET = 1.1
EMPTY_LIBRARY = (
    "#!lua name=bench_empty\nredis.register_function('bench_empty', function() return 0 end)"
)


def _block_usec(client: redis.Redis, command: str, run: Callable[[], object], calls: int) -> float:
    """Server time per `command` call (us) while `run` is called `calls` times."""
    before = command_usec(client).get(command, (0, 0))
    for _ in range(calls):
        run()
    after = command_usec(client).get(command, (0, 0))
    done = after[0] - before[0]
    return (after[1] - before[1]) / done if done else 0.0


def _server_cpu_s(client: redis.Redis) -> float:
    """CPU seconds the server process has used (``INFO cpu``: user and system, all its
    threads): what a beat costs the core, reading and answering the request included."""
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def _beats_per_core_s(
    client: redis.Redis, run: Callable[[], object], per: int, calls: int
) -> float:
    """Beats per second of the server's CPU while `run` (`per` beats) is called `calls` times."""
    before = _server_cpu_s(client)
    for _ in range(calls):
        run()
    spent = _server_cpu_s(client) - before
    return per * calls / spent if spent > 0 else 0.0


def _cycle(items: list[Any]) -> Callable[[], Any]:
    """A function that hands out `items` round robin."""
    state = {"i": 0}

    def step() -> Any:
        i = state["i"]
        state["i"] = (i + 1) % len(items)
        return items[i]

    return step


def _single(registry: RedisPresenceRegistry, beat: Callable[[], Beat]) -> None:
    registry.heartbeat(*beat())


def _many(registry: RedisPresenceRegistry, batch: Callable[[], list[Beat]]) -> None:
    registry.heartbeat_many(batch())


def case_beat_cost(server: BenchServer, sizes: Sizes) -> CaseResult:
    """Server time per beat, single and batched, by FCALL and by EVALSHA, beside an empty
    script of the same shape; and the client-side ratio over that empty script."""
    result = CaseResult(
        "beat_cost",
        f"16. server time per beat (INFO commandstats), {CONSUMERS:,} consumers over "
        f"{len(group_names())} groups",
    )
    client = server.client()
    try:
        client.flushall()
        registry = bench_registry(client)
        beats = fleet(CONSUMERS)
        for start in range(0, CONSUMERS, 1_000):
            registry.heartbeat_many(beats[start : start + 1_000])
        functions = getattr(registry, "functions", None)
        by_sha = RedisPresenceRegistry(client, prefix=PREFIX)
        if functions is not None:
            by_sha.functions.refuse("benchmark: the EVALSHA fallback")
        raw = RawPresence(client, PREFIX)
        keys, args = raw.beat_args(*beats[0], None)
        empty_sha = client.script_load("return 0")
        client.function_load(EMPTY_LIBRARY, replace=True)

        one = _cycle(beats)
        batches = [beats[i : i + BATCH] for i in range(0, CONSUMERS, BATCH)]
        batch = _cycle(batches)
        beat_by = {"FCALL": registry, "EVALSHA": by_sha} if functions is not None else {}
        if functions is None:  # a package without functions: every script by EVALSHA
            beat_by = {"EVALSHA": registry}
        variants: dict[str, tuple[str, Callable[[], object], int]] = {}
        for command, reg in beat_by.items():
            variants[f"heartbeat, known consumer ({command})"] = (
                command.lower(),
                partial(_single, reg, one),
                1,
            )
            variants[f"heartbeat_many, {BATCH} beats over {BATCH} groups ({command}), per beat"] = (
                command.lower(),
                partial(_many, reg, batch),
                BATCH,
            )
        variants["empty script, same keys and args (EVALSHA)"] = (
            "evalsha",
            partial(client.execute_command, "EVALSHA", empty_sha, len(keys), *keys, *args),
            1,
        )
        variants["empty function, same keys and args (FCALL)"] = (
            "fcall",
            partial(client.execute_command, "FCALL", "bench_empty", len(keys), *keys, *args),
            1,
        )
        for _, run, _ in variants.values():  # warm: scripts and the library loaded
            run()
        rounds = max(5, sizes.latency_calls // 250)
        per_block = 200
        samples: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(rounds):
            for name, (command, run, per) in variants.items():
                calls = per_block if per == 1 else max(4, per_block // 20)
                samples[name].append(_block_usec(client, command, run, calls) / per)
        for name, values in samples.items():
            result.measures.append(Measure(name, "us", values, per="beat (server time)"))
        median = {name: statistics.median(values) for name, values in samples.items()}
        main = "FCALL" if functions is not None else "EVALSHA"
        single = median[f"heartbeat, known consumer ({main})"]
        batched = median[f"heartbeat_many, {BATCH} beats over {BATCH} groups ({main}), per beat"]
        result.checks.append(
            Check(
                "server us per single beat (known consumer)",
                single,
                "<=",
                SINGLE_TARGET_US,
                f"INFO commandstats usec per {main.lower()}, median of {rounds} blocks",
            )
        )
        result.checks.append(
            Check(
                f"server us per beat, batches of {BATCH}",
                batched,
                "<=",
                BATCHED_TARGET_US,
                f"usec per {main.lower()} / {BATCH}, median of {rounds} blocks",
            )
        )
        result.facts["server_usec_per_beat"] = {name: round(v, 2) for name, v in median.items()}
        result.facts["beats_per_s_at_80pct_of_one_core"] = {
            "single": round(0.8e6 / single),
            f"batches of {BATCH}": round(0.8e6 / batched),
        }
        # The same from the server's own CPU accounting (INFO cpu), which also counts reading
        # and answering each request: what the reporter's flushes (heartbeat_many calls of up
        # to 250 beats) cost one core, and so how many beats a second 80% of it carries.
        flush = [beats[i : i + 250] for i in range(0, CONSUMERS, 250)]
        flushes = _cycle(flush)
        core = [
            _beats_per_core_s(client, partial(_many, registry, flushes), 250, max(40, rounds * 4))
            for _ in range(3)
        ]
        result.measures.append(
            Measure(
                "reporter flushes (heartbeat_many, 250 beats)", "beats/s", core, per="core second"
            )
        )
        result.facts["beats_per_s_at_80pct_of_one_core"]["reporter flushes of 250 (INFO cpu)"] = (
            round(0.8 * statistics.median(core))
        )
        if functions is not None:
            result.facts["functions_refused"] = functions.refused
        _client_ratio(result, server, beats[0], keys, args, empty_sha, sizes.latency_calls)
        client.function_delete("bench_empty")
    finally:
        client.close()
    return result


def _client_ratio(
    result: CaseResult,
    server: BenchServer,
    beat: Beat,
    keys: list[str],
    args: list[str | int],
    empty_sha: str,
    calls: int,
) -> None:
    """Heartbeat p50 over an empty script sent with the same keys and arguments, both
    through one ``redis.Redis()`` with its pool (the target of issue 33: <= 1.1)."""
    pooled = server.client()
    try:
        registry = bench_registry(pooled)
        registry.heartbeat(*beat)
        send = pooled.execute_command
        variants: dict[str, Callable[[], object]] = {
            "client: heartbeat, pooled": lambda: registry.heartbeat(*beat),
            "client: empty script, same arguments, pooled": partial(
                send, "EVALSHA", empty_sha, len(keys), *keys, *args
            ),
        }
        interleaved(variants, max(50, calls // 20))
        samples = interleaved(variants, calls)
    finally:
        pooled.close()
    for name, values in samples.items():
        result.measures.append(Measure(name, "us", values))
    ratio = (
        result.measure("client: heartbeat, pooled").median
        / result.measure("client: empty script, same arguments, pooled").median
    )
    result.checks.append(
        Check(
            "heartbeat p50 / empty script p50, pooled",
            ratio,
            "<=",
            CLIENT_TARGET,
            "client-side medians through one redis.Redis() with its pool",
        )
    )


__all__ = ["case_beat_cost"]

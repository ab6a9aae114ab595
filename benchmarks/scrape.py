"""A `/metrics` scrape at fleet scale (issue 33 item 2): at 10,000 groups against one
`count_active_by_group()` of the same groups, with the commands it sends per group; and at
100,000 groups of one consumer each (100,000 queues) against Prometheus' default scrape
timeout of 10 s.

The app runs in process behind httpx's ASGI transport (as case 8), with the shared TTLs
(no ``--ttl-ms``: what a deployment runs), at the fleet's instant. The fleet of 10,000
groups (100,000 consumers, 10 a group) is measured twice: every consumer active (as case
15's, where the issue measured 4.3x), then 1 in 50 stale and 1 in 50 expired, so about a
fifth of the groups have a stale consumer and a fifth an expired one, whose leases the
scrape reads (a group with a consumer that is not active costs the scrape its counts). The
100,000 queues have the mixed beats. Commands are counted
by ``INFO commandstats`` around one scrape; the longest command from ``INFO latencystats``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis

from redis_presence import AsyncRedisPresenceRegistry
from redis_presence.keys import Keyspace

from .fleet import NOW_NS, TTL_MS
from .server import HOST, BenchServer
from .stats import CaseResult, Check, Measure, command_calls, command_usec, delta
from .web import MISSING, _longest_usec, _measure, get_ok, serving

if MISSING is None:
    from redis_presence.web import WebConfig, create_app

PREFIX = "bench-scrape"
FULL = ((100_000, 10_000), 100_000)
QUICK = ((10_000, 1_000), 5_000)
TIMEOUT_S = 10.0
"""Prometheus' default ``scrape_timeout``."""
MS = 1_000_000


def beat_ns(i: int, mixed: bool = True) -> int:
    """Consumer `i`'s last beat, within the TTL; `mixed`: 1 in 50 stale, 1 in 50 expired."""
    if mixed and i % 50 == 7:
        return NOW_NS - (3 * TTL_MS // 2) * MS
    if mixed and i % 50 == 31:
        return NOW_NS - 3 * TTL_MS * MS
    return NOW_NS - (i % 97) * (TTL_MS * MS // 100)


def write(
    client: redis.Redis, groups: list[tuple[str, str]], per_group: int, mixed: bool = True
) -> None:
    """`per_group` consumers in each group, in the package's stored layout (`Keyspace`),
    with pipelined ``ZADD``/``HSET`` (the same data beats would write, much faster)."""
    keys = Keyspace(PREFIX)
    pipe = client.pipeline(transaction=False)
    for g, (queue, group) in enumerate(groups):
        gk = keys.group(queue, group)
        beats = {f"worker-{g:06d}-{k}": beat_ns(g * per_group + k, mixed) for k in range(per_group)}
        pipe.zadd(gk.hb, {name: ns // 1_000 for name, ns in beats.items()})
        pipe.hset(
            gk.data, mapping={name: f"{ns} {ns} {len(name) % 3}" for name, ns in beats.items()}
        )
        pipe.zadd(keys.groups, {gk.member: 0})
        if len(pipe) >= 3_000:
            pipe.execute()
    pipe.execute()


async def _scrape_commands(web: Any, probe: redis.Redis) -> tuple[dict[str, int], str, str]:
    """The commands one scrape sends (``INFO commandstats``), its longest one (``INFO
    latencystats`` p100: wall time in the server, a moment it was not scheduled included)
    and the server time a call of each (``commandstats``: its work)."""
    await get_ok(web, "/metrics")  # warm: scripts and connections
    probe.config_resetstat()
    before = command_calls(probe)
    await get_ok(web, "/metrics")
    sent = delta(command_calls(probe), before)
    sent.pop("config|resetstat", None)
    command, usec = _longest_usec(probe)
    spent = command_usec(probe)
    work = ", ".join(
        f"{name} {spent[name][1] / max(1, spent[name][0]):.1f} us" for name in sent if name in spent
    )
    return sent, f"{command} {usec / 1000:.2f} ms", work


async def _ten_thousand(
    server: BenchServer, n: int, groups: int, rounds: int, result: CaseResult, fleet: str
) -> None:
    url = f"redis://{HOST}:{server.port}/0"
    app = create_app(WebConfig(url=url, prefix=PREFIX, read_cache_s=0, now_ns=NOW_NS))
    registry = AsyncRedisPresenceRegistry.from_url(url, prefix=PREFIX)
    probe = server.client()
    at = f"@ {n:,} / {groups:,} groups, {fleet}"
    async with serving(app) as (web,):
        sent, longest, work = await _scrape_commands(web, probe)
        variants: dict[str, Callable[[], Awaitable[object]]] = {
            "GET /metrics": lambda: get_ok(web, "/metrics"),
            "baseline: count_active_by_group()": lambda: registry.count_active_by_group(
                now_ns=NOW_NS
            ),
        }
        samples = await _measure(variants, rounds)
        await registry.aclose()
    probe.close()
    for name, values in samples.items():
        result.measures.append(Measure(f"{name} {at}", "ms", values, "request", n))
    scrape = result.measure(f"GET /metrics {at}").median
    counts = result.measure(f"baseline: count_active_by_group() {at}").median
    result.checks.append(
        Check(
            f"/metrics scrape / count_active_by_group() {at}",
            scrape / counts,
            "<=",
            1.5,
            "scrape median / one count_active_by_group() median (same groups, same loop)",
        )
    )
    total = sum(sent.values())
    result.checks.append(
        Check(
            f"commands per group of one /metrics scrape {at}",
            total / groups,
            "<=",
            4.0,
            "INFO commandstats calls during one scrape / groups",
        )
    )
    result.facts[f"commands of one scrape {at}"] = sent
    result.facts[f"longest server command of one scrape {at}"] = longest
    result.facts[f"server time a call of one scrape's commands {at}"] = work


async def _one_consumer_each(
    server: BenchServer, groups: int, rounds: int, result: CaseResult
) -> None:
    url = f"redis://{HOST}:{server.port}/0"
    app = create_app(WebConfig(url=url, prefix=PREFIX, read_cache_s=0, now_ns=NOW_NS))
    probe = server.client()
    at = f"@ {groups:,} queues of one consumer"
    async with serving(app) as (web,):
        sent, longest, work = await _scrape_commands(web, probe)
        samples: list[float] = []
        cpu: list[float] = []
        for _ in range(rounds):
            started, used = time.perf_counter(), time.process_time()
            await get_ok(web, "/metrics")
            samples.append(time.perf_counter() - started)
            cpu.append(time.process_time() - used)
    probe.close()
    result.measures.append(Measure(f"GET /metrics {at}", "s", samples, "request", groups))
    # On a loaded machine the wall time is mostly waiting for a CPU: the client's own CPU
    # time (the service's process; the server is another) is what the scrape costs it.
    result.measures.append(
        Measure(f"info: the service's CPU time of GET /metrics {at}", "s", cpu, "request", groups)
    )
    result.checks.append(
        Check(
            f"/metrics scrape (s) {at}",
            result.measure(f"GET /metrics {at}").median,
            "<=",
            TIMEOUT_S,
            "scrape median in seconds / Prometheus' default scrape_timeout (10 s)",
        )
    )
    result.facts[f"commands per group of one scrape {at}"] = round(sum(sent.values()) / groups, 2)
    result.facts[f"longest server command of one scrape {at}"] = longest
    result.facts[f"server time a call of one scrape's commands {at}"] = work


def case_scrape(server: BenchServer, sizes: Any) -> CaseResult:
    """`/metrics` at 10,000 groups (against `count_active_by_group()`) and at 100,000."""
    quick = sizes.quick
    (n, groups), many = QUICK if quick else FULL
    rounds = 5 if quick else 9
    result = CaseResult("scrape", f"17. /metrics at {groups:,} and at {many:,} groups")
    if MISSING is not None:
        result.skipped = MISSING
        return result
    client = server.client()
    try:
        client.flushall()
        client.config_set("latency-tracking-info-percentiles", "50 99 100")
        pairs = [(f"queue-{g % 100:03d}", f"group-{g // 100:04d}") for g in range(groups)]
        for mixed, fleet in ((False, "all active"), (True, "1 in 50 stale, 1 in 50 expired")):
            write(client, pairs, n // groups, mixed)
            asyncio.run(_ten_thousand(server, n, groups, rounds, result, fleet))
            client.flushall()
        write(client, [(f"queue-{g:06d}", "readers") for g in range(many)], 1)
        asyncio.run(_one_consumer_each(server, many, 2 if quick else 3, result))
    finally:
        client.flushall()
        client.close()
    return result

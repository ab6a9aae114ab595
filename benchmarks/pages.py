"""Pages cost what they show (issue 24 item 1): the dashboard's first page, the first page of
`/api/v1/groups` and `/metrics` at 100,000 consumers over 10,000 groups.

The app runs in process behind httpx's ASGI transport, on an asyncio registry against the
run's redis-server (as case 8). The target: a first page costs at most 1.5 times one
`count_active(q, g)` per group it shows, plus one read of the totals (one `groups()`,
shared by every page for `totals_cache_s`, so a page served while it is fresh pays none
of it). `/metrics` reads every group by design (one series per group); it is measured
beside one `count_active_by_group()` of the same fleet. The longest server command of each
variant comes from `INFO latencystats` (p100).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import Any

from redis_presence import AsyncRedisPresenceRegistry, RedisPresenceRegistry

from .fleet import NOW_NS, TTL_MS, Beat, write_fleet
from .server import HOST, BenchServer
from .stats import CaseResult, Check, Measure
from .web import MISSING, _measure, get_ok, longest_each, serving

if MISSING is None:
    from redis_presence.web import WebConfig, create_app

PREFIX = "bench-pages"
FULL_FLEET = (100_000, 10_000)
QUICK_FLEET = (10_000, 1_000)
SHOWN = 200
"""Groups on the dashboard's first page (its default)."""


def pages_fleet(consumers: int, groups: int) -> list[Beat]:
    """`consumers` over `groups` groups (100 queues), written by `heartbeat_many` batches."""
    return [
        (f"queue-{g % 100:03d}", f"group-{g // 100:04d}", f"worker-{i:07d}", i % 3)
        for i in range(consumers)
        for g in [i % groups]
    ]


async def _count_stuck(registry: AsyncRedisPresenceRegistry) -> int:
    """What the totals' count of stuck consumers reads: every consumer, streamed."""
    return sum([row.stuck async for row in registry.iter_snapshot(now_ns=NOW_NS, ttl_ms=TTL_MS)])


def _config(url: str, **options: Any) -> Any:
    known = {f.name for f in dataclasses.fields(WebConfig)}
    return WebConfig(
        url=url,
        prefix=PREFIX,
        ttl_ms=TTL_MS,
        read_cache_s=0,
        now_ns=NOW_NS,  # the fleet's instant: every consumer active, whatever the run's length
        **{k: v for k, v in options.items() if k in known},  # the code before had none
    )


async def _run(server: BenchServer, n: int, groups: int, rounds: int, result: CaseResult) -> None:
    url = f"redis://{HOST}:{server.port}/0"
    warm = create_app(_config(url, totals_cache_s=3600.0))
    cold = create_app(_config(url, totals_cache_s=0.0))
    registry = AsyncRedisPresenceRegistry.from_url(url, prefix=PREFIX)
    probe = server.client()
    async with serving(warm, cold) as (web, fresh):

        async def get(client: Any, path: str) -> Any:
            return await get_ok(client, path, accept="application/json")

        first = await get(web, "/")
        shown = [(g["queue"], g["group"]) for g in first["groups"]]
        if len(shown) != min(SHOWN, groups):
            raise AssertionError(f"the first page shows {len(shown)} groups")

        async def one_count_active() -> None:
            await registry.count_active(*shown[0], now_ns=NOW_NS, ttl_ms=TTL_MS)

        variants: dict[str, Callable[[], Awaitable[object]]] = {
            "GET / first page (totals fresh)": lambda: get(web, "/"),
            "GET / first page (totals read too)": lambda: get(fresh, "/"),
            "GET /api/v1/groups?limit=200": lambda: get(web, f"/api/v1/groups?limit={SHOWN}"),
            "GET /api/v1/groups (default limit 1,000)": lambda: get(web, "/api/v1/groups"),
            "GET /metrics": lambda: web.get("/metrics"),
            # Nobody is stuck here: stuck=1 reads every active group's consumers (its worst
            # case), which is what the totals' stuck count reads too (at most every 30 s).
            "GET /api/v1/groups?stuck=1 (none stuck)": lambda: get(
                web, f"/api/v1/groups?stuck=1&limit={SHOWN}"
            ),
            "stuck count: iter_snapshot() of every consumer": lambda: _count_stuck(registry),
            "totals read: groups()": lambda: registry.groups(now_ns=NOW_NS, ttl_ms=TTL_MS),
            "baseline: count_active_by_group()": lambda: registry.count_active_by_group(
                now_ns=NOW_NS, ttl_ms=TTL_MS
            ),
            "one count_active(q, g)": one_count_active,
        }
        longest = await longest_each(variants, probe)
        samples = await _measure(variants, rounds)
        # One count_active on its own is a round trip: measured many times, for its median.
        singles = []
        for queue, group in shown:
            started = time.perf_counter()
            await registry.count_active(queue, group, now_ns=NOW_NS, ttl_ms=TTL_MS)
            singles.append((time.perf_counter() - started) * 1000)
        samples["one count_active(q, g)"] = singles
        await registry.aclose()
    probe.close()
    at = f"@ {n:,} / {groups:,} groups"
    for name, values in samples.items():
        result.measures.append(Measure(f"{name} {at}", "ms", values, "request", n))

    def median(name: str) -> float:
        return result.measure(f"{name} {at}").median

    per_group = median("one count_active(q, g)")
    totals = median("totals read: groups()")
    budget = 1.5 * per_group * len(shown)
    for name in ("GET / first page (totals fresh)", "GET /api/v1/groups?limit=200"):
        result.checks.append(
            Check(
                f"{name} / ({len(shown)} x count_active) {at}",
                median(name) / (per_group * len(shown)),
                "<=",
                1.5,
                "page median / (groups shown x one count_active(q, g) median)",
            )
        )
    result.checks.append(
        Check(
            f"GET / first page (totals read too) / (1.5 x {len(shown)} count_active + one "
            f"totals read) {at}",
            median("GET / first page (totals read too)") / (budget + totals),
            "<=",
            1.0,
            "page median, reading the totals each time / the issue's budget",
        )
    )
    result.facts["longest server command during one call"] = longest
    result.facts["what a page reads"] = (
        "TIME; the declared groups (their index, HSCAN of each queue's); one ZRANGEBYLEX page "
        "of the index of groups from the cursor; for the groups shown and one more, the "
        "shared TTLs (cached), ZCARD and two ZCOUNT (+ a ZRANGEBYSCORE for ties) each; the "
        "totals: one groups() (every group's ZCARD and ZCOUNTs) shared by every page for "
        "totals_cache_s (5 s), served while it is refreshed for up to 60 s, and at most every "
        "30 s a streamed read of every consumer (the stuck card and column)"
    )
    result.facts["what /metrics reads"] = (
        "registry.groups(details=True): every group (one series per group by design)"
    )


def case_pages(server: BenchServer, sizes: Any) -> CaseResult:
    """The first pages and `/metrics` at 100,000 consumers over 10,000 groups."""
    quick = sizes.quick
    n, groups = QUICK_FLEET if quick else FULL_FLEET
    rounds = 5 if quick else 7
    result = CaseResult("pages", f"15. pages of groups @ {n:,} consumers, {groups:,} groups")
    if MISSING is not None:
        result.skipped = MISSING
        return result
    client = server.client()
    try:
        client.flushall()
        client.config_set("latency-tracking-info-percentiles", "50 99 100")
        write_fleet(RedisPresenceRegistry(client, prefix=PREFIX), pages_fleet(n, groups), NOW_NS)
        asyncio.run(_run(server, n, groups, rounds, result))
    finally:
        client.flushall()
        client.close()
    return result

"""The web service: a `/metrics` scrape, dashboard pages and one live tick at fleet scale
(issue 13).

The app runs in process behind httpx's ASGI transport (no sockets: what is measured is the
service and its reads of Redis), on an asyncio registry against the run's redis-server.
The baseline is one `count_active_by_group()` over the same groups, in the same loop; the
target is a scrape costing at most 1.2 of it without reading a single consumer. For each
variant the longest single server command is read from `INFO latencystats` (p100), which
counts a whole `EXEC` or script call as one command.

A live tick is what each open event stream (a dashboard page, an SSE client) does once per
interval: one `registry.changes(cursor)` from the cursor of the previous tick, here with 20
transitions in between (10 joined, 5 of them left, the other 5 gone stale); before the
events issue the service read a whole `snapshot()` per tick and diffed it, which is the
comparison.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from redis_presence import AsyncRedisPresenceRegistry, RedisPresenceRegistry

try:  # the web extra (and httpx, from the test extra)
    import httpx

    from redis_presence.web import WebConfig, create_app
except ImportError as exc:  # pragma: no cover - reported as a skipped case
    MISSING: str | None = f"the web service's packages are not installed ({exc})"
else:
    MISSING = None

from .fleet import NOW_NS, TTL_MS, Beat, write_fleet
from .server import HOST, BenchServer
from .stats import CaseResult, Check, Measure, ainterleaved

PREFIX = "bench-web"
WEB_GROUPS = 1_000


def web_fleet(n: int) -> list[Beat]:
    """`n` consumers over 1,000 groups (100 queues of 10 groups)."""
    return [
        (f"queue-{g // 10:03d}", f"group-{g % 10}", f"broker-{i % 7:02d}.worker-{i:07d}", i % 5)
        for i in range(n)
        for g in [i % WEB_GROUPS]
    ]


def _longest_usec(client: Any) -> tuple[str, float]:
    """The command with the longest single call since the last `CONFIG RESETSTAT`."""
    stats: dict[str, Any] = client.info("latencystats")
    longest = ("none", 0.0)
    for name, values in stats.items():
        command = name.removeprefix("latency_percentiles_usec_")
        if command.split("|")[0] in ("info", "config"):  # the probe's own commands
            continue
        p100 = float(values.get("p100", 0.0))
        if p100 > longest[1]:
            longest = (command, p100)
    return longest


@asynccontextmanager
async def serving(*apps: Any) -> AsyncIterator[list[Any]]:
    """Each app started (its lifespan) and an httpx client on it through the ASGI
    transport (no sockets), with the loopback ``Host`` the service accepts."""
    async with AsyncExitStack() as stack:
        clients = []
        for app in apps:
            await stack.enter_async_context(app.router.lifespan_context(app))
            transport = httpx.ASGITransport(app=app)
            client = httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1")
            clients.append(await stack.enter_async_context(client))
        yield clients


async def get_ok(client: Any, path: str, accept: str | None = None) -> Any:
    """``GET path``, failing the case on any status but 200; the decoded body when JSON."""
    headers = {} if accept is None else {"Accept": accept}
    response = await client.get(path, headers=headers)
    if response.status_code != 200:
        raise AssertionError(f"{path}: {response.status_code} {response.text[:200]}")
    return response.json() if "json" in response.headers["content-type"] else None


async def _measure(
    variants: dict[str, Callable[[], Awaitable[object]]], rounds: int
) -> dict[str, list[float]]:
    """`ainterleaved`, in milliseconds."""
    samples = await ainterleaved(variants, rounds)
    return {name: [v / 1_000 for v in values] for name, values in samples.items()}


async def longest_each(
    variants: dict[str, Callable[[], Awaitable[object]]], probe: Any
) -> dict[str, str]:
    """Two warm-up rounds (scripts loaded, connections open), then each variant once with
    the longest server command of that call."""
    await _measure(variants, 2)
    longest: dict[str, str] = {}
    for name, call in variants.items():
        probe.config_resetstat()
        await call()
        command, usec = _longest_usec(probe)
        longest[name] = f"{command} {usec / 1000:.2f} ms"
    return longest


async def _run(server: BenchServer, n: int, rounds: int, result: CaseResult) -> None:
    url = f"redis://{HOST}:{server.port}/0"
    # At the fleet's instant (as case 17): read at the server's clock, a fleet written at
    # NOW_NS would be all expired, which no fleet that beats is.
    plain = create_app(
        WebConfig(url=url, prefix=PREFIX, ttl_ms=TTL_MS, read_cache_s=0, now_ns=NOW_NS)
    )
    detailed = create_app(
        WebConfig(
            url=url,
            prefix=PREFIX,
            ttl_ms=TTL_MS,
            read_cache_s=0,
            per_consumer_metrics=True,
            now_ns=NOW_NS,
        )
    )
    registry = AsyncRedisPresenceRegistry.from_url(url, prefix=PREFIX)
    probe = server.client()
    async with serving(plain, detailed) as (web, web_detailed):
        get = get_ok

        variants: dict[str, Callable[[], Awaitable[object]]] = {
            "GET /metrics": lambda: get(web, "/metrics"),
            "baseline: count_active_by_group()": lambda: registry.count_active_by_group(
                now_ns=NOW_NS, ttl_ms=TTL_MS
            ),
            "GET /metrics --per-consumer-metrics": lambda: get(web_detailed, "/metrics"),
            "GET / (groups page)": lambda: get(web, "/"),
            "GET /group (a group page, 50 consumers)": lambda: get(
                web, "/group?queue=queue-042&group=group-7"
            ),
            "GET /api/v1/consumers?limit=100": lambda: get(web, "/api/v1/consumers?limit=100"),
            "diag: snapshot() (what consumer pages read today)": lambda: registry.snapshot(
                now_ns=NOW_NS, ttl_ms=TTL_MS
            ),
        }
        longest = await longest_each(variants, probe)
        samples = await _measure(variants, rounds)
        await registry.aclose()
    probe.close()
    for name, values in samples.items():
        result.measures.append(Measure(f"{name} @ {n:,}", "ms", values, "request", n))
    scrape = result.measure(f"GET /metrics @ {n:,}").median
    counts = result.measure(f"baseline: count_active_by_group() @ {n:,}").median
    result.checks.append(
        Check(
            f"/metrics scrape / count_active_by_group() @ {n:,}, {WEB_GROUPS:,} groups",
            scrape / counts,
            "<=",
            1.2,
            "scrape median / one count_active_by_group() median (same groups, same loop)",
        )
    )
    ticks = await _live_ticks(registry_url=url, rounds=rounds, n=n, probe=server.client())
    for name, (values, command) in ticks.items():
        result.measures.append(Measure(f"{name} @ {n:,}", "ms", values, "tick", n))
        longest[name] = command
    tick = result.measure(f"live tick: changes(cursor), 20 transitions @ {n:,}").median
    snapshot = result.measure(f"diag: snapshot() (what consumer pages read today) @ {n:,}").median
    result.checks.append(
        Check(
            f"live tick / one full snapshot() @ {n:,}, {WEB_GROUPS:,} groups",
            tick / snapshot,
            "<=",
            0.02,
            "one changes() with 20 transitions, median / snapshot() median (the tick of the "
            "snapshot-diff feed it replaces)",
        )
    )
    result.facts["longest server command during one call"] = longest
    result.facts["what a live tick reads"] = (
        "TIME; the event logs written since the cursor (the event index, then XRANGE of each "
        "log from the cursor's place); per listed group, the heartbeats that crossed a line "
        "in the interval (two ZRANGEBYSCORE and an HMGET of what they found): it grows with "
        "the changes and the groups, never with the consumers"
    )
    result.facts["what a scrape reads"] = (
        "one registry.groups(details=True): each group's ZCARD and oldest beat with the "
        "page's shared TTLs (MGET, EXISTS); the counts (two ZCOUNTs) and the expired names "
        "and values only for a group whose oldest consumer is not active (issue 33)"
    )


TICK_NS = 500_000_000
"""The service's default interval between two reads of one stream."""


async def _live_ticks(
    *, registry_url: str, rounds: int, n: int, probe: Any
) -> dict[str, tuple[list[float], str]]:
    """Median inputs for one live tick: `changes(cursor)` over the fleet, and over one group
    (a group page's stream), each after 20 transitions; with the longest command of one."""
    registry = AsyncRedisPresenceRegistry.from_url(registry_url, prefix=PREFIX, max_future_ms=None)
    # Well after the fleet's beats: its consumers crossed both lines long ago, so what a
    # tick finds is what this round does.
    now = NOW_NS + 10 * 60 * 1_000_000_000
    ttl_ns = TTL_MS * 1_000_000
    queue, group = "queue-042", "group-2"
    found: dict[str, tuple[list[float], str]] = {}
    try:
        await registry.set_ttl(TTL_MS)
        ticks: list[tuple[str, dict[str, str | None]]] = [
            ("live tick: changes(cursor), 20 transitions", {}),
            (
                "live tick of a group page: changes(cursor, queue, group)",
                {"queue": queue, "group": group},
            ),
        ]
        for name, where in ticks:
            samples: list[float] = []
            command = ""
            for round_number in range(rounds + 2):
                _, cursor = await registry.changes(
                    now_ns=now, queue=where.get("queue"), group=where.get("group")
                )
                tag = f"{name[:9]}-{round_number}"
                joined = [(queue, group, f"tick-{tag}-{i}", 0) for i in range(5)]
                lapsing = [(queue, group, f"lapse-{tag}-{i}", 0) for i in range(5)]
                await registry.heartbeat_many(joined, now_ns=now + 100_000_000)
                # Beaten so that each goes stale 200 ms into the tick.
                await registry.heartbeat_many(
                    lapsing, now_ns=now + 200_000_000 - ttl_ns - 1_000_000
                )
                for _, _, consumer, _ in joined:
                    await registry.deregister(queue, group, consumer, now_ns=now + 300_000_000)
                now += TICK_NS
                if round_number == 0:
                    probe.config_resetstat()
                started = time.perf_counter()
                events, cursor = await registry.changes(
                    cursor, now_ns=now, queue=where.get("queue"), group=where.get("group")
                )
                spent = (time.perf_counter() - started) * 1000
                if round_number == 0:
                    name_found, usec = _longest_usec(probe)
                    command = f"{name_found} {usec / 1000:.2f} ms"
                kinds = sorted(str(event.kind) for event in events)
                # This round's 10 lapsing ones joined too (logged), and go stale in the tick.
                if kinds.count("left") != 5 or kinds.count("stale") != 5:
                    raise AssertionError(f"{name}: unexpected events {kinds}")
                if round_number >= 2:  # warm-up: scripts loaded, TTLs cached
                    samples.append(spent)
                for _, _, consumer, _ in lapsing:
                    await registry.deregister(queue, group, consumer, now_ns=now)
            found[name] = (samples, command)
    finally:
        await registry.set_ttl(None)
        await registry.aclose()
        probe.close()
    return found


def case_web(server: BenchServer, sizes: Any) -> CaseResult:
    """One `/metrics` scrape and dashboard pages at the largest snapshot size, 1,000 groups."""
    n = max(sizes.snapshot_sizes)
    rounds = max(5, sizes.count_rounds // 10)
    result = CaseResult("web", f"8. web service: /metrics and pages @ {n:,} consumers")
    if MISSING is not None:
        result.skipped = MISSING
        return result
    client = server.client()
    try:
        client.flushall()
        client.config_set("latency-tracking-info-percentiles", "50 99 100")
        write_fleet(RedisPresenceRegistry(client, prefix=PREFIX), web_fleet(n), NOW_NS)
        asyncio.run(_run(server, n, rounds, result))
    finally:
        client.flushall()
        client.close()
    return result

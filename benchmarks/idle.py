"""Case "idle" (issue 33 item 4): the groups nobody reads cost what they are, not the fleet.

10,000 groups of three consumers (1,000 with ``--quick``), 1% of them unread (their
consumers beat ten minutes before the others), 150 with a TTL of their own (which leaves
who is unread as it is) and ten declared groups without a consumer.
The dashboard's ``/?idle=1`` (attention first, from the shared totals while they are
fresh), ``/?idle=1&sort=queue`` and ``/api/v1/groups?idle=1`` (the index's order: one
`group_page(attention=True)`, which on a standalone server of a prefix at version 2 counts
the groups whose ``P:newest`` is at or below their active horizon and the declared ones,
not every group), each beside the dashboard's first page. The target: each idle page at
most 1.5 times the first page (``GET /``, totals fresh). The longest server command of each
variant comes from ``INFO latencystats`` (p100).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from redis_presence import RedisPresenceRegistry

from .fleet import NOW_NS, TTL_MS, Beat, write_fleet
from .pages import _config
from .server import HOST, BenchServer
from .stats import CaseResult, Check, Measure
from .web import MISSING, _measure, get_ok, longest_each, serving

if MISSING is None:
    from redis_presence.web import create_app

PREFIX = "bench-pages"  # `pages._config`'s prefix
FULL_GROUPS = 10_000
QUICK_GROUPS = 1_000
PER_GROUP = 3
UNREAD_EVERY = 100
"""One group in UNREAD_EVERY is unread."""
DECLARED = 10
OWN = 100
"""Read groups with a TTL of their own (and half as many unread ones)."""
TARGET = 1.5
"""Issue 33 item 4: an idle page at most 1.5 times the first page."""

MS = 1_000_000


def idle_fleet(groups: int, unread: bool) -> list[Beat]:
    """`PER_GROUP` consumers in each of `groups` groups (100 queues): the unread groups
    (every UNREAD_EVERY-th) with `unread`, the others without."""
    return [
        (f"queue-{g % 100:03d}", f"group-{g // 100:04d}", f"worker-{c}", 1)
        for g in range(groups)
        if (g % UNREAD_EVERY == 7) == unread
        for c in range(PER_GROUP)
    ]


async def _run(server: BenchServer, groups: int, rounds: int, result: CaseResult) -> None:
    url = f"redis://{HOST}:{server.port}/0"
    warm = create_app(_config(url, totals_cache_s=3600.0))
    # Without --ttl-ms: each group's shared TTL (the prefix's, stored, or its own): one
    # range of P:newest at the horizon of the least TTL (P:ttls), each candidate checked.
    shared = create_app(dataclasses.replace(_config(url, totals_cache_s=3600.0), ttl_ms=None))
    probe = server.client()
    async with serving(warm, shared) as (web, web_shared):

        async def get(path: str, client: Any = None) -> Any:
            return await get_ok(client or web, path, accept="application/json")

        unread = groups // UNREAD_EVERY + DECLARED
        for path in ("/?idle=1", "/?idle=1&sort=queue", "/api/v1/groups?idle=1&limit=200"):
            shown = (await get(path))["groups"]
            if len(shown) != min(unread, 200):
                raise AssertionError(f"{path} shows {len(shown)} groups, not {unread}")
        variants: dict[str, Callable[[], Awaitable[object]]] = {
            "GET / first page (totals fresh)": lambda: get("/"),
            "GET /?idle=1 (totals fresh)": lambda: get("/?idle=1"),
            "GET /?idle=1&sort=queue": lambda: get("/?idle=1&sort=queue"),
            "GET /api/v1/groups?idle=1&limit=200": lambda: get("/api/v1/groups?idle=1&limit=200"),
            "GET /api/v1/groups?idle=1&limit=200 (shared TTLs, no --ttl-ms)": lambda: get(
                "/api/v1/groups?idle=1&limit=200", web_shared
            ),
        }
        longest = await longest_each(variants, probe)
        samples = await _measure(variants, rounds)
    probe.close()
    at = f"@ {groups:,} groups"
    for name, values in samples.items():
        result.measures.append(Measure(f"{name} {at}", "ms", values, "request", groups))
    first = result.measure(f"GET / first page (totals fresh) {at}").median
    for name in list(variants)[1:]:
        ratio = result.measure(f"{name} {at}").median / first
        result.checks.append(
            Check(
                f"{name} / GET / first page {at}",
                ratio,
                "<=",
                TARGET,
                f"page median / first page median (target {TARGET}x; {unread} groups to show)",
            )
        )
    result.facts["longest server command during one call"] = longest
    result.facts["what an idle page reads"] = (
        "standalone, prefix at version 2: GET P:protocol, three ZCARD (the fleet indexes "
        "complete?) and the lowest of P:ttls, ZRANGEBYSCORE P:newest -inf <active horizon> "
        "(--ttl-ms given; without it at the horizon of the least TTL, the prefix's or the "
        "lowest of P:ttls, each candidate against its own TTL), the declared groups, then "
        "ZCARD and two ZCOUNT of each candidate"
    )


def case_idle(server: BenchServer, sizes: Any) -> CaseResult:
    """The groups nobody reads at 10,000 groups, beside the first page."""
    quick = sizes.quick
    groups = QUICK_GROUPS if quick else FULL_GROUPS
    rounds = 5 if quick else 9
    result = CaseResult("idle", f"15b. groups nobody reads (idle=1) @ {groups:,} groups")
    if MISSING is not None:
        result.skipped = MISSING
        return result
    client = server.client()
    try:
        client.flushall()
        client.config_set("latency-tracking-info-percentiles", "50 99 100")
        registry = RedisPresenceRegistry(client, prefix=PREFIX)
        registry.set_ttl(TTL_MS)  # what the app without --ttl-ms uses
        write_fleet(registry, idle_fleet(groups, True), NOW_NS - 600_000 * MS)
        write_fleet(registry, idle_fleet(groups, False), NOW_NS)
        for n in range(DECLARED):
            registry.expect(f"queue-{n:03d}", "declared-nobody", 1)
        # Groups with a TTL of their own (P:ttls) that leave who is unread as it is: read
        # ones with half the prefix's (the least TTL: the candidates' horizon without
        # --ttl-ms), unread ones with twice it.
        for first, ttl, many in ((0, TTL_MS // 2, OWN), (7, 2 * TTL_MS, OWN // 2)):
            for g in range(first, groups, UNREAD_EVERY)[:many]:
                registry.set_ttl(ttl, queue=f"queue-{g % 100:03d}", group=f"group-{g // 100:04d}")
        asyncio.run(_run(server, groups, rounds, result))
    finally:
        client.flushall()
        client.close()
    return result

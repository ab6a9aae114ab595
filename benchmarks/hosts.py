"""What a roll-up by metadata costs (issue 34 item 4): `/api/v1/hosts` (by host, by version)
at 30,000 consumers over 2,000 groups in 50 queues, every consumer described with a host (300
of them) and a version (3), against the reads it is made of, in the same run:
`snapshot(with_meta=True)` (the same rows and metadata, kept whole) and a plain
`snapshot()`; and the longest server command of one call (``INFO latencystats``). Beside
them, the fleet's events since 15 minutes ago (issue 34 item 5): the page (5 reads of 200
events) and one poll of `/api/v1/events?since=15m` (1,000 events), in the log the fleet's
writes left (every consumer's `joined`, a few hundred entries per queue).

Run on its own: ``python -m benchmarks.hosts [consumers groups rounds]``.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from redis_presence import AsyncRedisPresenceRegistry, RedisPresenceRegistry
from redis_presence.keys import Keyspace, encode_meta
from redis_presence.web import WebConfig, create_app

from .fleet import NOW_NS, TTL_MS, write_fleet
from .server import HOST, BenchServer
from .web import _measure, get_ok, longest_each, serving

PREFIX = "bench-hosts"


def described_fleet(consumers: int, groups: int) -> list[tuple[str, str, str, int]]:
    """`consumers` over `groups` groups in 50 queues."""
    return [
        (f"queue-{g % 50:02d}", f"group-{g // 50:04d}", f"worker-{i:06d}", i % 3)
        for i in range(consumers)
        for g in [i % groups]
    ]


def describe(client: Any, beats: list[tuple[str, str, str, int]]) -> None:
    """Each consumer's metadata, as `describe` stores it (a host of 300, a version of 3)."""
    keys = Keyspace(PREFIX)
    pipe = client.pipeline(transaction=False)
    for i, (queue, group, consumer, _) in enumerate(beats):
        meta = {"host": f"host-{i % 300:03d}", "pid": str(1000 + i), "version": f"1.{i % 3}"}
        pipe.hset(keys.group(queue, group).meta, consumer, encode_meta(meta))
        if len(pipe) >= 5_000:
            pipe.execute()
    pipe.execute()


async def run(server: BenchServer, consumers: int, groups: int, rounds: int) -> dict[str, Any]:
    url = f"redis://{HOST}:{server.port}/0"
    app = create_app(WebConfig(url=url, prefix=PREFIX, ttl_ms=TTL_MS, read_cache_s=0))
    registry = AsyncRedisPresenceRegistry.from_url(url, prefix=PREFIX)
    probe = server.client()
    async with serving(app) as (web,):
        variants: dict[str, Callable[[], Awaitable[object]]] = {
            "GET /api/v1/hosts": lambda: get_ok(web, "/api/v1/hosts"),
            "GET /api/v1/hosts?by=version": lambda: get_ok(web, "/api/v1/hosts?by=version"),
            "GET /api/v1/hosts?queue=queue-00": lambda: get_ok(web, "/api/v1/hosts?queue=queue-00"),
            "GET /events (since 15m: the fleet's joins)": lambda: get_ok(
                web, "/events", accept="application/json"
            ),
            "GET /api/v1/events?since=15m": lambda: get_ok(web, "/api/v1/events?since=15m"),
            "snapshot(with_meta=True)": lambda: registry.snapshot(
                now_ns=NOW_NS, ttl_ms=TTL_MS, with_meta=True
            ),
            "snapshot()": lambda: registry.snapshot(now_ns=NOW_NS, ttl_ms=TTL_MS),
        }
        body = await get_ok(web, "/api/v1/hosts")
        if body["consumers"] != consumers or len(body["values"]) != 300:
            raise AssertionError(f"read {body['consumers']} consumers, {len(body['values'])} hosts")
        longest = await longest_each(variants, probe)
        samples = await _measure(variants, rounds)
    await registry.aclose()
    probe.close()
    medians = {name: statistics.median(values) for name, values in samples.items()}
    base = medians["snapshot(with_meta=True)"]
    return {
        "median ms": {name: round(v, 1) for name, v in medians.items()},
        "/ snapshot(with_meta=True)": {name: round(v / base, 2) for name, v in medians.items()},
        "longest server command": longest,
    }


def main(argv: list[str]) -> None:
    given = [int(a) for a in argv[:3]]
    consumers, groups, rounds = given + [30_000, 2_000, 7][len(given) :]
    with BenchServer() as server:
        client = server.client()
        client.config_set("latency-tracking-info-percentiles", "50 99 100")
        beats = described_fleet(consumers, groups)
        write_fleet(RedisPresenceRegistry(client, prefix=PREFIX), beats, NOW_NS)
        describe(client, beats)
        found = asyncio.run(run(server, consumers, groups, rounds))
        client.close()
    print(f"{consumers:,} consumers, {groups:,} groups, {rounds} rounds")
    for key, value in found.items():
        print(key)
        for name, figure in value.items():
            print(f"  {name}: {figure}")


if __name__ == "__main__":
    main(sys.argv[1:])

"""Case "prune-groups" (issue 33 item 3): what a prune costs per group it visits.

The same EXPIRED consumers (spread over 100 groups) are removed from a store of few groups
and from one of many (each group holds one live consumer besides): the ratio of the two
medians, the server commands sent per group visited (``INFO commandstats``, a script's own
commands included) and the longest single command (`Longest`: latencystats p100 and
SLOWLOG at 0) of one prune of each store. The many-group store is pruned again with each
group's shared TTL (``ttl_ms=None``): once where every group has the prefix's, once where
OWN groups have their own (some longer, some shorter than the prefix's).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from redis_presence import RedisPresenceRegistry

from .fleet import NOW_NS, TTL_MS
from .fleets import LONGEST_MS, LONGEST_RUNS, OLD_NS, Longest, bulk_write, group_pairs
from .server import BenchServer
from .stats import CaseResult, Check, Measure, command_calls, delta, interleaved

EXPIRED = 1_000
OWN = 100
"""Groups with a TTL of their own in the last store."""
TARGET_RATIO = 3.0
"""Issue 33 item 3: the many-group prune at most 3x the few-group one."""


SERVER_RUNS = 3


TOP_LEVEL = ("cmdstat_evalsha", "cmdstat_zrangebylex", "cmdstat_time", "cmdstat_zmscore")
"""The commands a prune sends itself (its script calls, the index pages, the clock); a
script's own commands are counted in their script's time (and again under their names,
which is why they are left out)."""


def _usec(client: Any) -> int:
    """The server time of a prune's own commands so far (``INFO commandstats``)."""
    stats: dict[str, Any] = client.info("commandstats")
    return sum(int(stats[k]["usec"]) for k in TOP_LEVEL if k in stats)


def _members(groups: int) -> dict[tuple[str, str], list[tuple[str, int]]]:
    return {pair: [("live-0", 1)] for pair in group_pairs(groups)}


def _doomed(groups: int) -> list[tuple[str, str, str, int]]:
    pairs = group_pairs(groups)[:100]
    return [(*pairs[i % len(pairs)], f"expired-{i:05d}", 0) for i in range(EXPIRED)]


def case_prune_groups(server: BenchServer, sizes: Any) -> CaseResult:
    """prune_expired() of EXPIRED consumers among few groups and among many."""
    few, many = sizes.prune_groups
    result = CaseResult(
        "prune-groups",
        f"6b. prune_expired() removing {EXPIRED:,} among {few:,} vs {many:,} groups",
    )
    client = server.client()
    try:
        client.flushall()
        registries: dict[str, RedisPresenceRegistry] = {}
        doomed: dict[str, list[tuple[str, str, str, int]]] = {}
        count: dict[str, int] = {}
        for n in (few, many):
            name = f"prune_expired() among {n:,} groups"
            registries[name] = RedisPresenceRegistry(client, prefix=f"pg{n}", max_future_ms=None)
            bulk_write(client, registries[name].plans.keys, _members(n), NOW_NS)
            doomed[name] = _doomed(n)
            count[name] = n
        # The same many-group store once more, pruned with each group's shared TTL
        # (ttl_ms=None, what `prune --every` and `serve --prune-every` do): one range of
        # P:oldest at the horizon of the least TTL (the prefix's; no group has its own).
        shared = f"prune_expired(ttl_ms=None) among {many:,} groups"
        registries[shared] = RedisPresenceRegistry(
            client, prefix=f"pg{many}shared", max_future_ms=None
        )
        registries[shared].set_ttl(TTL_MS)
        bulk_write(client, registries[shared].plans.keys, _members(many), NOW_NS)
        doomed[shared] = _doomed(many)
        count[shared] = many
        # And once more with OWN groups of their own TTL (P:ttls): half of them among the
        # groups pruned, longer than the prefix's (their consumers still expired), half
        # among the others, shorter (the least TTL, whose horizon the candidates are read at).
        own = f"prune_expired(ttl_ms=None) among {many:,} groups, {OWN} with their own TTL"
        registries[own] = RedisPresenceRegistry(client, prefix=f"pg{many}own", max_future_ms=None)
        registries[own].set_ttl(TTL_MS)
        pairs = group_pairs(many)
        for q, g in pairs[: OWN // 2]:
            registries[own].set_ttl(2 * TTL_MS, queue=q, group=g)
        for q, g in pairs[100 : 100 + OWN // 2]:
            registries[own].set_ttl(TTL_MS // 2, queue=q, group=g)
        bulk_write(client, registries[own].plans.keys, _members(many), NOW_NS)
        doomed[own] = _doomed(many)
        count[own] = many
        removed: list[int] = []

        def restock(name: str) -> None:
            registries[name].heartbeat_many(doomed[name], now_ns=OLD_NS)

        def prune(name: str) -> Callable[[], object]:
            ttl = None if name in (shared, own) else TTL_MS
            return lambda: removed.append(registries[name].prune_expired(now_ns=NOW_NS, ttl_ms=ttl))

        variants = {name: prune(name) for name in registries}
        interleaved(variants, 1, before=restock)
        removed.clear()
        samples = interleaved(variants, sizes.prune_rounds, before=restock)
        if set(removed) != {EXPIRED}:
            raise AssertionError(f"prune_expired removed {sorted(set(removed))}, not {EXPIRED}")
        for name, values in samples.items():
            result.measures.append(
                Measure(name, "ms", [v / 1_000 for v in values], "call", count[name])
            )
        server_ms: dict[str, float] = {}
        for name, fn in variants.items():
            runs = []
            for _ in range(SERVER_RUNS):
                restock(name)
                before, usec = command_calls(client), _usec(client)
                fn()
                runs.append((_usec(client) - usec) / 1_000)
            calls = delta(command_calls(client), before)
            server_ms[name] = min(runs)
            result.facts[f"server time (ms), {name}"] = round(server_ms[name], 2)
            result.facts[f"server commands per group visited, {name}"] = round(
                sum(calls.values()) / count[name], 2
            )
            result.facts[f"server commands, {name}"] = calls
        with Longest([client]) as longest:
            found = {
                name: longest.runs(fn, partial(restock, name), LONGEST_RUNS)
                for name, fn in variants.items()
            }
        result.facts["longest server command"] = found
        names = list(variants)
        for name in (shared, own):
            result.facts[f"{name} / among {few:,} groups (median)"] = round(
                result.measure(name).median / result.measure(names[0]).median, 2
            )
            result.facts[f"server time, {name} / among {few:,} groups"] = round(
                server_ms[name] / server_ms[names[0]], 2
            )
        result.checks.append(
            Check(
                f"server time of a prune of {EXPIRED:,} among {many:,} groups / among {few:,}",
                server_ms[names[1]] / server_ms[names[0]],
                "<=",
                TARGET_RATIO,
                "INFO commandstats usec of the prune's script calls, index pages and clock "
                f"during one prune, the least of {SERVER_RUNS}: the server's time alone",
            )
        )
        result.checks.append(
            Check(
                f"prune of {EXPIRED:,} among {many:,} groups / among {few:,}",
                result.measure(names[1]).median / result.measure(names[0]).median,
                "<=",
                TARGET_RATIO,
                f"the same {EXPIRED:,} removed from both stores (one live consumer a group)",
            )
        )
        result.checks.append(
            Check(
                f"longest server command (ms) of a prune among {many:,} groups",
                found[names[1]]["usec"] / 1_000,
                "<=",
                LONGEST_MS,
                f"latencystats p100 and SLOWLOG at 0, the least over {LONGEST_RUNS} runs",
            )
        )
    finally:
        client.flushall()
        client.close()
    return result

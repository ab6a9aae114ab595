"""Stuck consumers counted for the web service's views.

Whether a consumer is stuck (active, holding leases, no progress within its group's
progress budget: `redis_presence.model.is_stuck`) is known only from its stored value:
the library keeps no index of progress, and a group's counts (``ZCOUNT`` of its beats)
cannot say it. So a view reads the consumers of the groups it shows, a group at a time
(`iter_snapshot` of that group, in the package's bounded chunks, none of it kept), at most
STUCK_READS groups at once, and only groups with an active consumer (only an active
consumer can be stuck): the groups with a stuck consumer (``stuck=1``, the groups the
last count below found, read again) cost the consumers of the groups they show. The
fleet's total and each group's count (the
dashboard's Stuck card and column) cost one streamed read of every consumer
(`fleet_stuck`), which the totals' read makes at most every `PresenceData`'s
STUCK_EVERY_S: a consumer is stuck only after minutes without progress (5 by default),
so a count some seconds old loses nothing, and a page costs what it did.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

from redis_presence import AsyncRedisPresenceRegistry, PresenceState
from redis_presence.errors import PresenceDataError, PresenceDataWarning, PresenceProtocolError
from redis_presence.model import GroupPresence, LiveTally

STUCK_READS = 4
"""Groups whose consumers one view reads at once."""
STUCK_CHUNK = 50
"""Groups a page of groups with a stuck consumer takes from the index at a time."""


async def stuck_counts(
    registry: AsyncRedisPresenceRegistry,
    groups: Sequence[GroupPresence],
    *,
    now_ns: int,
    ttl_ms: int | None,
) -> dict[tuple[str, str], int | None]:
    """Each group's stuck consumers at `now_ns` (0 for a group without an active consumer,
    unread; None for one whose own data cannot be read, set aside with a warning)."""
    gate = asyncio.Semaphore(STUCK_READS)

    async def one(group: GroupPresence) -> int | None:
        if group.active == 0:
            return 0
        async with gate:
            stuck = 0
            rows = registry.iter_snapshot(
                now_ns=now_ns, ttl_ms=ttl_ms, queue=group.queue, group=group.group
            )
            try:
                async for row in rows:
                    stuck += row.stuck
            except PresenceDataError as exc:
                if isinstance(exc, PresenceProtocolError):
                    raise
                member = registry.plans.keys.group(group.queue, group.group).member
                warnings.warn(
                    PresenceDataWarning(f"redis-presence set aside {member}: {exc}"),
                    stacklevel=2,
                )
                return None
            return stuck

    found = await asyncio.gather(*(one(group) for group in groups))
    return {(g.queue, g.group): n for g, n in zip(groups, found, strict=True)}


class StuckCount(NamedTuple):
    """The fleet's stuck consumers at `read_at_ns`, in total and per group (the groups with
    one only); from the same read, each group's leases (`leases`) and those its expired
    consumers hold (`leases_expired`: work nobody will finish), the groups with any only."""

    total: int
    groups: Mapping[tuple[str, str], int]
    read_at_ns: int
    leases: Mapping[tuple[str, str], int] = MappingProxyType({})
    leases_expired: Mapping[tuple[str, str], int] = MappingProxyType({})
    live: Mapping[tuple[str, str], LiveFields] = MappingProxyType({})
    """From the same read (protocol version 2), each group's capacity, free slots, draining
    consumers, conflicts and stale draining ones (`LiveTally.fields`), the groups where a
    live consumer reports a capacity, drains or is in conflict only (else NO_LIVE)."""

    def live_of(self, key: tuple[str, str]) -> LiveFields:
        """`live`'s fields of a counted group (NO_LIVE: none reports anything)."""
        return self.live.get(key, NO_LIVE)


LiveFields = tuple[int | None, ...]
"""`GroupStats`' capacity, free, draining, conflicts and draining_stale, in that order."""
NO_LIVE: LiveFields = (None, None, 0, 0, 0)
"""The fields of a group none of whose live consumers reports a capacity, drains or is in
conflict."""


async def fleet_stuck(
    registry: AsyncRedisPresenceRegistry, *, now_ns: int, ttl_ms: int | None
) -> StuckCount:
    """The fleet's stuck consumers and leases at `now_ns`: one streamed read of every
    consumer (a chunk at a time, none kept); the leases, capacities, draining consumers and
    conflicts cost no command of their own (each row read for `stuck` holds them)."""
    found: dict[tuple[str, str], int] = {}
    leases: dict[tuple[str, str], int] = {}
    lost: dict[tuple[str, str], int] = {}
    live: dict[tuple[str, str], LiveTally] = {}
    async for row in registry.iter_snapshot(now_ns=now_ns, ttl_ms=ttl_ms):
        if row.capacity is not None or row.draining or row.conflict:  # `LiveTally` adds no other
            key = (row.queue, row.group)
            tally = live.get(key)
            if tally is None:
                tally = live[key] = LiveTally()
            tally.add(row)
        if row.stuck:
            key = (row.queue, row.group)
            found[key] = found.get(key, 0) + 1
        if row.lease_count:
            key = (row.queue, row.group)
            leases[key] = leases.get(key, 0) + row.lease_count
            if row.state is PresenceState.EXPIRED:
                lost[key] = lost.get(key, 0) + row.lease_count
    return StuckCount(
        sum(found.values()),
        MappingProxyType(found),
        now_ns,
        MappingProxyType(leases),
        MappingProxyType(lost),
        MappingProxyType({key: tally.fields() for key, tally in live.items()}),
    )


async def stuck_page(
    registry: AsyncRedisPresenceRegistry,
    options: dict[str, Any],
    *,
    edge: tuple[str, str] | None,
    backwards: bool,
    limit: int,
) -> tuple[list[tuple[GroupPresence, int]], bool]:
    """Up to `limit` groups with a stuck consumer after `edge` (before it, `backwards`),
    in the index's order, each with its stuck count, and whether more lie beyond: the
    groups `registry.group_page(**options)` passes (its `match` keeps those with an active
    consumer) are taken STUCK_CHUNK at a time and their consumers read until the page is
    full or the index ends."""
    picked: list[tuple[GroupPresence, int]] = []
    chunk = options | {"limit": STUCK_CHUNK}
    while True:
        side: dict[str, Any] = {"before": edge} if backwards else {"after": edge}
        found = await registry.group_page(**side, **chunk)
        groups = found.groups[::-1] if backwards else found.groups  # from the edge on
        counts = await stuck_counts(
            registry, groups, now_ns=options["now_ns"], ttl_ms=options["ttl_ms"]
        )
        for group in groups:
            stuck = counts[(group.queue, group.group)]
            if stuck:
                picked.append((group, stuck))
                if len(picked) > limit:
                    break
        if len(picked) > limit or not found.more or not groups:
            break
        edge = (groups[-1].queue, groups[-1].group)
    shown = picked[:limit]
    return (shown[::-1] if backwards else shown), len(picked) > limit


__all__ = [
    "STUCK_CHUNK",
    "STUCK_READS",
    "StuckCount",
    "fleet_stuck",
    "stuck_counts",
    "stuck_page",
]

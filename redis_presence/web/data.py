"""Every read the web service makes of the registry, in one place.

Routes, the metrics collector and the live feed call only this module, so a better read
in the library becomes a change here and nowhere else. What each read costs today, and
what replaces it:

* `PresenceData.groups` (the groups page, `/api/v1/groups`, `/metrics`) counts every group
  three times at one instant (active, active or stale, every tracked consumer), sent
  concurrently: `count_active_by_group()` visits groups, never consumers. Becomes one
  `registry.groups(now_ns, ttl_ms)` call (issue 14); a per-group oldest heartbeat in its
  rows would let `/metrics` report `redis_presence_oldest_heartbeat_age_seconds` without
  per-consumer metrics.
* `PresenceData.group` and `consumers` with a queue (the group page, filtered consumer
  lists and API) read `snapshot(queue=, group=)`: the library reads that queue's or that
  group's keys alone, so they cost what they return. Without a queue (the fleet-wide
  consumer list, a name search) and for `metrics` with per-consumer metrics on,
  `PresenceData.rows` is one whole snapshot, shared by every request for `read_cache_s`
  and read by one caller at a time (the others await it); pages filter it here.
* `PresenceData.changes` (each open event stream once per interval, and each cursor poll)
  is `registry.changes(cursor)`: the event logs written since the cursor and, per group,
  the heartbeats that crossed a line in the interval; what it costs grows with the
  changes and the groups it covers, not with the consumers.
* `PresenceData.ttl` is `registry.ttl_source()` (the shared TTL), unless ``--ttl-ms``
  fixed it, kept for TTL_REFRESH_S.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Sequence
from itertools import count, groupby
from typing import Any, NamedTuple

from redis.exceptions import RedisError

from redis_presence import AsyncRedisPresenceRegistry, ConsumerPresence, PresenceState
from redis_presence.errors import translate
from redis_presence.events import PresenceEvent

from .pages import ConsumerFilter, Cursor, Page, page_of

NS_PER_S = 1_000_000_000
EVERYONE_NOW_NS = 0
"""Counting "active" at `now_ns=0` counts every tracked consumer: every stored beat is then
in the reader's future, and a beat from the future has age 0 (the contract's rule)."""


class GroupStats(NamedTuple):
    """One tracked group: how many of its consumers are in each state."""

    queue: str
    group: str
    active: int
    stale: int
    expired: int
    oldest_heartbeat_ns: int | None = None
    """The least recent heartbeat of the group, where the read in use knows it."""

    @property
    def total(self) -> int:
        return self.active + self.stale + self.expired

    @property
    def nobody_reading(self) -> bool:
        """No active consumer: nobody is reading this group right now."""
        return self.active == 0

    def to_dict(self) -> dict[str, object]:
        return {
            "queue": self.queue,
            "group": self.group,
            "active": self.active,
            "stale": self.stale,
            "expired": self.expired,
        }


class TtlInUse(NamedTuple):
    """The TTL a read used and where it came from: ``"option"`` (``--ttl-ms``), or the
    shared TTL stored for the ``"group"``, stored for the ``"prefix"``, or the
    ``"default"`` (nothing stored)."""

    ttl_ms: int
    source: str

    def to_dict(self) -> dict[str, object]:
        return {"ttl_ms": self.ttl_ms, "ttl_source": self.source}


class Reading(NamedTuple):
    """One snapshot, the instant its ages were computed at and the TTL it reports."""

    serial: int
    now_ns: int
    rows: list[ConsumerPresence]
    ttl: TtlInUse


class GroupsReading(NamedTuple):
    now_ns: int
    groups: list[GroupStats]
    ttl: TtlInUse


def stats_from_rows(rows: Iterable[ConsumerPresence]) -> list[GroupStats]:
    """Per-group counts (and oldest heartbeat) of rows ordered by `(queue, group, ...)`."""
    stats = []
    for (queue, group), part in groupby(rows, key=lambda row: (row.queue, row.group)):
        tally = dict.fromkeys(PresenceState, 0)
        oldest: int | None = None
        for row in part:
            tally[row.state] += 1
            if oldest is None or row.last_heartbeat_ns < oldest:
                oldest = row.last_heartbeat_ns
        stats.append(
            GroupStats(
                queue,
                group,
                tally[PresenceState.ACTIVE],
                tally[PresenceState.STALE],
                tally[PresenceState.EXPIRED],
                oldest,
            )
        )
    return stats


def stats_from_counts(
    active: dict[tuple[str, str], int],
    active_or_stale: dict[tuple[str, str], int],
    tracked: dict[tuple[str, str], int],
) -> list[GroupStats]:
    """Per-group counts from three counts of one instant, ordered by `(queue, group)`.

    The three reads run concurrently, so a beat between them can make a difference
    negative for a moment: each count is clamped to zero."""
    stats = []
    for queue, group in sorted(tracked):
        key = (queue, group)
        a = active.get(key, 0)
        up_to_stale = max(a, active_or_stale.get(key, 0))
        stats.append(
            GroupStats(queue, group, a, up_to_stale - a, max(0, tracked[key] - up_to_stale))
        )
    return stats


def server_time_ns(reply: Any) -> int:
    """`TIME` as integer nanoseconds (a cluster client may answer per node)."""
    if isinstance(reply, dict):
        reply = next(iter(reply.values()))
    seconds, micros = reply
    return int(seconds) * NS_PER_S + int(micros) * 1_000


TTL_REFRESH_S = 5.0
"""How long the service trusts a shared TTL it read (a `set_ttl` shows within this)."""
MAX_CACHED_TTLS = 1_000


class PresenceData:
    """The registry reads of the web service (`registry` is opened and closed elsewhere).

    `ttl_ms` None means the shared TTL (`registry.ttl_source`, what the events use);
    `clock` fixes the instant of every read (tests); `None` means the Redis server's
    clock, as everywhere else in the package.
    """

    def __init__(
        self,
        registry: AsyncRedisPresenceRegistry,
        *,
        ttl_ms: int | None,
        clock: Callable[[], int] | None = None,
        read_cache_s: float = 0.5,
    ) -> None:
        self.registry = registry
        self.explicit_ttl_ms = ttl_ms
        self._clock = clock
        self._read_cache_s = read_cache_s
        self._reading: Reading | None = None
        self._read_at = 0.0
        self._inflight: asyncio.Task[Reading] | None = None
        self._serials = count(1)
        self._ttls: dict[tuple[str | None, str | None], tuple[TtlInUse, float]] = {}
        self.last_ttl = TtlInUse(ttl_ms, "option") if ttl_ms is not None else None
        """The TTL of the prefix the last read used (None before the first)."""

    async def now_ns(self) -> int:
        """The instant reads are aged at: the fixed clock, or the Redis server's `TIME`."""
        if self._clock is not None:
            return self._clock()
        return await self.ping()

    async def ping(self) -> int:
        """One round trip to Redis (`TIME`, which the reader role may run): its clock."""
        try:
            return server_time_ns(await self.registry.client.execute_command("TIME"))
        except RedisError as exc:
            raise translate(exc) from exc

    async def ttl(self, queue: str | None = None, group: str | None = None) -> TtlInUse:
        """The TTL reads of the prefix (or of one group) use: ``--ttl-ms``, else the shared
        TTL, read again after TTL_REFRESH_S."""
        if self.explicit_ttl_ms is not None:
            return TtlInUse(self.explicit_ttl_ms, "option")
        key = (queue, group)
        known = self._ttls.get(key)
        if known is not None and time.monotonic() - known[1] <= TTL_REFRESH_S:
            return known[0]
        ttl_ms, source = await self.registry.ttl_source(queue, group)
        found = TtlInUse(ttl_ms, source)
        if len(self._ttls) >= MAX_CACHED_TTLS:
            self._ttls.clear()
        self._ttls[key] = (found, time.monotonic())
        if queue is None:
            self.last_ttl = found
        return found

    @property
    def _read_ttl_ms(self) -> int | None:
        """The `ttl_ms` consumer reads pass: the option, else None (each group's shared TTL,
        the one its events use)."""
        return self.explicit_ttl_ms

    # -- whole groups -----------------------------------------------------------------

    async def groups(self) -> GroupsReading:
        """Every tracked group with its active, stale and expired counts (under the TTL of
        the prefix)."""
        ttl = await self.ttl()
        now = await self.now_ns()
        count_at = self.registry.count_active_by_group
        active, active_or_stale, tracked = await asyncio.gather(
            count_at(now_ns=now, ttl_ms=ttl.ttl_ms),
            count_at(now_ns=now, ttl_ms=2 * ttl.ttl_ms),
            count_at(now_ns=EVERYONE_NOW_NS, ttl_ms=1),
        )
        return GroupsReading(now, stats_from_counts(active, active_or_stale, tracked), ttl)

    # -- consumers --------------------------------------------------------------------

    async def rows(self, max_age_s: float | None = None) -> Reading:
        """A snapshot at most `max_age_s` old (default `read_cache_s`); concurrent callers
        share one read."""
        age_limit = self._read_cache_s if max_age_s is None else max_age_s
        if self._reading is not None and time.monotonic() - self._read_at <= age_limit:
            return self._reading
        task = self._inflight
        if task is None:
            task = self._inflight = asyncio.ensure_future(self._read())
            task.add_done_callback(self._read_done)
        return await asyncio.shield(task)

    def _read_done(self, task: asyncio.Task[Reading]) -> None:
        if self._inflight is task:
            self._inflight = None
        if not task.cancelled() and task.exception() is None:
            self._reading, self._read_at = task.result(), time.monotonic()

    async def _read(self) -> Reading:
        ttl = await self.ttl()
        now = await self.now_ns()
        rows = await self.registry.snapshot(now_ns=now, ttl_ms=self._read_ttl_ms)
        return Reading(next(self._serials), now, rows, ttl)

    async def _selected(self, queue: str | None, group: str | None) -> Reading:
        """The consumers of one queue (or one group): read by the library from that part of
        the index alone, fresh each time; the whole fleet comes from the shared snapshot."""
        if queue is None:
            return await self.rows()
        ttl = await self.ttl(queue, group) if group is not None else await self.ttl()
        now = await self.now_ns()
        rows = await self.registry.snapshot(
            now_ns=now, ttl_ms=self._read_ttl_ms, queue=queue, group=group
        )
        return Reading(0, now, rows, ttl)

    async def consumers(
        self, where: ConsumerFilter, *, cursor: Cursor | None, limit: int
    ) -> tuple[Reading, Page]:
        """One page of consumers matching `where`, and the read it comes from."""
        reading = await self._selected(where.queue, where.group)
        return reading, page_of(reading.rows, where, cursor=cursor, limit=limit)

    async def group(
        self,
        queue: str,
        group: str,
        *,
        states: frozenset[PresenceState],
        search: str | None,
        cursor: Cursor | None,
        limit: int,
    ) -> tuple[Reading, GroupStats | None, Page]:
        """One group's counts (None when it is not tracked) and a page of its consumers,
        from one read of that group alone."""
        reading = await self._selected(queue, group)
        stats = stats_from_rows(reading.rows)
        page = page_of(
            reading.rows,
            ConsumerFilter(queue, group, states, search),
            cursor=cursor,
            limit=limit,
        )
        return reading, (stats[0] if stats else None), page

    # -- metrics ----------------------------------------------------------------------

    async def metrics(
        self, *, per_consumer: bool
    ) -> tuple[int, TtlInUse, list[GroupStats], Sequence[ConsumerPresence]]:
        """What one scrape reports: group counts from the counts (no consumer is read), or,
        with per-consumer metrics, everything from one snapshot (oldest heartbeat too)."""
        if per_consumer:
            reading = await self.rows(max_age_s=0)
            return reading.now_ns, reading.ttl, stats_from_rows(reading.rows), reading.rows
        now, groups, ttl = await self.groups()
        return now, ttl, groups, ()

    # -- events -----------------------------------------------------------------------

    async def changes(
        self, cursor: str | None, *, queue: str | None = None, group: str | None = None
    ) -> tuple[list[PresenceEvent], str]:
        """`registry.changes`: the events after `cursor` up to now (the fixed clock, or the
        server's), and the cursor to go on from; its time-driven events use each group's
        shared TTL. `PresenceResyncRequired` when the cursor cannot go on."""
        now = None if self._clock is None else self._clock()
        return await self.registry.changes(cursor, now_ns=now, queue=queue, group=group)


__all__ = [
    "GroupStats",
    "PresenceData",
    "TtlInUse",
    "stats_from_rows",
]

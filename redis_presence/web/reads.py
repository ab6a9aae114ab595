"""Every read the web service makes of the registry, in one place.

Routes, the metrics collector and the live feed call only this module, so a better read
in the library becomes a change here and nowhere else. What each read costs today, and
what replaces it:

* `PresenceData.group_page` (the groups page, `/api/v1/groups`) is one
  `registry.group_page`: the index of groups read from the page's cursor and only the
  groups the page shows (and those its filters by counts refuse) counted. The groups
  page's totals are `PresenceData.totals`: one `groups()` read shared by every page, read
  again at most every `totals_cache_s` (in the background while the last one is younger
  than TOTALS_STALE_S).
* Stuck consumers need a read of consumers: see `stuck` (its module says what each costs).
* `PresenceData.groups` (the totals, `/metrics`) is one
  `registry.groups(now_ns, ttl_ms)`: every tracked or declared group with its counts under
  its own shared TTL (or ``--ttl-ms``), its `min_active` and `below`; it visits groups,
  never consumers. `/metrics` reads it with ``details=True``: each group's oldest
  heartbeat too (its sorted set's lowest score) and the leases its expired consumers hold
  (their range of the sorted set and their stored values alone); and with
  ``departures=True`` the stale consumers' values (of the groups that have some: whether
  they said they were draining, so a planned departure excuses a shortfall), or with
  ``capacity=True`` (``--capacity-metrics``) those of every live consumer (two commands a
  group more: protocol version 2's capacity, free slots, draining and conflicts); a stuck
  count and a group's leases in total need a read of every consumer (`--stuck-metrics`).
  The totals' count of stuck consumers (a read of every consumer) gives the pages' groups
  their capacity, draining and conflicts too, at no cost of its own.
* `PresenceData.group` and `consumers` with a queue (the group page, filtered consumer
  lists and API) read `snapshot(queue=, group=)`: the library reads that queue's or that
  group's keys alone, so they cost what they return. The group views read each row's
  metadata too (`with_meta=True`, one ``HMGET`` per chunk of the group), and the group's
  declared minimum (`expected()`, the declared groups alone); the consumer lists read
  metadata only when asked (``meta=1``). Without a queue (the fleet-wide consumer list, a
  name search) `consumers` reads `group_names()` (the index alone), then one group at a
  time (`iter_snapshot`, in the package's bounded chunks) from the cursor's group until
  its `PageCollector` holds the page, which is all it keeps (at most FLEET_READS such reads
  at once). For `metrics` with per-consumer metrics on,
  `PresenceData.rows` is one whole snapshot, shared by every caller for `read_cache_s`
  and read by one caller at a time (the others await it).
* `PresenceData.changes` (each open event stream once per interval, and each cursor poll)
  is `registry.changes(cursor)`: the event logs written since the cursor and, per group,
  the heartbeats that crossed a line in the interval; what it costs grows with the
  changes and the groups it covers, not with the consumers.
* `PresenceData.ttl` and `stuck_after_ms` are the registry's own `Planner.ttl_in_use` and
  `stuck_after_in_use` (unless ``--ttl-ms`` fixed the TTL): the shared settings its reads
  were counted with, from the planner's one cache of them (read again after TTL_CACHE_MS),
  so the TTL a page shows is the one its states used.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import warnings
from bisect import bisect_left
from collections.abc import Callable, Collection, Sequence
from itertools import count
from typing import Any

from redis_presence import AsyncRedisPresenceRegistry, ConsumerPresence, PresenceState
from redis_presence.errors import (
    PresenceDataError,
    PresenceDataWarning,
    PresenceMetaError,
    PresenceProtocolError,
)
from redis_presence.events import EventCursor, PresenceEvent, cursor_since
from redis_presence.model import groups_set_aside

from . import sorting
from .observed import Observed
from .paging import Cursor, Page, PageAsk, group_key
from .readings import (
    NO_META_ERRORS,
    UNSETTLED,
    GroupReading,
    GroupsPageReading,
    GroupsReading,
    GroupStats,
    GroupTotals,
    Reading,
    TtlInUse,
    stats_from_groups,
    stats_from_rows,
)
from .selection import ConsumerFilter, GroupFilter, PageCollector, page_of
from .stuck import StuckCount, fleet_stuck, stuck_page

FLEET_READS = 2
"""Streaming reads of the whole fleet (consumer lists without a queue) at once; the others
wait, so memory stays a few chunks whatever the number of requests."""
STREAM_CHUNK = 1_000
"""Rows handed to a page collector at a time."""

STUCK_EVERY_S = 30.0
"""How old the count of stuck consumers in the totals may be (a read of every consumer);
0 when the totals are read for every page (`totals_cache_s` 0)."""
OBSERVE_EVERY_S = 0.25
"""How often the event reads tell `Observed` what they found (the epoch in their cursor)."""
TOTALS_STALE_S = 60.0
"""How old the fleet's totals may be and still be shown while a fresh read of them runs in
the background; older (or none yet), a page waits for that read."""


def _passes(where: GroupFilter, totals: GroupTotals) -> Callable[[GroupStats], bool]:
    """Whether a group of `totals` passes `where` (its stuck and dead-leases filters by
    the totals' count)."""

    def passes(g: GroupStats) -> bool:
        key = (g.queue, g.group)
        return (
            (where.queue is None or g.queue == where.queue)
            and where.names(g.queue, g.group)
            and where.counts(g)
            and (not where.stuck or key in totals.stuck_groups)
            and (not where.dead_leases or key in totals.dead_lease_groups)
        )

    return passes


class PresenceData:
    """The registry reads of the web service (`registry` is opened and closed elsewhere).

    `ttl_ms` None means the shared TTL (`Planner.ttl_in_use`, what the events use);
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
        totals_cache_s: float = 5.0,
    ) -> None:
        self.registry = registry
        self.explicit_ttl_ms = ttl_ms
        self._clock = clock
        self._read_cache_s = read_cache_s
        self._reading: Reading | None = None
        self._read_at = 0.0
        self._inflight: asyncio.Task[Reading] | None = None
        self._serials = count(1)
        self._fleet_reads = asyncio.Semaphore(FLEET_READS)
        self._totals_cache_s = totals_cache_s
        self._totals: GroupTotals | None = None
        self._totals_at = 0.0
        self._totals_task: asyncio.Task[GroupTotals] | None = None
        self._stuck: tuple[StuckCount, str | None] | None = None
        self._stuck_at = -float("inf")
        self._stuck_cache_s = STUCK_EVERY_S if totals_cache_s > 0 else 0.0
        self._orders_of: GroupTotals | None = None
        self._orders: dict[sorting.Sort, sorting.Ordered] = {}
        self.last_ttl = TtlInUse(ttl_ms, "option") if ttl_ms is not None else None
        """The TTL of the prefix the last read used (None before the first)."""
        self.observed = Observed(clock)
        """What this service saw of Redis lately (outages, changes of data), for the charts."""
        self._observed_at = -float("inf")

    @property
    def fleet_reads(self) -> asyncio.Semaphore:
        """What a read of the whole fleet holds while it reads (at most FLEET_READS)."""
        return self._fleet_reads

    async def now_ns(self) -> int:
        """The instant reads are aged at: the fixed clock, or the Redis server's `TIME`."""
        if self._clock is not None:
            return self._clock()
        return await self.ping()

    async def ping(self) -> int:
        """One round trip to Redis (`TIME`, which the reader role may run): the registry's
        server clock (`clock_ns`, the one its reads age against)."""
        return await self.registry.clock_ns()

    async def ttl(self, queue: str | None = None, group: str | None = None) -> TtlInUse:
        """The TTL reads of the prefix (or of one group) use: ``--ttl-ms``, else the shared
        TTL as the registry's reads use it (`Planner.ttl_in_use`)."""
        if self.explicit_ttl_ms is not None:
            return TtlInUse(self.explicit_ttl_ms, "option")
        registry = self.registry
        found = TtlInUse(*await registry.execute(registry.plans.ttl_in_use(queue, group)))
        if queue is None:
            self.last_ttl = found
        return found

    async def stuck_after_ms(self, queue: str, group: str) -> int:
        """The progress budget a group's reads judge `stuck` with (its shared one, as the
        registry's reads use it: `Planner.stuck_after_in_use`)."""
        registry = self.registry
        budget, _ = await registry.execute(registry.plans.stuck_after_in_use(queue, group))
        return budget

    @property
    def _read_ttl_ms(self) -> int | None:
        """The `ttl_ms` consumer reads pass: the option, else None (each group's shared TTL,
        the one its events use)."""
        return self.explicit_ttl_ms

    # -- whole groups -----------------------------------------------------------------

    async def groups(self, *, details: bool = False, capacity: bool = False) -> GroupsReading:
        """Every tracked or declared group with its active, stale and expired counts (each
        under its own shared TTL, or ``--ttl-ms``), its `min_active` and `below`; `ttl` is
        the prefix's, what a group without a TTL of its own uses. With `details` (the
        metrics), also its oldest heartbeat and leases (`registry.groups(details=True)`);
        with `capacity`, its capacity, free slots, draining consumers and conflicts (the
        values of its live consumers, `registry.groups(capacity=True)`)."""
        ttl = await self.ttl()
        now = await self.now_ns()
        groups = await self.registry.groups(
            now_ns=now,
            ttl_ms=self._read_ttl_ms,
            details=details,
            capacity=capacity,
            departures=details,
        )
        return GroupsReading(now, stats_from_groups(groups), ttl)

    async def totals(self) -> GroupTotals:
        """The fleet's totals (groups, active, stale, expired, nobody reading, below their
        minimum): one read of every group (`groups()`, bounded per command), shared by every
        caller. Younger than `totals_cache_s`, the last one is the answer; younger than
        TOTALS_STALE_S, it is too while a fresh one is read in the background; else (or
        before the first, or with `totals_cache_s` 0) the caller awaits the read."""
        age = time.monotonic() - self._totals_at
        known = self._totals
        if known is not None and age <= self._totals_cache_s:
            return known
        task = self._totals_task
        if task is None:
            task = self._totals_task = asyncio.ensure_future(self._read_totals())
            task.add_done_callback(self._totals_done)
        if known is not None and self._totals_cache_s > 0 and age <= TOTALS_STALE_S:
            return known
        return await asyncio.shield(task)

    async def _read_totals(self) -> GroupTotals:
        """One read of every group, between two reads of the epoch marker: totals whose
        marker changed meanwhile (Redis lost or replaced its data during the read) are
        read once more, then marked UNSETTLED (no page agrees with them)."""
        for _ in range(2):
            before = await self.epoch()
            sizes = await self.index_sizes()
            now, groups, _ = await self.groups()
            stuck = await self._stuck_count(now, before)
            after = await self.epoch()
            if before == after:
                return GroupTotals.of(groups, now, after, stuck, sizes)
        return GroupTotals.of(groups, now, UNSETTLED, stuck, sizes)

    async def _stuck_count(self, now_ns: int, epoch: str | None) -> StuckCount:
        """The fleet's stuck consumers (`stuck.fleet_stuck`: a read of every consumer): the
        last count while it is of `epoch` and younger than `stuck_cache_s`, else a new one."""
        known = self._stuck
        age = time.monotonic() - self._stuck_at
        if known is not None and known[1] == epoch and age <= self._stuck_cache_s:
            return known[0]
        count = await fleet_stuck(self.registry, now_ns=now_ns, ttl_ms=self._read_ttl_ms)
        self._stuck, self._stuck_at = (count, epoch), time.monotonic()
        return count

    def forget_totals(self) -> None:
        """The totals read so far are not served again (Redis could not be reached since:
        what it holds now may be other data): the next page awaits a fresh read."""
        self._totals = None
        self._stuck = None

    async def totals_for(self, page: GroupsPageReading, known: GroupTotals) -> GroupTotals | None:
        """Totals that agree with `page` (`known`, the cached ones, if they do): of the
        page's epoch, and either read after it or holding what it shows. Else a fresh read
        begun after the page's; None when even that one is of another epoch (Redis lost or
        replaced its data between the two reads: the totals are being recounted)."""
        found: GroupTotals | None = known
        for _ in range(3):
            if (
                found is not None
                and found.epoch == page.epoch
                and (found.read_at_ns > page.now_ns or not found.contradicts(page.page.rows))
            ):
                return found
            self.forget_totals()
            found = await self.totals()
        return None

    async def index_sizes(self) -> tuple[int, int] | None:
        """The sizes of the index of groups and of declared groups (`Planner.index_sizes`:
        two ``ZCARD``; None for a registry that runs no plans)."""
        registry = self.registry
        if not hasattr(registry, "plans"):
            return None
        sizes: tuple[int, int] = await registry.execute(registry.plans.index_sizes())
        return sizes

    async def epoch(self) -> str | None:
        """The epoch marker Redis holds now (`Planner.epoch`; None without one, or for a
        registry that runs no plans)."""
        registry = self.registry
        if not hasattr(registry, "plans"):
            return None
        marker: str | None = await registry.execute(registry.plans.epoch())
        self.observed.answered(marker)
        return marker

    def _totals_done(self, task: asyncio.Task[GroupTotals]) -> None:
        if self._totals_task is task:
            self._totals_task = None
        if not task.cancelled() and task.exception() is None:
            self._totals, self._totals_at = task.result(), time.monotonic()

    async def aclose(self) -> None:
        """Stop a background read of the totals (the app's end)."""
        task, self._totals_task = self._totals_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    async def group_page(self, where: GroupFilter, *, page: PageAsk) -> GroupsPageReading:
        """One page of the tracked or declared groups matching `where`, in the index's
        order, after (or before) the cursor's group: the index is read from there and only
        the groups the page shows, and those `where` refuses by their counts, are counted
        (`registry.group_page`). A page before the cursor that reaches the first group is
        the first page. With `where.stuck`, the groups with a stuck consumer, each with
        its count, from a read of their consumers (`stuck.stuck_page`)."""
        ttl = await self.ttl()
        now = await self.now_ns()
        epoch = await self.epoch()
        options: dict[str, Any] = {
            "limit": page.limit,
            "queue": where.queue,
            "names": where.names if where.by_names else None,
            "match": where.counts if where.by_counts else None,
            # idle=1: only the groups the fleet index says may be unread are counted
            "attention": where.attention,
            "now_ns": now,
            "ttl_ms": self._read_ttl_ms,
        }
        edge = None if page.cursor is None else (page.cursor.key[0], page.cursor.key[1])
        backwards = page.before
        if where.stuck:
            return await self._stuck_page(options, edge, backwards, page.limit, ttl, epoch)
        if backwards:
            found = await self.registry.group_page(before=edge, **options)
        else:
            found = await self.registry.group_page(after=edge, **options)
        if backwards and not found.more and len(found.groups) < page.limit:
            found, backwards, edge = await self.registry.group_page(**options), False, None
        shown = Page.keyset(
            stats_from_groups(found.groups),
            group_key,
            more=found.more,
            backwards=backwards,
            from_cursor=edge is not None,
        )
        return GroupsPageReading(now, shown, ttl, epoch)

    async def groups_named(
        self, shown: Sequence[GroupStats], known: Collection[tuple[str, str]] | None = None
    ) -> GroupsPageReading:
        """The groups of `shown` (a page of a sorted list), read and counted now: the index
        is read from its start, and only they are counted (`registry.group_page`). With
        `known` (the groups the order was picked from), `strangers` says whether the walk
        of the index passed a group not among them (free: the names it walks anyway)."""
        ttl = await self.ttl()
        now = await self.now_ns()
        epoch = await self.epoch()
        queues = {g.queue for g in shown}
        picked = sorting.wanted(shown)
        strangers = False

        def names(queue: str, group: str) -> bool:
            nonlocal strangers
            if known is not None and (queue, group) not in known:
                strangers = True
            return picked(queue, group)

        found = await self.registry.group_page(
            limit=max(1, len(shown)),
            queue=next(iter(queues)) if len(queues) == 1 else None,
            names=names,
            now_ns=now,
            ttl_ms=self._read_ttl_ms,
        )
        rows = stats_from_groups(found.groups) if shown else []
        return GroupsPageReading(now, Page(rows, None, None), ttl, epoch, strangers)

    async def ordered_page(
        self, where: GroupFilter, order: sorting.Sort, *, page: PageAsk
    ) -> tuple[GroupTotals, GroupsPageReading] | None:
        """The shared totals (`totals`) and the page `page` asks of the groups `where`
        passes in `order`, chosen from the totals' rows (with their stuck consumers and
        leases) and read now (`groups_named`: they cost what a filtered page costs), then
        ordered again by what they hold now. Totals that no longer hold every group (the
        indexes' sizes changed since, the walk of the index passed a group they do not
        hold, a group they hold has gone, or the page is of another epoch) are read again;
        None when even those do not (Redis's data keeps changing: the caller shows the
        index's order, the totals recounting)."""
        for _ in range(3):
            cached = await self.totals()
            sizes = await self.index_sizes()
            if cached.epoch != UNSETTLED and cached.index_sizes == sizes:
                passing = self._ordered(cached, order).only(_passes(where, cached))
                chosen = sorting.page(passing, order, page)
                reading = await self.groups_named(chosen.rows, cached.known)
                gone = len(reading.page.rows) < len(chosen.rows)  # a group left since
                if reading.epoch == cached.epoch and not reading.strangers and not gone:
                    rows = sorting.reorder(cached.with_stuck(reading.page.rows), order)
                    shown = Page(rows, chosen.next_cursor, chosen.prev_cursor)
                    return cached, reading._replace(page=shown)
            self.forget_totals()
        return None

    def _ordered(self, totals: GroupTotals, order: sorting.Sort) -> sorting.Ordered:
        """Every group of `totals` in `order`, kept while they are the totals served (a
        page then filters them, not sorts them again); those of older totals dropped."""
        if self._orders_of is not totals:
            self._orders_of, self._orders = totals, {}
        found = self._orders.get(order)
        if found is None:
            found = self._orders[order] = sorting.ordered(totals.rows, order)
        return found

    async def _stuck_page(
        self,
        options: dict[str, Any],
        edge: tuple[str, str] | None,
        backwards: bool,
        limit: int,
        ttl: TtlInUse,
        epoch: str | None,
    ) -> GroupsPageReading:
        """`group_page` of the groups with a stuck consumer (`stuck.stuck_page`): those the
        last count found (`_stuck_count`), read again now: it costs what it shows."""
        counted = await self._stuck_count(options["now_ns"], epoch)
        found_by, names = counted.groups, options["names"]
        options["names"] = lambda q, g: (q, g) in found_by and (names is None or names(q, g))
        found, more = await stuck_page(
            self.registry, options, edge=edge, backwards=backwards, limit=limit
        )
        if backwards and not more and len(found) < limit:
            found, more = await stuck_page(
                self.registry, options, edge=None, backwards=False, limit=limit
            )
            backwards, edge = False, None
        stats = stats_from_groups(group for group, _ in found)
        rows = [g._replace(stuck=n) for g, (_, n) in zip(stats, found, strict=True)]
        shown = Page.keyset(
            rows, group_key, more=more, backwards=backwards, from_cursor=edge is not None
        )
        return GroupsPageReading(options["now_ns"], shown, ttl, epoch)

    async def declared(self, queue: str, group: str) -> int | None:
        """The `min_active` the group was declared with (None: not declared)."""
        return (await self.registry.expected()).get((queue, group))

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

    async def _selected(self, queue: str, group: str | None, *, with_meta: bool = False) -> Reading:
        """The consumers of one queue (or one group): read by the library from that part of
        the index alone, fresh each time."""
        ttl = await self.ttl(queue, group) if group is not None else await self.ttl()
        now = await self.now_ns()
        try:
            rows = await self.registry.snapshot(
                now_ns=now, ttl_ms=self._read_ttl_ms, queue=queue, group=group, with_meta=with_meta
            )
        except PresenceMetaError as exc:  # shown without those consumers' metadata, marked
            return Reading(0, now, exc.rows, ttl, exc.unreadable)
        return Reading(0, now, rows, ttl)

    async def consumers(
        self,
        where: ConsumerFilter,
        *,
        page: PageAsk,
        with_meta: bool = False,
    ) -> tuple[Reading, Page[ConsumerPresence]]:
        """One page of consumers matching `where`, and the read it comes from (`with_meta`:
        their metadata read too). Without a queue (the whole fleet, a name search) the rows
        are streamed and only the page is kept (`Reading.rows` holds just it)."""
        if where.queue is None:
            return await self._streamed(
                where, cursor=page.cursor, limit=page.limit, with_meta=with_meta
            )
        reading = await self._selected(where.queue, where.group, with_meta=with_meta)
        return reading, page_of(reading.rows, where, cursor=page.cursor, limit=page.limit)

    async def _streamed(
        self, where: ConsumerFilter, *, cursor: Cursor | None, limit: int, with_meta: bool
    ) -> tuple[Reading, Page[ConsumerPresence]]:
        """A page of the whole fleet, holding the page and one chunk of one group, never the
        fleet: the groups' names (`registry.group_names()`: the index alone, no group
        counted) are read, then the groups one at a time (`iter_snapshot` of that group, in
        the package's bounded chunks) from the cursor's group towards the page's side until
        the page is full, then the other way until a match shows there is a page beyond the
        cursor (any listed group has a consumer, so without a filter of states or names the
        first one does). At most FLEET_READS of them at once. A group whose own data cannot
        be read (a key of another type, a shared setting) is set aside, as a fleet read
        sets it aside. With `where.stuck`, only the groups the last stuck count found (as
        ``/?stuck=1``: `_stuck_page`), not every group of the fleet."""
        ttl = await self.ttl()
        # The prefix's settings first (cached): a spoilt one of them fails the whole list,
        # so a group read's data error below is that group's own.
        registry = self.registry
        await registry.execute(registry.plans.stuck_after_in_use())
        now = await self.now_ns()
        holding = None
        if where.stuck:
            holding = (await self._stuck_count(now, await self.epoch())).groups
        collector = PageCollector(where, cursor=cursor, limit=limit)
        meta_errors: dict[tuple[str, str, str], str] = {}
        async with self._fleet_reads:
            keys = [
                key
                for key in await self.registry.group_names()
                if (where.group is None or key[1] == where.group)
                and (holding is None or key in holding)
            ]
            start = 0 if cursor is None else bisect_left(keys, cursor.key[:2])
            if collector.before:
                page_side, other_side = keys[start::-1] if keys else [], keys[start + 1 :]
            else:
                page_side, other_side = keys[start:], keys[start - 1 :: -1] if start else []
            for key in page_side:
                await self._feed(collector, key, now, with_meta, meta_errors)
                if collector.full:
                    break
            for key in other_side:
                if collector.beyond:
                    break
                if not where.by_rows:
                    collector.mark_beyond()
                    break
                await self._feed(collector, key, now, with_meta, meta_errors)
        page = collector.page()
        shown = {row.key for row in page.rows}
        errors = {key: why for key, why in meta_errors.items() if key in shown}
        return Reading(0, now, page.rows, ttl, errors or NO_META_ERRORS), page

    async def _feed(
        self,
        collector: PageCollector,
        key: tuple[str, str],
        now: int,
        with_meta: bool,
        meta_errors: dict[tuple[str, str, str], str],
    ) -> None:
        """Every row of one group to `collector`, STREAM_CHUNK rows at a time."""
        rows = self.registry.iter_snapshot(
            now_ns=now,
            ttl_ms=self._read_ttl_ms,
            queue=key[0],
            group=key[1],
            with_meta=with_meta,
        )
        chunk: list[ConsumerPresence] = []
        try:
            async for row in rows:
                chunk.append(row)
                if len(chunk) >= STREAM_CHUNK:
                    collector.feed(chunk)
                    chunk = []
        except PresenceMetaError as exc:  # raised once every row was handed out
            meta_errors.update(exc.unreadable)
        except PresenceDataError as exc:  # this group's own data: set aside, and said
            if isinstance(exc, PresenceProtocolError):
                raise
            member = self.registry.plans.keys.group(*key).member
            warnings.warn(
                PresenceDataWarning(f"redis-presence set aside {member}: {exc}"), stacklevel=2
            )
        collector.feed(chunk)

    async def group(
        self,
        queue: str,
        group: str,
        *,
        states: frozenset[PresenceState],
        search: str | None,
        page: PageAsk,
        stuck: bool = False,
        meta: tuple[str, str | None] | None = None,
    ) -> GroupReading:
        """One group's counts (None when it is neither tracked nor declared) and a page of
        its consumers with their metadata, from one read of that group alone (and of the
        declared groups, for its minimum)."""
        reading, minimum, stuck_after = await asyncio.gather(
            self._selected(queue, group, with_meta=True),
            self.declared(queue, group),
            self.stuck_after_ms(queue, group),
        )
        declared = {} if minimum is None else {(queue, group): minimum}
        stats = stats_from_rows(reading.rows, declared)
        where = ConsumerFilter(queue, group, states, search, stuck, meta)
        shown = page_of(reading.rows, where, cursor=page.cursor, limit=page.limit)
        return GroupReading(reading, (stats[0] if stats else None), shown, stuck_after)

    # -- metrics ----------------------------------------------------------------------

    async def metrics(
        self, *, read_consumers: bool, capacity: bool = False
    ) -> tuple[int, TtlInUse, list[GroupStats], Sequence[ConsumerPresence]]:
        """What one scrape reports: every tracked or declared group from `groups()` (no
        expired consumer's value is read; with `capacity`, the values of the live ones, for
        capacity, free slots, draining and conflicts), or, with `read_consumers`, from one
        snapshot (and the declared groups): the stuck counts and oldest heartbeats too, and
        the rows of per-consumer metrics."""
        if not read_consumers:
            now, groups, ttl = await self.groups(details=True, capacity=capacity)
            return now, ttl, groups, ()
        reading, declared = await asyncio.gather(self.rows(max_age_s=0), self.registry.expected())
        # A group the snapshot set aside is left out, never shown as one without consumers.
        aside = groups_set_aside(getattr(reading.rows, "skipped", ()))
        shown = {key: least for key, least in declared.items() if key not in aside}
        stats = stats_from_rows(reading.rows, shown)
        return reading.now_ns, reading.ttl, stats, reading.rows

    # -- events -----------------------------------------------------------------------

    async def rows_of(
        self, keys: Sequence[tuple[str, str, str]]
    ) -> tuple[int, list[ConsumerPresence]]:
        """The instant of the read (the fixed clock, or the server's) and the current rows
        of the named consumers still tracked (`Planner.rows_of`: one round trip)."""
        now_ns, rows = await self.registry.execute(self.registry.plans.rows_of(keys))
        return (now_ns if self._clock is None else self._clock()), rows

    async def cursor_since(
        self, since_ns: int, *, queue: str | None = None, group: str | None = None
    ) -> str:
        """A cursor whose events start after `since_ns` (`events.cursor_since`), under the
        epoch marker Redis holds now (one ``GET``)."""
        epoch = await self.epoch()
        prefix = self.registry.plans.keys.prefix
        return cursor_since(since_ns, epoch=epoch, prefix=prefix, queue=queue, group=group)

    async def check_cursor(
        self, cursor: str, *, queue: str | None = None, group: str | None = None
    ) -> None:
        """`Planner.check_cursor` at now (the fixed clock, or the server's): a `ValueError`
        naming `cursor` unless `changes` could go on from it with this filter."""
        now_ns = None if self._clock is None else self._clock()
        plan = self.registry.plans.check_cursor(cursor, now_ns=now_ns, queue=queue, group=group)
        await self.registry.execute(plan)

    async def changes(
        self,
        cursor: str | None,
        *,
        queue: str | None = None,
        group: str | None = None,
        now_ns: int | None = None,
        limit: int | None = None,
    ) -> tuple[list[PresenceEvent], str]:
        """`registry.changes`: the events after `cursor` up to `now_ns` (None: now, the fixed
        clock or the server's), and the cursor to go on from; its time-driven events use
        each group's shared TTL. `limit` pages the answer where the registry does (its
        answer's ``more`` then says whether more are due at once).
        `PresenceResyncRequired` when the cursor cannot go on."""
        if now_ns is None:
            now_ns = None if self._clock is None else self._clock()
        options: dict[str, Any] = {} if limit is None else {"limit": limit}
        found = await self.registry.changes(
            cursor, now_ns=now_ns, queue=queue, group=group, **options
        )
        seen = time.monotonic()
        if seen - self._observed_at >= OBSERVE_EVERY_S:  # a decode costs ~60 µs: not per poller
            self._observed_at = seen
            self.observed.answered(EventCursor.decode(found[1]).epoch)  # the marker it read
        return found


__all__ = [
    "GroupReading",
    "GroupStats",
    "GroupTotals",
    "PresenceData",
    "TtlInUse",
    "stats_from_rows",
]

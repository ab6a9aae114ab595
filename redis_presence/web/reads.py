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
* `PresenceData.groups` (the totals, `/metrics`) is one
  `registry.groups(now_ns, ttl_ms)`: every tracked or declared group with its counts under
  its own shared TTL (or ``--ttl-ms``), its `min_active` and `below`; it visits groups,
  never consumers. `/metrics` reads it with ``details=True``: each group's oldest
  heartbeat too (its sorted set's lowest score) and the leases its expired consumers hold
  (their range of the sorted set and their stored values alone); a stuck count and a
  group's leases in total need a read of every consumer (`--stuck-metrics`).
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
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import count, groupby
from types import MappingProxyType
from typing import Any, NamedTuple

from redis_presence import AsyncRedisPresenceRegistry, ConsumerPresence, PresenceState
from redis_presence.errors import (
    PresenceDataError,
    PresenceDataWarning,
    PresenceMetaError,
    PresenceProtocolError,
)
from redis_presence.events import EventCursor, PresenceEvent
from redis_presence.model import GroupPresence, groups_set_aside
from redis_presence.verdict import GroupFacts, GroupVerdict, Verdict, judge, verdict_of

from . import sorting
from .observed import Observed
from .paging import Cursor, Page, PageAsk, group_key
from .selection import ConsumerFilter, GroupFilter, PageCollector, page_of


class GroupStats(NamedTuple):
    """One tracked group: how many of its consumers are in each state."""

    queue: str
    group: str
    active: int
    stale: int
    expired: int
    oldest_heartbeat_ns: int | None = None
    """The least recent heartbeat of the group, where the read in use knows it."""
    min_active: int | None = None
    """The minimum it was declared with (`expect`); None: not declared."""
    stuck: int | None = None
    """Its stuck consumers, where the read in use knows them (a read of its consumers)."""
    leases: int | None = None
    """The leases its consumers hold, where the read in use knows them."""
    leases_expired: int | None = None
    """The leases its expired consumers hold (work nobody will finish), likewise."""

    @property
    def total(self) -> int:
        return self.active + self.stale + self.expired

    @property
    def nobody_reading(self) -> bool:
        """No active consumer: nobody is reading this group right now."""
        return self.active == 0

    @property
    def below(self) -> bool:
        """Declared, with fewer active consumers than its `min_active`."""
        return self.min_active is not None and self.active < self.min_active

    @property
    def attention(self) -> bool:
        """Shown first and marked: below its declared minimum, or nobody reading it."""
        return self.below or self.nobody_reading

    @property
    def judged(self) -> GroupVerdict:
        """Its verdict and reason from what the read in use knows (`STALLED` only where
        it read the consumers' progress: `stuck` not None)."""
        return judge(GroupFacts(self.active, self.stale, self.expired, self.min_active, self.stuck))

    @property
    def verdict(self) -> Verdict:
        """`judged`'s verdict alone, without its reason (for every group of a scrape)."""
        return verdict_of(
            GroupFacts(self.active, self.stale, self.expired, self.min_active, self.stuck)
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "queue": self.queue,
            "group": self.group,
            "active": self.active,
            "stale": self.stale,
            "expired": self.expired,
            "min_active": self.min_active,
            "below": self.below,
            **self.judged.to_dict(),
        }


class TtlInUse(NamedTuple):
    """The TTL a read used and where it came from: ``"option"`` (``--ttl-ms``), or the
    shared TTL stored for the ``"group"``, stored for the ``"prefix"``, or the
    ``"default"`` (nothing stored)."""

    ttl_ms: int
    source: str

    def to_dict(self) -> dict[str, object]:
        return {"ttl_ms": self.ttl_ms, "ttl_source": self.source}


NO_META_ERRORS: Mapping[tuple[str, str, str], str] = MappingProxyType({})


class Reading(NamedTuple):
    """One snapshot, the instant its ages were computed at and the TTL it reports; for a
    read of metadata, why each consumer whose metadata could not be read (another
    program's) has none (`PresenceMetaError.unreadable`)."""

    serial: int
    now_ns: int
    rows: list[ConsumerPresence]
    ttl: TtlInUse
    meta_errors: Mapping[tuple[str, str, str], str] = NO_META_ERRORS


class GroupReading(NamedTuple):
    """One group's consumers (a page of them), its counts (None: neither tracked nor
    declared) and the progress budget its `stuck` flags were judged with."""

    reading: Reading
    stats: GroupStats | None
    page: Page[ConsumerPresence]
    stuck_after_ms: int


class GroupsReading(NamedTuple):
    now_ns: int
    groups: list[GroupStats]
    ttl: TtlInUse


UNSETTLED = "\x00unsettled"
"""The epoch of totals whose read saw the epoch marker change under it (never a page's)."""


class GroupTotals(NamedTuple):
    """The fleet's totals from one read of every group (`registry.groups()`), the instant
    it was aged at (`read_at_ns`, the server's clock) and the epoch marker it was read
    under (`Planner.epoch`)."""

    groups: int
    active: int
    stale: int
    expired: int
    nobody_reading: int
    below: int
    read_at_ns: int
    epoch: str | None = None
    rows: tuple[GroupStats, ...] = ()
    """Every group's counts, as read (what a page sorted by a count is ordered by)."""

    @classmethod
    def of(
        cls, groups: Sequence[GroupStats], read_at_ns: int, epoch: str | None = None
    ) -> GroupTotals:
        return cls(
            len(groups),
            sum(g.active for g in groups),
            sum(g.stale for g in groups),
            sum(g.expired for g in groups),
            sum(g.nobody_reading for g in groups),
            sum(g.below for g in groups),
            read_at_ns,
            epoch,
            tuple(groups),
        )

    def contradicts(self, rows: Sequence[GroupStats]) -> bool:
        """Whether `rows` (a page of groups, read later) hold more than these totals count,
        in any count: they cannot both be true of one instant."""
        sums = (
            len(rows),
            sum(g.active for g in rows),
            sum(g.stale for g in rows),
            sum(g.expired for g in rows),
            sum(g.nobody_reading for g in rows),
            sum(g.below for g in rows),
        )
        return any(shown > total for shown, total in zip(sums, self[:6], strict=True))

    def to_dict(self) -> dict[str, int]:
        fields = self._asdict()
        del fields["epoch"], fields["rows"]
        return fields


class GroupsPageReading(NamedTuple):
    """One page of groups, the instant it was read at, the TTL of the prefix and the epoch
    marker it was read under."""

    now_ns: int
    page: Page[GroupStats]
    ttl: TtlInUse
    epoch: str | None = None


def stats_from_rows(
    rows: Iterable[ConsumerPresence], declared: Mapping[tuple[str, str], int] | None = None
) -> list[GroupStats]:
    """Per-group counts, oldest heartbeat and stuck consumers of rows ordered by `(queue,
    group, ...)`; with `declared` (`expected()`), its groups too, with their minimum (a
    declared group without a row has zero of everything)."""
    stats = []
    for (queue, group), part in groupby(rows, key=lambda row: (row.queue, row.group)):
        tally = dict.fromkeys(PresenceState, 0)
        oldest: int | None = None
        stuck = leases = lost = 0
        for row in part:
            tally[row.state] += 1
            stuck += row.stuck
            leases += row.lease_count
            if row.state is PresenceState.EXPIRED:
                lost += row.lease_count
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
                None if declared is None else declared.get((queue, group)),
                stuck,
                leases,
                lost,
            )
        )
    if declared:
        seen = {(s.queue, s.group) for s in stats}
        stats += [
            GroupStats(queue, group, 0, 0, 0, None, minimum, 0, 0, 0)
            for (queue, group), minimum in declared.items()
            if (queue, group) not in seen
        ]
        stats.sort(key=lambda s: (s.queue, s.group))
    return stats


def stats_from_groups(groups: Iterable[GroupPresence]) -> list[GroupStats]:
    """`registry.groups()` rows as `GroupStats` (the order kept: by `(queue, group)`)."""
    return [
        GroupStats(
            g.queue,
            g.group,
            g.active,
            g.stale,
            g.expired,
            g.oldest_heartbeat_ns,
            g.min_active,
            None,
            None,
            g.leases_expired,
        )
        for g in groups
    ]


FLEET_READS = 2
"""Streaming reads of the whole fleet (consumer lists without a queue) at once; the others
wait, so memory stays a few chunks whatever the number of requests."""
STREAM_CHUNK = 1_000
"""Rows handed to a page collector at a time."""

OBSERVE_EVERY_S = 0.25
"""How often the event reads tell `Observed` what they found (the epoch in their cursor)."""
TOTALS_STALE_S = 60.0
"""How old the fleet's totals may be and still be shown while a fresh read of them runs in
the background; older (or none yet), a page waits for that read."""


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
        self.last_ttl = TtlInUse(ttl_ms, "option") if ttl_ms is not None else None
        """The TTL of the prefix the last read used (None before the first)."""
        self.observed = Observed(clock)
        """What this service saw of Redis lately (outages, changes of data), for the charts."""
        self._observed_at = -float("inf")

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

    async def groups(self, *, details: bool = False) -> GroupsReading:
        """Every tracked or declared group with its active, stale and expired counts (each
        under its own shared TTL, or ``--ttl-ms``), its `min_active` and `below`; `ttl` is
        the prefix's, what a group without a TTL of its own uses. With `details` (the
        metrics), also its oldest heartbeat and leases (`registry.groups(details=True)`)."""
        ttl = await self.ttl()
        now = await self.now_ns()
        groups = await self.registry.groups(now_ns=now, ttl_ms=self._read_ttl_ms, details=details)
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
            now, groups, _ = await self.groups()
            after = await self.epoch()
            if before == after:
                return GroupTotals.of(groups, now, after)
        return GroupTotals.of(groups, now, UNSETTLED)

    def forget_totals(self) -> None:
        """The totals read so far are not served again (Redis could not be reached since:
        what it holds now may be other data): the next page awaits a fresh read."""
        self._totals = None

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
        the first page."""
        ttl = await self.ttl()
        now = await self.now_ns()
        epoch = await self.epoch()
        options: dict[str, Any] = {
            "limit": page.limit,
            "queue": where.queue,
            "names": where.names if where.by_names else None,
            "match": where.counts if where.by_counts else None,
            "now_ns": now,
            "ttl_ms": self._read_ttl_ms,
        }
        edge = None if page.cursor is None else (page.cursor.key[0], page.cursor.key[1])
        backwards = page.before
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

    async def groups_named(self, shown: Sequence[GroupStats]) -> GroupsPageReading:
        """The groups of `shown` (a page of a sorted list), read and counted now: the index
        is read from its start, and only they are counted (`registry.group_page`)."""
        ttl = await self.ttl()
        now = await self.now_ns()
        epoch = await self.epoch()
        queues = {g.queue for g in shown}
        found = await self.registry.group_page(
            limit=max(1, len(shown)),
            queue=next(iter(queues)) if len(queues) == 1 else None,
            names=sorting.wanted(shown),
            now_ns=now,
            ttl_ms=self._read_ttl_ms,
        )
        rows = stats_from_groups(found.groups) if shown else []
        return GroupsPageReading(now, Page(rows, None, None), ttl, epoch)

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
        sets it aside."""
        ttl = await self.ttl()
        # The prefix's settings first (cached): a spoilt one of them fails the whole list,
        # so a group read's data error below is that group's own.
        registry = self.registry
        await registry.execute(registry.plans.stuck_after_in_use())
        now = await self.now_ns()
        collector = PageCollector(where, cursor=cursor, limit=limit)
        meta_errors: dict[tuple[str, str, str], str] = {}
        async with self._fleet_reads:
            keys = [
                key
                for key in await self.registry.group_names()
                if where.group is None or key[1] == where.group
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
                if where.search is None and not where.states:
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
        where = ConsumerFilter(queue, group, states, search)
        shown = page_of(reading.rows, where, cursor=page.cursor, limit=page.limit)
        return GroupReading(reading, (stats[0] if stats else None), shown, stuck_after)

    # -- metrics ----------------------------------------------------------------------

    async def metrics(
        self, *, read_consumers: bool
    ) -> tuple[int, TtlInUse, list[GroupStats], Sequence[ConsumerPresence]]:
        """What one scrape reports: every tracked or declared group from `groups()` (no
        consumer is read), or, with `read_consumers`, from one snapshot (and the declared
        groups): the stuck counts and oldest heartbeats too, and the rows of per-consumer
        metrics."""
        if not read_consumers:
            now, groups, ttl = await self.groups(details=True)
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

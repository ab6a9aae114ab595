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
* `ChangeFeed` (SSE and cursor polls) diffs successive `rows` readings (`events.diff`)
  while someone listens; `refresh`, `listen` and `poll` become `registry.follow()` and
  `registry.changes(cursor)` (issue 12), whose cursors survive a restart, and
  `events.WebEvent` becomes `PresenceEvent`.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import count, groupby
from typing import Any, NamedTuple

from redis.exceptions import RedisError

from redis_presence import AsyncRedisPresenceRegistry, ConsumerPresence, PresenceState
from redis_presence.errors import PresenceError, translate

from .events import KINDS, Key, WebEvent, diff
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


class Reading(NamedTuple):
    """One snapshot and the instant its ages were computed at."""

    serial: int
    now_ns: int
    rows: list[ConsumerPresence]


class GroupsReading(NamedTuple):
    now_ns: int
    groups: list[GroupStats]


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


class PresenceData:
    """The registry reads of the web service (`registry` is opened and closed elsewhere).

    `clock` fixes the instant of every read (tests); `None` means the Redis server's
    clock, as everywhere else in the package.
    """

    def __init__(
        self,
        registry: AsyncRedisPresenceRegistry,
        *,
        ttl_ms: int,
        clock: Callable[[], int] | None = None,
        read_cache_s: float = 0.5,
    ) -> None:
        self.registry = registry
        self.ttl_ms = ttl_ms
        self._clock = clock
        self._read_cache_s = read_cache_s
        self._reading: Reading | None = None
        self._read_at = 0.0
        self._inflight: asyncio.Task[Reading] | None = None
        self._serials = count(1)

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

    # -- whole groups -----------------------------------------------------------------

    async def groups(self) -> GroupsReading:
        """Every tracked group with its active, stale and expired counts."""
        now = await self.now_ns()
        count_at = self.registry.count_active_by_group
        active, active_or_stale, tracked = await asyncio.gather(
            count_at(now_ns=now, ttl_ms=self.ttl_ms),
            count_at(now_ns=now, ttl_ms=2 * self.ttl_ms),
            count_at(now_ns=EVERYONE_NOW_NS, ttl_ms=1),
        )
        return GroupsReading(now, stats_from_counts(active, active_or_stale, tracked))

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
        now = await self.now_ns()
        rows = await self.registry.snapshot(now_ns=now, ttl_ms=self.ttl_ms)
        return Reading(next(self._serials), now, rows)

    async def _selected(self, queue: str | None, group: str | None) -> Reading:
        """The consumers of one queue (or one group): read by the library from that part of
        the index alone, fresh each time; the whole fleet comes from the shared snapshot."""
        if queue is None:
            return await self.rows()
        now = await self.now_ns()
        rows = await self.registry.snapshot(
            now_ns=now, ttl_ms=self.ttl_ms, queue=queue, group=group
        )
        return Reading(0, now, rows)

    async def consumers(
        self, where: ConsumerFilter, *, cursor: Cursor | None, limit: int
    ) -> tuple[int, Page]:
        """One page of consumers matching `where`, and the instant of the read."""
        reading = await self._selected(where.queue, where.group)
        return reading.now_ns, page_of(reading.rows, where, cursor=cursor, limit=limit)

    async def group(
        self,
        queue: str,
        group: str,
        *,
        states: frozenset[PresenceState],
        search: str | None,
        cursor: Cursor | None,
        limit: int,
    ) -> tuple[int, GroupStats | None, Page]:
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
        return reading.now_ns, (stats[0] if stats else None), page

    # -- metrics ----------------------------------------------------------------------

    async def metrics(
        self, *, per_consumer: bool
    ) -> tuple[int, list[GroupStats], Sequence[ConsumerPresence]]:
        """What one scrape reports: group counts from the counts (no consumer is read), or,
        with per-consumer metrics, everything from one snapshot (oldest heartbeat too)."""
        if per_consumer:
            reading = await self.rows(max_age_s=0)
            return reading.now_ns, stats_from_rows(reading.rows), reading.rows
        now, groups = await self.groups()
        return now, groups, ()


# -- the live feed ------------------------------------------------------------------------


class ResyncRequired(Exception):
    """The cursor is older than what the feed keeps, or from another process: take a fresh
    read and a fresh cursor."""


@dataclass(frozen=True)
class FeedStatus:
    """Whether the feed's last read of Redis worked (`message` says why not)."""

    redis_up: bool
    message: str = ""


@dataclass
class _Listener:
    queue: str | None
    group: str | None

    def wants(self, event: WebEvent) -> bool:
        return (self.queue is None or event.queue == self.queue) and (
            self.group is None or event.group == self.group
        )


FeedItem = tuple[str, Any]
"""`("event", (cursor, WebEvent))`, `("status", FeedStatus)`, `("resync", reason)` or
`("open", cursor)`."""


@dataclass
class ChangeFeed:
    """Transitions of the fleet for every SSE listener and cursor poll, from one source.

    Events get increasing sequence numbers in a bounded in-memory log; a cursor is
    ``<feed id>.<sequence>``, so a cursor from another process (or one the log no longer
    reaches) asks for a resync instead of silently missing events. The source reads while
    an SSE listener is connected, and once per poll.
    """

    data: PresenceData
    interval_s: float = 0.5
    retention: int = 10_000
    _id: str = field(default_factory=lambda: secrets.token_hex(4))
    _seq: int = 0
    _log: deque[tuple[int, WebEvent]] = field(default_factory=deque)
    _baseline: dict[Key, ConsumerPresence] | None = None
    _seen_serial: int = -1
    _status: FeedStatus = field(default_factory=lambda: FeedStatus(True))
    _listeners: int = 0
    _task: asyncio.Task[None] | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    @property
    def status(self) -> FeedStatus:
        return self._status

    def cursor(self, seq: int | None = None) -> str:
        return f"{self._id}.{self._seq if seq is None else seq}"

    def _position(self, cursor: str | None) -> int:
        """The sequence number a cursor stands for; `ResyncRequired` if this feed cannot
        continue from it, `ValueError` if it is no cursor at all."""
        if cursor is None:
            return self._seq
        feed, _, seq = cursor.partition(".")
        if not seq.isdigit() or not feed:
            raise ValueError("cursor must be a cursor this API returned")
        if feed != self._id or int(seq) > self._seq:
            raise ResyncRequired("the cursor is from another run of the service")
        position = int(seq)
        if position < self._seq and (not self._log or self._log[0][0] > position + 1):
            raise ResyncRequired("the cursor is older than the events the service keeps")
        return position

    def validate(self, cursor: str | None) -> None:
        """`ValueError` if `cursor` is no cursor at all (a stale one is not an error)."""
        with contextlib.suppress(ResyncRequired):
            self._position(cursor)

    def _after(self, position: int) -> list[tuple[int, WebEvent]]:
        return [(seq, event) for seq, event in self._log if seq > position]

    async def refresh(self) -> None:
        """Read (or reuse the read pages share) and log what changed since the last read
        the feed saw."""
        async with self._lock:
            try:
                reading = await self.data.rows()
            except PresenceError as exc:
                await self._set_status(FeedStatus(False, str(exc)))
                raise
            await self._set_status(FeedStatus(True))
            if reading.serial <= self._seen_serial:
                return
            self._seen_serial = reading.serial
            if self._baseline is None:
                self._baseline = {row.key: row for row in reading.rows}
                return
            events, self._baseline = diff(
                self._baseline, reading.rows, after_now_ns=reading.now_ns, ttl_ms=self.data.ttl_ms
            )
            if events:
                for event in events:
                    self._seq += 1
                    self._log.append((self._seq, event))
                while len(self._log) > self.retention:
                    self._log.popleft()
                async with self._changed:
                    self._changed.notify_all()

    async def _set_status(self, status: FeedStatus) -> None:
        if status != self._status:
            self._status = status
            async with self._changed:
                self._changed.notify_all()

    async def poll(
        self, cursor: str | None, *, queue: str | None = None, group: str | None = None
    ) -> tuple[list[WebEvent], str]:
        """Events after `cursor` (none, and the current cursor, when it is None)."""
        position = self._position(cursor)
        await self.refresh()
        listener = _Listener(queue, group)
        if cursor is None:
            return [], self.cursor()
        return [event for _, event in self._after(position) if listener.wants(event)], self.cursor()

    async def _run(self) -> None:
        while True:
            started = time.monotonic()
            with contextlib.suppress(PresenceError):  # the status says so; try again
                await self.refresh()
            spent = time.monotonic() - started
            await asyncio.sleep(max(self.interval_s - spent, self.interval_s / 2, spent))

    async def listen(
        self, cursor: str | None, *, queue: str | None = None, group: str | None = None
    ) -> AsyncIterator[FeedItem]:
        """Messages for one SSE listener until it goes away: `open`, then events (and
        `status` when Redis fails or returns, `resync` when events were lost)."""
        listener = _Listener(queue, group)
        try:
            position = self._position(cursor)
            resync: str | None = None
        except ResyncRequired as exc:
            position, resync = self._seq, str(exc)
        self._listeners += 1
        try:
            if self._baseline is None:  # every change after `open` must show in a diff
                with contextlib.suppress(PresenceError):
                    await self.refresh()
            if self._task is None or self._task.done():
                self._task = asyncio.ensure_future(self._run())
            yield ("open", self.cursor(position))
            if resync is not None:
                yield ("resync", resync)
            status = self._status
            if not status.redis_up:
                yield ("status", status)
            while True:
                try:
                    self._position(self.cursor(position))
                    items = self._after(position)
                except ResyncRequired as exc:
                    position = self._seq
                    yield ("resync", str(exc))
                    continue
                for seq, event in items:
                    position = seq
                    if listener.wants(event):
                        yield ("event", (self.cursor(seq), event))
                if self._status != status:
                    status = self._status
                    yield ("status", status)
                async with self._changed:
                    if self._seq == position and self._status == status:
                        await self._changed.wait()
        finally:
            self._listeners -= 1
            if self._listeners == 0 and self._task is not None:
                self._task.cancel()
                self._task = None

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None


__all__ = [
    "KINDS",
    "ChangeFeed",
    "FeedStatus",
    "GroupStats",
    "PresenceData",
    "ResyncRequired",
    "stats_from_rows",
]

"""ConsumerPresenceRegistry: the process-local registry and the reference model."""

from __future__ import annotations

import base64
import binascii
import json
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from .beats import DRAIN, NO_DRAIN, BeatReply, Written, process_instance
from .errors import PresenceClockError, PresenceResyncRequired
from .events import (
    DEFAULT_CHANGES_LIMIT,
    DEFAULT_EVENTS_KEPT,
    DEFAULT_FOLLOW_INTERVAL_S,
    LOG_LAG_MS,
    Changes,
    EventKind,
    FollowCursor,
    FollowMessage,
    FollowSnapshot,
    PresenceEvent,
    check_changes_limit,
    check_interval_s,
    crossed,
    cursor_document,
    order,
    sorted_events,
    window,
)
from .model import (
    DEFAULT_MAX_FUTURE_MS,
    DEFAULT_PRESENCE_TTL_MS,
    DEFAULT_RETENTION_TTLS,
    DEFAULT_STUCK_AFTER_MS,
    NO_META,
    NS_PER_MS,
    NS_PER_US,
    ConsumerMeta,
    ConsumerPresence,
    GroupPresence,
    LiveTally,
    PresenceState,
    StaleTally,
    age_ms,
)
from .validation import (
    FLAG_DRAIN_REQUESTED,
    FLAG_DRAINING,
    NO_INSTANCE,
    Beat,
    ConsumerKey,
    check_beats,
    check_capacity,
    check_consumer_key,
    check_draining,
    check_filter,
    check_flags,
    check_instance,
    check_lease_count,
    check_max_future_ms,
    check_meta,
    check_min_active,
    check_name,
    check_now_ns,
    check_optional_stuck_after_ms,
    check_optional_ttl_ms,
    check_retention_ms,
)

Stored = tuple[int, int, int, int | None, int, int, int, str, str]
"""What the model keeps of one consumer, as a version 2 stored value (keys.STORED_VALUE):
`(registered_at_ns, last_heartbeat_ns, lease, last_progress_ns, capacity (0: none), flags,
conflict_ns (0: never), instance, previous)`."""


def _state(now_ns: int, last_heartbeat_ns: int, ttl_ms: int) -> PresenceState:
    return PresenceState.classify(age_ms(now_ns, last_heartbeat_ns), ttl_ms)


def _matches(key: ConsumerKey, queue: str | None, group: str | None) -> bool:
    return (queue is None or key[0] == queue) and (group is None or key[1] == group)


class ConsumerPresenceRegistry:
    """Presence held in this process: a mutex and a dict, O(1) writes, one copy per read.

    It offers the same methods as `RedisPresenceRegistry`, with `now_ns=None` meaning
    `time.time_ns()`, and is the model every other backend is tested against: the same
    events (kept in one log of about `events_kept` entries), the same shared TTL.
    """

    def __init__(
        self,
        *,
        events_kept: int = DEFAULT_EVENTS_KEPT,
        max_future_ms: int | None = DEFAULT_MAX_FUTURE_MS,
        instance: str | None = None,
    ) -> None:
        self._instance = None if instance is None else check_instance(instance)
        self.max_future_ms = check_max_future_ms(max_future_ms)
        """The clock guard: a beat whose explicit ``now_ns`` is more than this ahead of
        ``time.time_ns()`` is refused with `PresenceClockError` (None: no guard)."""
        self._lock = threading.Lock()
        self._rows: dict[ConsumerKey, Stored] = {}
        self._ttls: dict[tuple[str, str] | None, int] = {}
        self._stucks: dict[tuple[str, str] | None, int] = {}
        self._meta: dict[ConsumerKey, ConsumerMeta] = {}
        self._expected: dict[tuple[str, str], int] = {}
        # The write-driven events, numbered; `_trimmed` is the last number dropped.
        self._log: deque[tuple[int, PresenceEvent]] = deque(maxlen=events_kept)
        self._logged = 0
        self._trimmed = 0

    @property
    def instance(self) -> str:
        """The instance token this registry's beats carry (the one given, else this
        process's: `redis_presence.beats.process_instance`)."""
        return self._instance or process_instance()

    # -- writes -----------------------------------------------------------------------

    def _beat_now(self, now_ns: int | None) -> int:
        """The instant of a beat: `now_ns`, refused when the clock guard says it is too far
        ahead (as the scripts refuse it against the server clock), or the clock."""
        now = check_now_ns(now_ns)
        clock = time.time_ns()
        if now is None:
            return clock
        guard = self.max_future_ms
        ahead_us = now // NS_PER_US - clock // NS_PER_US
        if guard is not None and ahead_us > guard * 1_000:
            ahead_ms = ahead_us // 1_000
            raise PresenceClockError(
                f"now_ns {now} is {ahead_ms} ms ahead of the server clock "
                f"(more than max_future_ms={guard})"
            )
        return now

    def heartbeat(
        self,
        queue: str,
        group: str,
        consumer: str,
        lease_count: int = 0,
        now_ns: int | None = None,
        *,
        progressed: bool = False,
        capacity: int | None = None,
        draining: bool | None = None,
    ) -> BeatReply:
        """Record or refresh one consumer; the first beat fixes `registered_at_ns`, and
        `progressed` records progress at the beat's instant; `capacity` and `draining`
        (None: keep the stored ones) are stored with it. The reply says whether a drain
        of the consumer was requested."""
        key = check_consumer_key(queue, group, consumer)
        lease = check_lease_count(lease_count)
        if type(progressed) is not bool:
            raise TypeError(f"progressed must be a bool, got {type(progressed).__name__}")
        cap = check_capacity(capacity)
        drain = check_draining(draining)
        stamp = self._beat_now(now_ns)
        token = self.instance
        with self._lock:
            flags = self._beat(
                key, lease, stamp, stamp, stamp if progressed else None, cap, drain, token
            )
        return DRAIN if flags & FLAG_DRAIN_REQUESTED else NO_DRAIN

    def heartbeat_many(self, beats: Iterable[Beat], now_ns: int | None = None) -> Written:
        """Apply many `(queue, group, consumer, lease_count)` beats (or `BeatSpec`s); returns
        how many (`Written`, naming the consumers with a drain request)."""
        checked = check_beats(beats)
        stamp = self._beat_now(now_ns)
        token = self.instance
        drains: set[ConsumerKey] = set()
        with self._lock:
            for beat in checked:
                key = (beat[0], beat[1], beat[2])
                if len(beat) == 8:
                    cap, drain = beat[6], beat[7]
                else:
                    cap, drain = None, None
                flags = self._beat(key, beat[3], stamp, stamp, None, cap, drain, token)
                if flags & FLAG_DRAIN_REQUESTED:
                    drains.add(key)
                else:
                    drains.discard(key)
        return Written(len(checked), drains)

    def request_drain(
        self, queue: str, group: str, consumer: str, now_ns: int | None = None
    ) -> bool:
        """Ask one consumer to drain: its next beats' replies say so until one of them says
        it is draining; logs ``drain_requested``; returns whether it is tracked."""
        key = check_consumer_key(queue, group, consumer)
        now = check_now_ns(now_ns)
        stamp = time.time_ns() if now is None else now
        with self._lock:
            old = self._rows.get(key)
            if old is None:
                return False
            new = (*old[:5], old[5] | FLAG_DRAIN_REQUESTED, *old[6:])
            self._rows[key] = new
            self._append(EventKind.DRAIN_REQUESTED, key, stamp, new)
        return True

    def _beat(
        self,
        key: ConsumerKey,
        lease: int,
        stamp: int,
        now: int,
        progress: int | None = None,
        capacity: int | None = None,
        draining: bool | None = None,
        token: str = NO_INSTANCE,
    ) -> int:
        """One beat stamped `stamp` arriving at `now` (recording progress at `progress`,
        when given, and `capacity` and `draining` when not None) from instance `token`, and
        its events, as the scripts do in mode 2 (``beat_v2`` in lua/lib.lua: V2SPEC's "Beat
        semantics", and a new instance drops the draining and drain-requested bits, which
        were the process's before it); returns the flags stored after it."""
        old = self._rows.get(key)
        ttl = self._ttl_of(key[0], key[1])
        if old is None:
            flags = FLAG_DRAINING if draining else 0
            new: Stored = (
                stamp,
                stamp,
                lease,
                progress,
                capacity or 0,
                flags,
                0,
                token,
                NO_INSTANCE,
            )
            self._rows[key] = new
            self._append(EventKind.JOINED, key, stamp, new)
            if draining:
                self._append(EventKind.DRAINING, key, stamp, new)
            return flags
        registered, last, _, kept_progress, cap, flags, conflict, instance, previous = old
        if progress is None:
            progress = kept_progress
        if capacity is not None:
            cap = capacity
        active = _state(now, last, ttl) is PresenceState.ACTIVE
        kinds: list[EventKind] = []
        if token != NO_INSTANCE and instance not in (NO_INSTANCE, token):
            if token == previous and active:  # two instances beat at once: a duplicate
                if conflict == 0 or _state(now, conflict, ttl) is not PresenceState.ACTIVE:
                    kinds.append(EventKind.CONFLICT)
                conflict = stamp
            else:
                # Another process: what the one before said (draining) or was asked (a
                # drain) was its own, and goes with it (unknown bits stay), as in lib.lua.
                flags &= ~(FLAG_DRAINING | FLAG_DRAIN_REQUESTED)
                if active:
                    kinds.append(EventKind.RESTARTED)
            previous, instance = instance, token
        elif instance == NO_INSTANCE:
            instance = token
        was_draining = flags & FLAG_DRAINING
        if draining is True:
            flags = (flags | FLAG_DRAINING) & ~FLAG_DRAIN_REQUESTED
        elif draining is False:
            flags &= ~FLAG_DRAINING
        new = (registered, stamp, lease, progress, cap, flags, conflict, instance, previous)
        self._rows[key] = new
        if not active and _state(now, stamp, ttl) is PresenceState.ACTIVE:
            kinds.insert(0, EventKind.RECOVERED)
        for kind in kinds:
            self._append(kind, key, stamp if kind is not EventKind.RECOVERED else now, new)
        if flags & FLAG_DRAINING and not was_draining:
            self._append(EventKind.DRAINING, key, stamp, new)
        return flags

    def deregister(self, queue: str, group: str, consumer: str, now_ns: int | None = None) -> bool:
        """Forget one consumer (graceful shutdown), as `left` at `now_ns`; returns whether
        it was tracked."""
        key = check_consumer_key(queue, group, consumer)
        now = check_now_ns(now_ns)
        stamp = time.time_ns() if now is None else now
        with self._lock:
            old = self._rows.pop(key, None)
            self._meta.pop(key, None)
            if old is not None:
                self._append(EventKind.LEFT, key, stamp, old)
        return old is not None

    def describe(self, queue: str, group: str, consumer: str, meta: dict[str, str]) -> bool:
        """Store the consumer's metadata (an empty mapping removes it); returns whether the
        consumer is tracked (an untracked one's metadata is not stored)."""
        key = check_consumer_key(queue, group, consumer)
        checked = check_meta(meta)
        with self._lock:
            if key not in self._rows:
                return False
            if checked:
                self._meta[key] = ConsumerMeta(sorted(checked.items()))
            else:
                self._meta.pop(key, None)
        return True

    def prune_expired(
        self,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        queue: str | None = None,
        group: str | None = None,
        retention_ms: int | None = 0,
    ) -> int:
        """Drop exactly the consumers `snapshot` would call expired for longer than
        `retention_ms` (0: every expired one; None: DEFAULT_RETENTION_TTLS times the TTL);
        returns how many."""
        ttl = check_optional_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        retention = check_retention_ms(retention_ms)
        stamp = time.time_ns() if now is None else now
        queue, group = check_filter("queue", queue), check_filter("group", group)
        with self._lock:
            doomed = []
            for key, stored in self._rows.items():
                hb = stored[1]
                if not _matches(key, queue, group):
                    continue
                budget = ttl or self._ttl_of(key[0], key[1])
                kept = DEFAULT_RETENTION_TTLS * budget if retention is None else retention
                if age_ms(stamp, hb) > 2 * budget + kept:
                    doomed.append(key)
            for key in doomed:
                self._meta.pop(key, None)
                self._append(EventKind.PRUNED, key, stamp, self._rows.pop(key))
        return len(doomed)

    # -- reads ------------------------------------------------------------------------

    def clock_ns(self) -> int:
        """The clock that reads use when ``now_ns`` is None: ``time.time_ns()``."""
        return time.time_ns()

    def snapshot(
        self,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        queue: str | None = None,
        group: str | None = None,
        stuck_after_ms: int | None = None,
        with_meta: bool = False,
    ) -> list[ConsumerPresence]:
        """Every tracked consumer (of one queue, or one group), ordered by `(queue, group,
        consumer)`; `ttl_ms` / `stuck_after_ms` None are each group's shared ones; `meta`
        is filled only `with_meta`."""
        ttl = check_optional_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        stuck = check_optional_stuck_after_ms(stuck_after_ms)
        if type(with_meta) is not bool:
            raise TypeError(f"with_meta must be a bool, got {type(with_meta).__name__}")
        queue, group = check_filter("queue", queue), check_filter("group", group)
        with self._lock:
            rows = sorted(item for item in self._rows.items() if _matches(item[0], queue, group))
            ttls = {key[:2]: ttl or self._ttl_of(key[0], key[1]) for key, _ in rows}
            stucks = {key[:2]: stuck or self._stuck_of(key[0], key[1]) for key, _ in rows}
            metas = {key: self._meta.get(key, NO_META) for key, _ in rows} if with_meta else {}
        stamp = time.time_ns() if now is None else now
        return [
            ConsumerPresence.at(
                *key,
                value[0],
                value[1],
                value[2],
                value[3],
                now_ns=stamp,
                ttl_ms=ttls[key[:2]],
                stuck_after_ms=stucks[key[:2]],
                meta=metas.get(key, NO_META),
                **_v2_of(value),
            )
            for key, value in rows
        ]

    def iter_snapshot(
        self,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        queue: str | None = None,
        group: str | None = None,
        stuck_after_ms: int | None = None,
        with_meta: bool = False,
    ) -> Iterator[ConsumerPresence]:
        """The rows of `snapshot` (checked at once, yielded one by one)."""
        return iter(
            self.snapshot(
                now_ns,
                ttl_ms,
                queue=queue,
                group=group,
                stuck_after_ms=stuck_after_ms,
                with_meta=with_meta,
            )
        )

    def consumer(
        self,
        queue: str,
        group: str,
        consumer: str,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        stuck_after_ms: int | None = None,
    ) -> ConsumerPresence | None:
        """One consumer's row, or None when it is not tracked."""
        queue, group, consumer = check_consumer_key(queue, group, consumer)
        rows = self.snapshot(
            now_ns, ttl_ms, queue=queue, group=group, stuck_after_ms=stuck_after_ms
        )
        return next((row for row in rows if row.consumer == consumer), None)

    def count_active_by_group(
        self,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        queue: str | None = None,
        group: str | None = None,
    ) -> dict[tuple[str, str], int]:
        """Active consumers per `(queue, group)`; groups with none are absent."""
        counts: dict[tuple[str, str], int] = {}
        for row in self.snapshot(now_ns, ttl_ms, queue=queue, group=group):
            if row.state is PresenceState.ACTIVE:
                counts[(row.queue, row.group)] = counts.get((row.queue, row.group), 0) + 1
        return counts

    def count_active(
        self,
        queue: str,
        group: str,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
    ) -> int:
        """Active consumers of one group (0 when it has none)."""
        queue, group = check_name("queue", queue), check_name("group", group)
        found = self.count_active_by_group(now_ns, ttl_ms, queue=queue, group=group)
        return found.get((queue, group), 0)

    # -- declared groups ------------------------------------------------------------

    def expect(self, queue: str, group: str, min_active: int = 1) -> None:
        """Declare that `group` must have at least `min_active` active readers of `queue`."""
        key = (check_name("queue", queue), check_name("group", group))
        least = check_min_active(min_active)
        with self._lock:
            self._expected[key] = least

    def unexpect(self, queue: str, group: str) -> bool:
        """Forget a declared group; returns whether it was declared."""
        key = (check_name("queue", queue), check_name("group", group))
        with self._lock:
            return self._expected.pop(key, None) is not None

    def expected(self) -> dict[tuple[str, str], int]:
        """Every declared group and its `min_active`, ordered by (queue, group)."""
        with self._lock:
            return dict(sorted(self._expected.items()))

    def min_active(self, queue: str, group: str) -> int | None:
        """The minimum one group was declared with (None: not declared)."""
        queue, group = check_name("queue", queue), check_name("group", group)
        with self._lock:
            return self._expected.get((queue, group))

    def groups(
        self,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        details: bool = False,
        capacity: bool = False,
        departures: bool = False,
    ) -> list[GroupPresence]:
        """Every tracked or declared group with its consumers by state, its `min_active`
        (None: not declared) and whether it has fewer active consumers (`details`: and its
        oldest heartbeat, to the microsecond as Redis keeps it, and its expired leases;
        `capacity`: and its capacity, free slots, draining consumers and conflicts;
        `departures`: only whether its stale consumers said they were draining)."""
        check_flags(details=details, capacity=capacity, departures=departures)
        counts: dict[tuple[str, str], list[int]] = {}
        oldest: dict[tuple[str, str], int] = {}
        lives: dict[tuple[str, str], LiveTally] = {}
        index = {PresenceState.ACTIVE: 0, PresenceState.STALE: 1, PresenceState.EXPIRED: 2}
        for row in self.snapshot(now_ns, ttl_ms):
            key = (row.queue, row.group)
            lives.setdefault(key, LiveTally() if capacity else StaleTally()).add(row)
            tally = counts.setdefault(key, [0, 0, 0, 0])
            tally[index[row.state]] += 1
            tally[3] += row.lease_count if row.state is PresenceState.EXPIRED else 0
            beat_us = row.last_heartbeat_ns // NS_PER_US
            oldest[key] = min(oldest.get(key, beat_us), beat_us)
        declared = self.expected()
        out = []
        for key in sorted(counts.keys() | declared.keys()):
            active, stale, expired, lost = counts.get(key, [0, 0, 0, 0])
            more = (
                (None if key not in oldest else oldest[key] * NS_PER_US, lost)
                if details
                else (None, None)
            )
            live: LiveTally | None = None
            if capacity:
                live = lives.get(key, LiveTally())
            elif departures:
                live = lives.get(key, StaleTally())
            out.append(
                GroupPresence.of(*key, active, stale, expired, declared.get(key), *more, live=live)
            )
        return out

    def group(
        self, queue: str, group: str, now_ns: int | None = None, ttl_ms: int | None = None
    ) -> GroupPresence:
        """One group as a row of `groups()`, with its `verdict` (zeros for a group neither
        tracked nor declared)."""
        queue, group = check_name("queue", queue), check_name("group", group)
        tally = dict.fromkeys(PresenceState, 0)
        live = LiveTally()
        for row in self.snapshot(now_ns, ttl_ms, queue=queue, group=group):
            tally[row.state] += 1
            live.add(row)
        return GroupPresence.of(
            queue,
            group,
            tally[PresenceState.ACTIVE],
            tally[PresenceState.STALE],
            tally[PresenceState.EXPIRED],
            self.min_active(queue, group),
            live=live,
        )

    def size(self) -> int:
        """How many consumers are tracked, in every state (as ``len()``)."""
        with self._lock:
            return len(self._rows)

    def __len__(self) -> int:
        return self.size()

    def __repr__(self) -> str:
        return f"ConsumerPresenceRegistry(<{len(self)} consumers>)"

    # -- the shared TTL -------------------------------------------------------------

    def set_ttl(
        self, ttl_ms: int | None, *, queue: str | None = None, group: str | None = None
    ) -> None:
        """Store the TTL every reader and writer shares, for all groups or one (None: forget
        it); reads whose `ttl_ms` is None use it."""
        ttl = check_optional_ttl_ms(ttl_ms)
        where = self._ttl_key(queue, group)
        with self._lock:
            if ttl is None:
                self._ttls.pop(where, None)
            else:
                self._ttls[where] = ttl

    def ttl(self, queue: str | None = None, group: str | None = None) -> int:
        """The shared TTL of one group (or of all), as reads with `ttl_ms` None use it."""
        return self.ttl_source(queue, group)[0]

    def ttl_source(self, queue: str | None = None, group: str | None = None) -> tuple[int, str]:
        """`ttl` and where it comes from: ``"group"``, ``"prefix"`` or ``"default"``."""
        where = self._ttl_key(queue, group)
        with self._lock:
            if where is not None and where in self._ttls:
                return self._ttls[where], "group"
            if None in self._ttls:
                return self._ttls[None], "prefix"
        return DEFAULT_PRESENCE_TTL_MS, "default"

    def ttl_sources(
        self, groups: Iterable[tuple[str, str]]
    ) -> dict[tuple[str, str], tuple[int, str]]:
        """`ttl_source` of each `(queue, group)`."""
        return {(q, g): self.ttl_source(q, g) for q, g in groups}

    @staticmethod
    def _ttl_key(queue: str | None, group: str | None) -> tuple[str, str] | None:
        if (queue is None) != (group is None):
            raise ValueError("a TTL is the prefix's (no queue, no group) or one group's (both)")
        if queue is None or group is None:
            return None
        return check_name("queue", queue), check_name("group", group)

    def set_stuck_after(
        self, stuck_after_ms: int | None, *, queue: str | None = None, group: str | None = None
    ) -> None:
        """Store the progress budget every reader shares, for all groups or one (None: forget
        it); reads whose `stuck_after_ms` is None use it."""
        budget = check_optional_stuck_after_ms(stuck_after_ms)
        where = self._ttl_key(queue, group)
        with self._lock:
            if budget is None:
                self._stucks.pop(where, None)
            else:
                self._stucks[where] = budget

    def stuck_after(self, queue: str | None = None, group: str | None = None) -> int:
        """The shared progress budget of one group (or of all), as reads with
        `stuck_after_ms` None use it."""
        return self.stuck_after_source(queue, group)[0]

    def stuck_after_source(
        self, queue: str | None = None, group: str | None = None
    ) -> tuple[int, str]:
        """`stuck_after` and where it comes from:
        ``"group"``, ``"prefix"`` or ``"default"`` (DEFAULT_STUCK_AFTER_MS)."""
        where = self._ttl_key(queue, group)
        with self._lock:
            if where is not None and where in self._stucks:
                return self._stucks[where], "group"
            if None in self._stucks:
                return self._stucks[None], "prefix"
        return DEFAULT_STUCK_AFTER_MS, "default"

    def _stuck_of(self, queue: str, group: str) -> int:
        """The shared progress budget of a group (the lock is held)."""
        found = self._stucks.get((queue, group))
        if found is None:
            found = self._stucks.get(None, DEFAULT_STUCK_AFTER_MS)
        return found

    def _ttl_of(self, queue: str, group: str) -> int:
        """The shared TTL of a group (the lock is held)."""
        found = self._ttls.get((queue, group))
        if found is None:
            found = self._ttls.get(None, DEFAULT_PRESENCE_TTL_MS)
        return found

    # -- events -----------------------------------------------------------------------

    def _append(self, kind: EventKind, key: ConsumerKey, at: int, stored: Stored) -> None:
        registered, heartbeat, lease = stored[0], stored[1], stored[2]
        if len(self._log) == self._log.maxlen:
            self._trimmed = self._log[0][0]
        self._logged += 1
        self._log.append(
            (self._logged, PresenceEvent(kind, *key, at, lease, registered, heartbeat))
        )

    def changes(
        self,
        cursor: str | None = None,
        *,
        now_ns: int | None = None,
        queue: str | None = None,
        group: str | None = None,
        limit: int = DEFAULT_CHANGES_LIMIT,
    ) -> Changes:
        """Every event after `cursor` up to `now_ns`, and the cursor to go on from; `cursor`
        None starts now. Stale and expired events are derived, under each group's shared
        TTL, for the window since the cursor. The in-process model checks `limit` but gives
        each window whole (its ``more`` is always False)."""
        now = check_now_ns(now_ns)
        queue, group = check_filter("queue", queue), check_filter("group", group)
        check_changes_limit(limit)
        since = None if cursor is None else _decode(cursor)
        clock = time.time_ns()
        stamp = clock if now is None else now
        if since is not None:
            _check_filter(since, queue, group)
            if since[0] > max(clock + LOG_LAG_MS * NS_PER_MS, stamp):
                raise ValueError(
                    f"cursor is not one that changes() returned: its instant ({since[0]} ns) "
                    f"is ahead of the clock ({clock} ns) and of now_ns ({now})"
                )
        with self._lock:
            if since is None:
                return Changes([], _encode(stamp, self._logged, queue, group))
            since_ns, seen, _, _ = since
            if seen < self._trimmed:
                raise PresenceResyncRequired(
                    "the event log was trimmed past this cursor: take a fresh snapshot() and a "
                    "fresh cursor (changes(None))"
                )
            events = [
                order(event, (number,))
                for number, event in self._log
                if number > seen and _matches(event.key, queue, group)
            ]
            if stamp > since_ns:
                for key, stored in self._rows.items():
                    registered, heartbeat, lease = stored[0], stored[1], stored[2]
                    if not _matches(key, queue, group):
                        continue
                    ttl = self._ttl_of(key[0], key[1])
                    for kind in (EventKind.STALE, EventKind.EXPIRED):
                        low, high = window(kind, since_ns, stamp, ttl)
                        if low < heartbeat <= high:
                            at = crossed(kind, heartbeat, ttl)
                            events.append(
                                order(PresenceEvent(kind, *key, at, lease, registered, heartbeat))
                            )
            after = _encode(max(stamp, since_ns), self._logged, queue, group)
            return Changes(sorted_events(events), after)

    def follow(
        self,
        *,
        cursor: str | None = None,
        interval_s: float = DEFAULT_FOLLOW_INTERVAL_S,
        queue: str | None = None,
        group: str | None = None,
    ) -> Iterator[FollowMessage]:
        """A `FollowSnapshot`, then each event and a `FollowCursor` every `interval_s`, and
        a new snapshot whenever the log was trimmed past the cursor; from `cursor` at once
        (no first snapshot) when given."""
        interval = check_interval_s(interval_s)
        if cursor is not None:
            _decode(cursor)
        while True:
            wait = cursor is None
            if cursor is None:
                _, cursor = self.changes(queue=queue, group=group)
                now = _decode(cursor)[0]
                yield FollowSnapshot(self.snapshot(now, queue=queue, group=group), cursor, now)
            try:
                while True:
                    if wait:
                        time.sleep(interval)
                    page = self.changes(cursor, queue=queue, group=group)
                    events, cursor = page
                    wait = not page.more  # a window given in pages goes on at once
                    yield from events
                    yield FollowCursor(cursor, _decode(cursor)[0])
            except PresenceResyncRequired:
                cursor = None


def _v2_of(value: Stored) -> dict[str, Any]:
    """What `ConsumerPresence.at` takes of a stored value's version 2 fields."""
    _, _, _, _, capacity, flags, conflict, instance, _ = value
    return {
        "capacity": capacity or None,
        "draining": bool(flags & FLAG_DRAINING),
        "drain_requested": bool(flags & FLAG_DRAIN_REQUESTED),
        "conflict_ns": conflict,
        "instance": None if instance == NO_INSTANCE else instance,
    }


def _encode(now_ns: int, seen: int, queue: str | None, group: str | None) -> str:
    document = {"m": 1, "t": now_ns, "n": seen, "f": [queue, group]}
    raw = json.dumps(document, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(cursor: Any) -> tuple[int, int, str | None, str | None]:
    """(instant, events seen, queue, group) of an in-process cursor."""
    if not isinstance(cursor, str):
        raise TypeError(f"cursor must be a str or None, got {type(cursor).__name__}")
    document = cursor_document(cursor)
    try:
        now, seen, (queue, group) = document["t"], document["n"], document["f"]
        if document.get("m") != 1 or not isinstance(now, int) or not isinstance(seen, int):
            raise ValueError
        if not all(name is None or isinstance(name, str) for name in (queue, group)):
            raise ValueError
    except (ValueError, KeyError, TypeError, binascii.Error, UnicodeError):
        raise ValueError(f"cursor is not one that changes() returned: {cursor!r:.60}") from None
    return now, seen, queue, group


def _check_filter(
    since: tuple[int, int, str | None, str | None], queue: str | None, group: str | None
) -> None:
    """A cursor goes on only with the filter it was made for (as a Redis registry's)."""
    if since[2:] != (queue, group):
        raise ValueError(
            f"cursor was returned for queue={since[2]!r} group={since[3]!r}, not for "
            f"queue={queue!r} group={group!r}: a cursor goes on only with the filter it was "
            "made for; take a fresh one (changes(None)) for this filter"
        )

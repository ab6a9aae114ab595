"""The presence contract: states, rows and the one classification rule."""

from __future__ import annotations

import enum
import gc
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from itertools import groupby, repeat
from operator import and_, eq, floordiv, gt, itemgetter, le, sub
from typing import Any, NamedTuple, TypeVar

from .validation import FLAG_DRAIN_REQUESTED, FLAG_DRAINING, NO_INSTANCE
from .verdict import GroupFacts, GroupVerdict, Verdict, judge

DEFAULT_PRESENCE_TTL_MS = 30_000
"""Default heartbeat budget: a consumer is active for this long after its last beat."""

DEFAULT_MAX_FUTURE_MS = 10_000
"""The clock guard's default: a beat whose explicit ``now_ns`` is more than this ahead of
the server's clock is refused (`PresenceClockError`), so a broker whose clock runs ahead
cannot keep a dead consumer active for longer than this past its TTL."""

DEFAULT_STUCK_AFTER_MS = 300_000
"""Default progress budget (five minutes, Kafka's ``max.poll.interval.ms``): an active
consumer holding leases is `stuck` when it has made no progress (nor, before its first,
been registered) for longer than this."""

DEFAULT_RETENTION_TTLS = 60
"""Automatic removal's default retention, in TTLs of the consumer's group: an expired
consumer stays listed this many TTLs past its expiry (30 minutes at the default TTL), long
enough for the alerts on stale and expired consumers (10 minutes) to fire and for an
operator to see who died (docs/concepts.md, "Retention")."""

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000
NS_PER_US = 1_000


class ConsumerMeta(Mapping[str, str]):
    """A consumer's metadata: a read-only, hashable mapping of str to str (`describe`).
    Rows hold one, so rows stay immutable and hashable."""

    __slots__ = ("_hash", "_items")

    def __init__(self, items: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> None:
        self._items: dict[str, str] = dict(items)
        self._hash: int | None = None

    def __getitem__(self, key: str) -> str:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._items.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ConsumerMeta):
            return self._items == other._items
        if isinstance(other, Mapping):
            return self._items == dict(other)
        return NotImplemented

    def __lt__(self, other: ConsumerMeta) -> bool:  # rows sort as tuples
        return sorted(self._items.items()) < sorted(other._items.items())

    def __repr__(self) -> str:
        return f"ConsumerMeta({self._items!r})"


NO_META = ConsumerMeta()
"""The metadata of every row of a plain `snapshot()` (and of a consumer never described)."""


class PresenceState(str, enum.Enum):
    """Lifecycle bucket derived from a consumer's age against the heartbeat budget."""

    ACTIVE = "active"
    STALE = "stale"
    EXPIRED = "expired"

    @classmethod
    def classify(cls, age_ms: int, ttl_ms: int) -> PresenceState:
        """`age_ms <= ttl_ms` is active, `<= 2 * ttl_ms` is stale, anything older is expired."""
        if age_ms <= ttl_ms:
            return cls.ACTIVE
        if age_ms <= 2 * ttl_ms:
            return cls.STALE
        return cls.EXPIRED

    @staticmethod
    def horizons_ns(now_ns: int, ttl_ms: int) -> tuple[int, int]:
        """`(active_after_ns, expired_at_ns)`: at `now_ns`, `classify` calls a heartbeat at
        `hb` active iff `hb > active_after_ns`, expired iff `hb <= expired_at_ns`, else stale.

        With `age = max(0, now - hb) // 1 ms`: `age <= ttl` iff `now - hb < (ttl + 1) ms`,
        and `age > 2 ttl` iff `now - hb >= (2 ttl + 1) ms` (a future beat is active). The
        Lua scripts use the same two horizons; tests check them against `classify`.
        """
        return now_ns - (ttl_ms + 1) * NS_PER_MS, now_ns - (2 * ttl_ms + 1) * NS_PER_MS

    def __str__(self) -> str:
        return self.value


def age_ms(now_ns: int, last_heartbeat_ns: int) -> int:
    """Whole milliseconds since the last beat; a beat from the reader's future has age 0."""
    return max(0, now_ns - last_heartbeat_ns) // NS_PER_MS


class ConsumerPresence(NamedTuple):
    """One tracked consumer as seen at one instant: an immutable, typed row.

    A `typing.NamedTuple` rather than a frozen dataclass: attribute access, equality and
    hashing are the same, and whole snapshots are built in C (`columns`), without running
    Python code for each row (most of a large snapshot's Python time otherwise). Rows also
    sort by `(queue, group, consumer, ...)` and unpack like tuples.
    """

    queue: str
    group: str
    consumer: str
    registered_at_ns: int
    last_heartbeat_ns: int
    last_seen_age_ms: int
    lease_count: int
    state: PresenceState
    last_progress_ns: int | None = None
    """The last recorded progress (``heartbeat(..., progressed=True)``), None before it."""
    stuck: bool = False
    """Active, holding leases, and no progress (nor, before the first, registration) for
    longer than the read's ``stuck_after_ms``: a flag on an active row, not a state."""
    meta: ConsumerMeta = NO_META
    """The consumer's metadata (`describe`): filled by ``snapshot(with_meta=True)`` only."""
    capacity: int | None = None
    """The leases it says it can hold at most (``heartbeat(..., capacity=)``); None: not
    reported (protocol version 2)."""
    draining: bool = False
    """It said it is draining (``heartbeat(..., draining=True)``): a planned departure."""
    drain_requested: bool = False
    """Someone asked it to drain (`request_drain`) and no draining beat acknowledged it yet."""
    conflict: bool = False
    """Two processes beat as this consumer (a duplicate), the last time within one TTL."""
    instance: str | None = None
    """The process instance token of its last beat (None: not reported)."""

    @classmethod
    def at(
        cls,
        queue: str,
        group: str,
        consumer: str,
        registered_at_ns: int,
        last_heartbeat_ns: int,
        lease_count: int,
        last_progress_ns: int | None = None,
        *,
        now_ns: int,
        ttl_ms: int,
        stuck_after_ms: int = DEFAULT_STUCK_AFTER_MS,
        meta: ConsumerMeta = NO_META,
        capacity: int | None = None,
        draining: bool = False,
        drain_requested: bool = False,
        conflict_ns: int = 0,
        instance: str | None = None,
    ) -> ConsumerPresence:
        """Build the row for a stored consumer, deriving age, state and `stuck` at `now_ns`,
        and `conflict` from `conflict_ns` (0: never) by the active rule (`in_conflict`)."""
        age = age_ms(now_ns, last_heartbeat_ns)
        state = PresenceState.classify(age, ttl_ms)
        return cls(
            queue,
            group,
            consumer,
            registered_at_ns,
            last_heartbeat_ns,
            age,
            lease_count,
            state,
            last_progress_ns,
            is_stuck(
                state,
                lease_count,
                registered_at_ns,
                last_progress_ns,
                now_ns=now_ns,
                stuck_after_ms=stuck_after_ms,
            ),
            meta,
            capacity or None,
            draining,
            drain_requested,
            in_conflict(conflict_ns, now_ns=now_ns, ttl_ms=ttl_ms),
            instance,
        )

    @classmethod
    def columns(
        cls,
        queue: str,
        group: str,
        consumers: Sequence[str],
        registered_at_ns: Sequence[int],
        last_heartbeat_ns: Sequence[int],
        lease_count: Sequence[int],
        progress_ns: Sequence[int | None] | None = None,
        stored: StoredV2 | None = None,
        *,
        now_ns: int,
        ttl_ms: int,
        stuck_after_ms: int = DEFAULT_STUCK_AFTER_MS,
        metas: Iterable[ConsumerMeta] | None = None,
    ) -> Iterator[ConsumerPresence]:
        """The rows `at` builds for the consumers of one group given column by column, in
        order (`progress_ns` None: nobody made progress yet, else None for each who did not;
        `stored` None: no consumer of the group has a version 2 value, else its columns as
        stored, a version 1 value read as capacity 0, flags 0, conflict 0, instance ``-``;
        `metas` None: no metadata). Ages,
        states and `stuck` come from horizons with C-level `map`s, and each row is one
        `tuple.__new__`: no Python code runs per row."""
        active_after, expired_at = PresenceState.horizons_ns(now_ns, ttl_ms)
        beats = last_heartbeat_ns
        # max(0, now - hb) // 1 ms; a beat from the reader's future is rare, so the clamp is
        # only paid when there is one.
        if beats and max(beats) > now_ns:
            beats_past: Iterable[int] = map(min, beats, repeat(now_ns))
        else:
            beats_past = beats
        ages = map(floordiv, map(sub, repeat(now_ns), beats_past), repeat(NS_PER_MS))
        # How many horizons a beat is above (bisect_left of (expired_at, active_after)):
        # 2 active, 1 stale, 0 expired. When the oldest beat is active, so is every one
        # (a healthy group): no rank is computed row by row.
        everyone_active = not beats or min(beats) > active_after
        ranks: Iterable[int] = (
            repeat(2, len(beats))
            if everyone_active
            else map(bisect_left, repeat((expired_at, active_after)), beats)
        )
        progress: Iterable[int | None]
        refs: Sequence[int]
        if progress_ns is None:
            progress, refs = repeat(None), registered_at_ns
        else:
            progress = progress_ns
            refs = list(map(max, registered_at_ns, [p or 0 for p in progress_ns]))
        stuck: Iterable[bool]
        horizon = now_ns - (stuck_after_ms + 1) * NS_PER_MS
        if not lease_count or not max(lease_count) or min(refs) > horizon:
            # Nobody holds a lease, or everyone registered or progressed since the horizon:
            # nobody is stuck.
            stuck = repeat(False)
        else:
            # Active (rank 2), holding leases, and the later of registration and progress
            # at or before now - (stuck_after + 1) ms (`is_stuck`).
            ranks = list(ranks)
            stuck = map(
                and_,
                map(and_, map(eq, ranks, repeat(2)), map(gt, lease_count, repeat(0))),
                map(le, refs, repeat(horizon)),
            )
        states: Iterable[PresenceState] = (
            repeat(PresenceState.ACTIVE)
            if everyone_active
            else map(_STATE_BY_RANK.__getitem__, ranks)
        )
        fields = zip(
            repeat(queue),
            repeat(group),
            consumers,
            registered_at_ns,
            beats,
            ages,
            lease_count,
            states,
            progress,
            stuck,
            repeat(NO_META) if metas is None else metas,
            *_v2_fields(stored, now_ns, ttl_ms),
        )
        return map(tuple.__new__, repeat(cls), fields)

    @classmethod
    def many(
        cls,
        stored: Iterable[StoredConsumer],
        *,
        now_ns: int,
        ttl_ms: int,
        stuck_after_ms: int = DEFAULT_STUCK_AFTER_MS,
    ) -> list[ConsumerPresence]:
        """The rows `at` builds, one per stored consumer, in order (through `columns`)."""
        rows: list[ConsumerPresence] = []
        with gc_paused():
            for (queue, group), part in groupby(stored, key=_queue_group):
                _, _, consumers, registered, heartbeat, lease = zip(*part, strict=True)
                rows += cls.columns(
                    queue,
                    group,
                    consumers,
                    registered,
                    heartbeat,
                    lease,
                    now_ns=now_ns,
                    ttl_ms=ttl_ms,
                    stuck_after_ms=stuck_after_ms,
                )
        return rows

    @property
    def key(self) -> tuple[str, str, str]:
        """The identity of the consumer: `(queue, group, consumer)`."""
        return (self.queue, self.group, self.consumer)

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready mapping with the field names of this class."""
        return {
            "queue": self.queue,
            "group": self.group,
            "consumer": self.consumer,
            "registered_at_ns": self.registered_at_ns,
            "last_heartbeat_ns": self.last_heartbeat_ns,
            "last_seen_age_ms": self.last_seen_age_ms,
            "lease_count": self.lease_count,
            "state": self.state.value,
            "last_progress_ns": self.last_progress_ns,
            "stuck": self.stuck,
            "meta": dict(self.meta),
            "capacity": self.capacity,
            "draining": self.draining,
            "drain_requested": self.drain_requested,
            "conflict": self.conflict,
            "instance": self.instance,
        }


class StoredV2(NamedTuple):
    """The columns a version 2 stored value adds (`keys.STORED_VALUE`), one entry per
    consumer of a group, as stored: `capacity` (0: not reported), `flags` (bit 1 draining,
    bit 2 drain requested), `conflict_ns` (0: never), `instance` and `previous` (``-``:
    none). A version 1 value reads as 0, 0, 0, ``-``, ``-``."""

    capacity: Sequence[int]
    flags: Sequence[int]
    conflict_ns: Sequence[int]
    instance: Sequence[str]
    previous: Sequence[str]


_ZERO_IS_NONE: dict[int, None] = {0: None}
_DASH_IS_NONE: dict[Any, None] = {NO_INSTANCE: None}


def in_conflict(conflict_ns: int, *, now_ns: int, ttl_ms: int) -> bool:
    """The conflict rule: a duplicate was seen (`conflict_ns` not 0) and that is still
    active, as a beat at `conflict_ns` would be (`PresenceState.horizons_ns`)."""
    return conflict_ns > max(0, PresenceState.horizons_ns(now_ns, ttl_ms)[0])


def _v2_fields(stored: StoredV2 | None, now_ns: int, ttl_ms: int) -> tuple[Iterable[Any], ...]:
    """The row fields a group's `StoredV2` columns give (`capacity`, `draining`,
    `drain_requested`, `conflict`, `instance`), each a C-level iterator (no Python code per
    row); the defaults when `stored` is None."""
    if stored is None:
        return repeat(None), repeat(False), repeat(False), repeat(False), repeat(None)
    capacity, flags, conflict_ns, instance, _ = stored
    edge = max(0, PresenceState.horizons_ns(now_ns, ttl_ms)[0])
    # A column that says nothing for anyone (most of a group's, most of the time) is a
    # `repeat`, not a `map` a row.
    no: Iterable[bool] = repeat(False)
    flagged = any(flags)
    return (
        map(_ZERO_IS_NONE.get, capacity, capacity) if any(capacity) else repeat(None),
        map(bool, map(and_, flags, repeat(FLAG_DRAINING))) if flagged else no,
        map(bool, map(and_, flags, repeat(FLAG_DRAIN_REQUESTED))) if flagged else no,
        map(gt, conflict_ns, repeat(edge)) if conflict_ns and max(conflict_ns) > edge else no,
        map(_DASH_IS_NONE.get, instance, instance),
    )


def is_stuck(
    state: PresenceState,
    lease_count: int,
    registered_at_ns: int,
    last_progress_ns: int | None,
    *,
    now_ns: int,
    stuck_after_ms: int,
) -> bool:
    """The `stuck` rule: active, ``lease_count > 0``, and more than `stuck_after_ms` whole
    milliseconds since the later of the registration and the last progress (`age_ms`)."""
    since = max(registered_at_ns, last_progress_ns or 0)
    return (
        state is PresenceState.ACTIVE and lease_count > 0 and age_ms(now_ns, since) > stuck_after_ms
    )


class Skipped(NamedTuple):
    """What a read set aside instead of failing (docs/protocol.md, section 9): the key (an
    index member, or a group's hash) it could not decode, and why; the group's names (None
    for an index member another program spelled); and `consumer`, the one row set aside
    (None: the whole group)."""

    key: str
    reason: str
    queue: str | None = None
    group: str | None = None
    consumer: str | None = None


def groups_set_aside(skipped: Iterable[Skipped]) -> set[tuple[str, str]]:
    """The ``(queue, group)`` of each whole group in `skipped`: a view leaves them out (they
    could not be read), never shows them as groups without consumers."""
    return {
        (item.queue, item.group)
        for item in skipped
        if item.consumer is None and item.queue is not None and item.group is not None
    }


_Row = TypeVar("_Row")


class Rows(list[_Row]):
    """The rows of a read (`snapshot`, `groups`): a list, with `skipped`, what the read set
    aside (whole groups, or single consumers; empty when it read everything)."""

    skipped: tuple[Skipped, ...] = ()


class Counts(dict[tuple[str, str], int]):
    """`count_active_by_group`'s answer: a dict, with `skipped`, what the read set aside
    (empty when it read everything)."""

    skipped: tuple[Skipped, ...] = ()


class GroupPresence(NamedTuple):
    """One tracked or declared group (`groups()`): its consumers by state, the minimum of
    active consumers it was declared with (`expect`; None: not declared) and whether it has
    fewer active consumers than that; with ``groups(details=True)``, also its least recent
    heartbeat and the leases its expired consumers hold (None: not read); with
    ``groups(capacity=True)`` and from `group()`, also its capacity, free slots, draining
    consumers and conflicts (None: not read; docs/concepts.md, "Capacity and draining")."""

    queue: str
    group: str
    active: int
    stale: int
    expired: int
    min_active: int | None
    below: bool
    oldest_heartbeat_ns: int | None = None
    """The least recent heartbeat of a tracked consumer (to the microsecond; None: no
    consumer, or not read)."""
    leases_expired: int | None = None
    """The lease counts of its expired consumers, summed: work nobody will finish."""
    capacity: int | None = None
    """The capacities of its active consumers that report one, summed (None: none reports
    one, or not read)."""
    free: int | None = None
    """`capacity` minus the leases those consumers hold (never below 0; None with it)."""
    draining: int | None = None
    """Its active or stale consumers that say they are draining (None: not read)."""
    conflicts: int | None = None
    """Its consumers in conflict (two processes beating as one; None: not read)."""
    draining_stale: int | None = None
    """The stale ones among `draining` (a planned departure still inside the window: they
    excuse a shortfall, `redis_presence.verdict`); None: not read."""

    @classmethod
    def of(
        cls,
        queue: str,
        group: str,
        active: int,
        stale: int,
        expired: int,
        min_active: int | None,
        oldest_heartbeat_ns: int | None = None,
        leases_expired: int | None = None,
        *,
        live: LiveTally | None = None,
    ) -> GroupPresence:
        below = min_active is not None and active < min_active
        extra: tuple[int | None, ...] = (None,) * 5 if live is None else live.fields()
        return cls(
            queue,
            group,
            active,
            stale,
            expired,
            min_active,
            below,
            oldest_heartbeat_ns,
            leases_expired,
            *extra,
        )

    @property
    def key(self) -> tuple[str, str]:
        return (self.queue, self.group)

    @property
    def declared(self) -> bool:
        """Whether the group was declared with `expect`."""
        return self.min_active is not None

    @property
    def judged(self) -> GroupVerdict:
        """Its verdict and reason (`redis_presence.verdict`) from its counts, minimum and,
        where read (`group()`, ``groups(capacity=True)``), its draining consumers and
        capacity: never `STALLED` (these counts read no consumer's progress), and never
        `DRAINING` where draining was not read."""
        return judge(self.facts())

    def facts(self, min_active: int | None = None, stuck: int | None = None) -> GroupFacts:
        """What its verdict is judged from: its counts, `min_active` (None: its own) and
        `stuck` (None: not known), with its draining consumers and capacity where read."""
        draining_active = None
        if self.draining is not None:
            draining_active = self.draining - (self.draining_stale or 0)
        leases = None
        if self.capacity is not None and self.free is not None:
            leases = self.capacity - self.free
        return GroupFacts(
            self.active,
            self.stale,
            self.expired,
            self.min_active if min_active is None else min_active,
            stuck,
            draining_active,
            self.draining_stale,
            self.capacity,
            leases,
        )

    @property
    def verdict(self) -> Verdict:
        """`OK`, `DEGRADED` or `STOPPED` (docs/concepts.md, "One verdict per group")."""
        return self.judged.verdict

    @property
    def reason(self) -> str:
        """Why `verdict`, in words."""
        return self.judged.reason

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready mapping with the field names of this class (the protocol's
        conformance cases; the web API's group adds `verdict` and `reason`)."""
        return self._asdict()


class GroupsPage(NamedTuple):
    """A page of `group_page`: its groups in the index's order and whether more groups
    lie beyond them on the side it was read towards."""

    groups: list[GroupPresence]
    more: bool

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready mapping with the field names of this class (each group as its
        own mapping)."""
        return {"groups": [group.to_dict() for group in self.groups], "more": self.more}


class LiveTally:
    """What a group's live (active and stale) stored values say, added up row by row:
    capacity and leases of the active consumers that report a capacity, draining consumers
    (active, stale), consumers in conflict. Fed one consumer at a time (`add`)."""

    __slots__ = ("capacity", "conflicts", "draining_active", "draining_stale", "leases", "told")

    def __init__(self) -> None:
        self.capacity = self.leases = self.draining_active = self.draining_stale = 0
        self.conflicts = 0
        self.told = False  # some active consumer reported a capacity

    def add(self, row: ConsumerPresence) -> None:
        if row.state is PresenceState.EXPIRED:
            return
        active = row.state is PresenceState.ACTIVE
        if active and row.capacity is not None:
            self.told = True
            self.capacity += row.capacity
            self.leases += row.lease_count
        if row.draining:
            if active:
                self.draining_active += 1
            else:
                self.draining_stale += 1
        self.conflicts += row.conflict

    def fields(self) -> tuple[int | None, ...]:
        """`GroupPresence`'s capacity, free, draining, conflicts and draining_stale."""
        capacity = self.capacity if self.told else None
        free = None if capacity is None else max(0, capacity - self.leases)
        draining = self.draining_active + self.draining_stale
        return capacity, free, draining, self.conflicts, self.draining_stale


class StaleTally(LiveTally):
    """A `LiveTally` of a group's stale consumers only (``groups(departures=True)``): whether
    each said it was draining, so that a planned departure is told from a failure, without
    reading the active consumers' values. Capacity, free, draining and conflicts are then
    unknown (None); `draining_stale` is known (0 for a group with no stale consumer)."""

    __slots__ = ()

    def fields(self) -> tuple[int | None, ...]:
        return None, None, None, None, self.draining_stale


StoredConsumer = tuple[str, str, str, int, int, int]
"""What is stored of one consumer: `(queue, group, consumer, registered_at_ns,
last_heartbeat_ns, lease_count)`."""

_STATE_BY_RANK = (PresenceState.EXPIRED, PresenceState.STALE, PresenceState.ACTIVE)
_queue_group = itemgetter(0, 1)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Hold the cyclic garbage collector while a large result is built.

    Every row is a tracked object, so building many of them triggers collections that walk
    the whole heap again and again, and none of them can free anything the build made (the
    benchmark's snapshot case measures what that costs). The collector is enabled again on
    the way out, and left alone if it was already disabled; reference counting frees memory
    as usual.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()

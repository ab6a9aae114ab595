"""What the web service's reads answer: a group's counts and verdict (`GroupStats`), the
fleet's totals (`GroupTotals`), the TTL a read used (`TtlInUse`) and the readings of a page,
with the functions that count rows into them. I/O-free: `reads` makes the reads."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import groupby
from types import MappingProxyType
from typing import NamedTuple, TypedDict

from redis_presence import ConsumerPresence, PresenceState
from redis_presence.model import GroupPresence, LiveTally
from redis_presence.verdict import GroupFacts, GroupVerdict, Verdict, judge, verdict_of

from .paging import Page
from .stuck import NO_LIVE, LiveFields, StuckCount


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
    capacity: int | None = None
    """The capacities of its active consumers that report one, summed (protocol version
    2); None: none reports one, or the read in use does not know."""
    free: int | None = None
    """`capacity` minus the leases of those consumers (never below 0); None with it."""
    draining: int | None = None
    """Its active or stale consumers that say they are draining; None: not known."""
    conflicts: int | None = None
    """Its consumers in conflict (two live processes beating as one); None: not known."""
    draining_stale: int | None = None
    """The stale ones among `draining` (they left on purpose: they excuse a shortfall)."""

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
        """Shown first and marked: below its declared minimum, or nobody reading it,
        unless that is a planned departure (the verdict `DRAINING`)."""
        return (self.below or self.nobody_reading) and self.verdict is not Verdict.DRAINING

    @property
    def facts(self) -> GroupFacts:
        """What its verdict is judged from: what the read in use knows (the consumers'
        progress, `stuck`; draining and capacity, protocol version 2), else None."""
        draining_active = None
        if self.draining is not None:
            draining_active = self.draining - (self.draining_stale or 0)
        in_use = None
        if self.capacity is not None and self.free is not None:
            in_use = self.capacity - self.free
        return GroupFacts(
            self.active,
            self.stale,
            self.expired,
            self.min_active,
            self.stuck,
            draining_active,
            self.draining_stale,
            self.capacity,
            in_use,
        )

    @property
    def judged(self) -> GroupVerdict:
        """Its verdict and reason from what the read in use knows (`STALLED` only where
        it read the consumers' progress: `stuck` not None; `DRAINING` only where it read
        who is draining: `draining` not None)."""
        return judge(self.facts)

    @property
    def verdict(self) -> Verdict:
        """`judged`'s verdict alone, without its reason (for every group of a scrape)."""
        return verdict_of(self.facts)

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
            "stuck": self.stuck,
            "leases": self.leases,
            "leases_expired": self.leases_expired,
            "capacity": self.capacity,
            "free": self.free,
            "draining": self.draining,
            "conflicts": self.conflicts,
        }


class _LiveReplace(TypedDict):
    capacity: int | None
    free: int | None
    draining: int | None
    conflicts: int | None
    draining_stale: int | None


def _live(fields: LiveFields) -> _LiveReplace:
    """`StuckCount.live` fields as `GroupStats._replace` keywords."""
    capacity, free, draining, conflicts, draining_stale = fields
    return {
        "capacity": capacity,
        "free": free,
        "draining": draining,
        "conflicts": conflicts,
        "draining_stale": draining_stale,
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
    """Every group's counts, as read, with its stuck consumers and leases where counted
    (what a page sorted by a count is ordered by)."""
    stuck: int | None = None  # stuck consumers (`stuck.fleet_stuck`); None: not counted
    stuck_read_at_ns: int | None = None  # when they were counted (STUCK_EVERY_S at most ago)
    stuck_groups: Mapping[tuple[str, str], int] = MappingProxyType({})  # > 0 only
    leases: int | None = None  # leases held, counted with the stuck ones (None: not counted)
    leases_expired: int | None = None  # of them, held by expired consumers
    lease_groups: Mapping[tuple[str, str], int] = MappingProxyType({})  # > 0 only
    dead_lease_groups: Mapping[tuple[str, str], int] = MappingProxyType({})  # > 0 only
    index_sizes: tuple[int, int] | None = None
    """The indexes' sizes read before the groups (`Planner.index_sizes`): a page picked from
    these rows is true while Redis holds the same ones."""
    known: frozenset[tuple[str, str]] = frozenset()
    """The names of `rows`."""
    live_groups: Mapping[tuple[str, str], LiveFields] = MappingProxyType({})
    """Each group's capacity, free slots and draining and conflicting consumers, counted
    with the stuck ones (`StuckCount.live`: the groups where any is reported only)."""

    @classmethod
    def of(
        cls,
        groups: Sequence[GroupStats],
        read_at_ns: int,
        epoch: str | None = None,
        stuck: StuckCount | None = None,
        index_sizes: tuple[int, int] | None = None,
    ) -> GroupTotals:
        if stuck is not None:  # each row with its counts of the consumers' read, once
            groups = [
                g._replace(
                    stuck=stuck.groups.get(key, 0),
                    leases=stuck.leases.get(key, 0),
                    leases_expired=stuck.leases_expired.get(key, 0),
                    **_live(stuck.live_of(key)),
                )
                for g in groups
                for key in ((g.queue, g.group),)
            ]
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
            None if stuck is None else stuck.total,
            None if stuck is None else stuck.read_at_ns,
            MappingProxyType({}) if stuck is None else stuck.groups,
            None if stuck is None else sum(stuck.leases.values()),
            None if stuck is None else sum(stuck.leases_expired.values()),
            MappingProxyType({}) if stuck is None else stuck.leases,
            MappingProxyType({}) if stuck is None else stuck.leases_expired,
            index_sizes,
            frozenset((g.queue, g.group) for g in groups),
            MappingProxyType({}) if stuck is None else stuck.live,
        )

    def with_stuck(self, rows: Sequence[GroupStats]) -> list[GroupStats]:
        """`rows` with each group's stuck consumers, leases and leases held by expired
        consumers, capacity, free slots, draining consumers and conflicts from this count
        (None: not counted)."""
        if self.stuck is None:
            return list(rows)
        return [
            g._replace(
                stuck=self.stuck_groups.get(key, 0),
                leases=self.lease_groups.get(key, 0),
                leases_expired=self.dead_lease_groups.get(key, 0),
                **_live(self.live_groups.get(key, NO_LIVE)),
            )
            for g in rows
            for key in ((g.queue, g.group),)
        ]

    @property
    def dead_leases_groups(self) -> int | None:
        """The groups whose expired consumers hold leases (None: not counted)."""
        return None if self.stuck is None else len(self.dead_lease_groups)

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
        del fields["epoch"], fields["rows"], fields["stuck_groups"]
        del fields["lease_groups"], fields["dead_lease_groups"], fields["index_sizes"]
        del fields["known"], fields["live_groups"]
        fields["dead_leases_groups"] = self.dead_leases_groups
        return fields


class GroupsPageReading(NamedTuple):
    """One page of groups, the instant it was read at, the TTL of the prefix and the epoch
    marker it was read under."""

    now_ns: int
    page: Page[GroupStats]
    ttl: TtlInUse
    epoch: str | None = None
    strangers: bool = False
    """For a page of a sorted list: its read passed a group the totals do not hold."""


def stats_from_rows(
    rows: Iterable[ConsumerPresence], declared: Mapping[tuple[str, str], int] | None = None
) -> list[GroupStats]:
    """Per-group counts, oldest heartbeat, stuck consumers, capacity, free slots, draining
    consumers and conflicts (`LiveTally`, the library's one rule) of rows ordered by
    `(queue, group, ...)`; with `declared` (`expected()`), its groups too, with their minimum (a
    declared group without a row has zero of everything)."""
    stats = []
    for (queue, group), part in groupby(rows, key=lambda row: (row.queue, row.group)):
        tally = dict.fromkeys(PresenceState, 0)
        oldest: int | None = None
        stuck = leases = lost = 0
        live = LiveTally()
        for row in part:
            tally[row.state] += 1
            stuck += row.stuck
            leases += row.lease_count
            if row.state is PresenceState.EXPIRED:
                lost += row.lease_count
            if oldest is None or row.last_heartbeat_ns < oldest:
                oldest = row.last_heartbeat_ns
            live.add(row)
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
                *live.fields(),
            )
        )
    if declared:
        seen = {(s.queue, s.group) for s in stats}
        stats += [
            GroupStats(queue, group, 0, 0, 0, None, minimum, 0, 0, 0, None, None, 0, 0, 0)
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
            g.capacity,
            g.free,
            g.draining,
            g.conflicts,
            g.draining_stale,
        )
        for g in groups
    ]

"""The index of groups (``P:groups``) and, on a Redis Cluster, the protocol that keeps it
without losing a live group (docs/protocol.md, section 14): listing, unlisting, the protocol
claim, and the migration of release 0.1's index.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from itertools import groupby
from operator import attrgetter
from typing import Any, NamedTuple

from ..errors import PresenceDataError, PresenceError
from ..keys import PROTOCOL_VERSION, GroupKeys, setting_digits
from ..model import Skipped
from ..validation import MAX_TTL_MS
from .caches import SettingsCache
from .core import Job, Scope, _check_protocol, _text
from .requests import Command, Partial, Plan, Request


class Migrated(int):
    """What `migrate` returns: how many groups of the 0.1 index it moved (an int, as
    before), with `seeded` (groups whose newest and oldest beats it wrote into the fleet
    indexes) and `was` (``P:protocol`` before it ran; None: none)."""

    seeded: int
    was: str | None

    def __new__(cls, moved: int = 0, *, seeded: int = 0, was: str | None = None) -> Migrated:
        migrated = super().__new__(cls, moved)
        migrated.seeded = seeded
        migrated.was = was
        return migrated


def _score(reply: Any) -> int | None:
    """The score of a ``ZRANGE i i WITHSCORES`` reply (flat, or RESP3 pairs): None when
    empty or an error."""
    if isinstance(reply, PresenceError) or not reply:
        return None
    first = reply[0]
    return int(float(first[1] if isinstance(first, list | tuple) else reply[1]))


def _own_ttl(reply: Any) -> int | None:
    """The TTL a group's ``GET P:{Q}:G:ttl`` reply spells (SETTING_VALUE), or None: none,
    a spoilt one or an error (a reader sets that group aside; nothing to seed)."""
    if reply is None or isinstance(reply, PresenceError):
        return None
    try:
        ttl = setting_digits(reply)
    except ValueError:
        return None
    return ttl if 0 < ttl <= MAX_TTL_MS else None


RANK_OVERLAP = 10
"""How many members each page of `IndexPlans.every_group` reads again of the page before."""


class IndexPlans(Job):
    """The index of groups (``P:groups``) and, on a Redis Cluster, the protocol that keeps it
    (docs/protocol.md, section 14): listing, unlisting, a page of groups, the protocol claim, and
    the migration. Built from its `Scope` and its planner's `SettingsCache` (which says when
    the protocol version is to be checked again, and whether this planner claimed it)."""

    __slots__ = ("_cache",)

    def __init__(self, scope: Scope, cache: SettingsCache) -> None:
        super().__init__(scope)
        self._cache = cache

    def list_on_cluster(
        self, groups: Sequence[GroupKeys], logged: Sequence[tuple[str, int]]
    ) -> Plan[None]:
        """A cluster's index writes after a script: ``ZADD`` the groups it found without a
        mark, and the event logs it wrote to (scored by the event's millisecond)."""
        batch: list[Request] = []
        if groups:
            members = [m for gk in groups for m in (0, gk.member)]
            batch.append(Command("ZADD", (self.keys.groups, *members)))
        logs = [item for log, ms in logged if ms for item in (ms, log)]
        if logs:
            batch.append(Command("ZADD", (self.keys.events, "GT", *logs)))
            # A cluster's epoch marker (a standalone script writes its own: mark_epoch), a
            # new token each time: a registry that wrote the one lost must not bring it back.
            batch.append(Command("SET", (self.keys.epoch, secrets.token_hex(16), "NX")))
        if batch:
            yield batch

    def unlist(self, groups: list[GroupKeys]) -> Plan[None]:
        """The unlisting of the cluster index protocol (docs/protocol.md, section 14):
        ``ZREM`` the groups a script left empty, re-check each (``EXISTS``), ``ZADD`` back
        those a racing heartbeat filled again. Without the re-check a live group can be lost."""
        yield [Command("ZREM", (self.keys.groups, *(gk.member for gk in groups)))]
        alive = yield [Command("EXISTS", (gk.hb,)) for gk in groups]
        back = [
            member
            for gk, exists in zip(groups, alive, strict=True)
            if int(exists)
            for member in (0, gk.member)
        ]
        if back:
            yield [Command("ZADD", (self.keys.groups, *back))]

    def claim(self) -> Plan[None]:
        """After this planner's first beat that wrote: claim the prefix for this protocol
        version (``SET NX``; once, and never for a beat that was refused)."""
        if not self._cache.claimed:
            yield [Command("SET", (self.keys.protocol, PROTOCOL_VERSION, "NX"))]
            self._cache.claim()

    def listed(
        self,
        queue: str | None,
        group: str | None,
        after: Any,
        skipped: list[Skipped],
        *,
        start: Any = None,
    ) -> Plan[tuple[list[GroupKeys], Any]]:
        """One page of indexed groups (of one queue, or one group) after the member `after`
        (None: from the first), or from the member `start` on, and the member the next page
        starts after (None: the last page). One group named by queue and group is read
        without the index. A member this package did not write (a foreign spelling of a
        name) is set aside in `skipped`."""
        if queue is not None and group is not None:
            return [self.keys.group(queue, group)], None
        low: Any
        low, high = self.keys.queue_range(queue) if queue is not None else ("-", "+")
        if after is not None:
            low = b"(" + after if isinstance(after, bytes) else f"({after}"
        elif start is not None:
            # a member of this listing, so within its range
            low = b"[" + start if isinstance(start, bytes) else f"[{start}"
        page = self.limits.groups
        # The protocol version with the page (when not read for TTL_CACHE_MS): a read of
        # the index of another version's prefix is refused, an empty one too.
        members, *version = yield [
            Command("ZRANGEBYLEX", (self.keys.groups, low, high, "LIMIT", 0, page)),
            *self._cache.protocol_asks(),
        ]
        self._cache.protocol_took(version)
        groups = []
        for member in members:
            try:
                groups.append(self.keys.from_member(member))
            except PresenceDataError as error:
                skipped.append(Skipped(_text(member), str(error)))
        last = members[-1] if len(members) == page else None
        if group is not None:
            groups = [gk for gk in groups if gk.group == group]
        return groups, last

    def sound(
        self, groups: Sequence[GroupKeys], requests: Sequence[Request], aside: list[Skipped] | None
    ) -> Plan[list[Any]]:
        """The replies to `requests` (one per entry of `groups`); with `aside`, a data error
        (a key of another type) is None in place and its group set aside there."""
        if aside is None:
            return (yield list(requests))
        return self.set_aside(groups, (yield Partial(requests)), aside)

    @staticmethod
    def set_aside(
        groups: Sequence[GroupKeys], replies: Sequence[Any], aside: list[Skipped]
    ) -> list[Any]:
        """`sound`'s replies from a `Partial` batch's: a data error None in place and its
        group set aside in `aside`, any other error raised."""
        out: list[Any] = []
        for gk, reply in zip(groups, replies, strict=True):
            if isinstance(reply, PresenceDataError):
                aside.append(Skipped(gk.data, str(reply), gk.queue, gk.group))
                out.append(None)
            elif isinstance(reply, PresenceError):
                raise reply
            else:
                out.append(reply)
        return out

    def per_queue(self, groups: list[GroupKeys]) -> list[list[GroupKeys]]:
        """Standalone: one script call for everything; cluster: one per queue (one slot)."""
        if not groups:
            return []
        if not self.clustered:
            return [groups]
        return [list(part) for _, part in groupby(groups, key=attrgetter("queue"))]

    def migrate(self) -> Plan[Migrated]:
        """Bring a prefix to this protocol version: list in ``P:groups`` every group of the
        index of release 0.1 (``P:index``), a page at a time, and empty that index; then set
        ``P:protocol`` to PROTOCOL_VERSION (a prefix in mode 1 leaves it: run it once every
        client speaks version 2) and, on a standalone server, seed the fleet indexes
        (``P:newest``, ``P:oldest``) from each indexed group's newest and oldest beat, and
        ``P:ttls`` from its own TTL (before the ``SET`` too, so readers find it whole), a
        page of groups at a time. Returns how many groups it moved (`Migrated`). Safe to
        run while brokers beat, and again at any time (it moves only what is left, and
        seeding again changes nothing a beat wrote since: ``ZADD GT`` / ``LT``)."""
        self.scope.writable("migrate")
        return self._migrate()

    def _migrate(self) -> Plan[Migrated]:
        # It moves groups into this version's index: the version is read first, always
        # (several commands, not one script: not atomic with the moves).
        (version,) = yield [Command("GET", (self.keys.protocol,))]
        _check_protocol(self.keys.protocol, version)
        was = None if version is None else _text(version)
        moved = yield from self._move_legacy()
        if was != PROTOCOL_VERSION:
            # The own TTLs first: readers trust P:ttls from the moment the prefix says "2".
            if not self.clustered:
                yield from self._seed_fleet(beats=False)
            yield [Command("SET", (self.keys.protocol, PROTOCOL_VERSION))]
            self._cache.protocol_took([PROTOCOL_VERSION.encode()])
            self._cache.claim()
        seeded = 0 if self.clustered else (yield from self._seed_fleet(beats=True))
        return Migrated(moved, seeded=seeded, was=was)

    def _seed_fleet(self, *, beats: bool) -> Plan[int]:
        """``ZADD P:ttls LT`` every indexed group's own TTL (a valid ``P:{Q}:G:ttl``), and,
        with `beats`, ``ZADD P:newest GT`` and ``ZADD P:oldest LT`` its newest and oldest
        beat (whole µs), a page of the index at a time; returns how many groups' beats it
        seeded. ``LT`` for the TTLs: a seed that races a `set_ttl` leaves at most a lower
        score than the setting (a hint that only makes readers visit more groups)."""
        seeded = 0
        after: Any = None
        page = self.limits.groups
        while True:
            low = (
                "-"
                if after is None
                else (b"(" + after if isinstance(after, bytes) else f"({after}")
            )
            (members,) = yield [
                Command("ZRANGEBYLEX", (self.keys.groups, low, "+", "LIMIT", 0, page))
            ]
            if not members:
                return seeded
            groups = []
            for member in members:
                try:
                    groups.append(self.keys.from_member(member))
                except PresenceDataError:
                    continue  # not a member this package wrote: nothing to seed
            per = 3 if beats else 1
            replies = (
                (
                    yield Partial(
                        [
                            request
                            for gk in groups
                            for request in (
                                Command("GET", (gk.ttl,)),
                                *(
                                    Command("ZRANGE", (gk.hb, index, index, "WITHSCORES"))
                                    for index in ((-1, 0) if beats else ())
                                ),
                            )
                        ]
                    )
                )
                if groups
                else []
            )
            ttls: list[Any] = []
            newest: list[Any] = []
            oldest: list[Any] = []
            for i, gk in enumerate(groups):
                own = _own_ttl(replies[per * i])
                if own is not None:
                    ttls += (own, gk.member)
                if not beats:
                    continue
                high, low_end = _score(replies[per * i + 1]), _score(replies[per * i + 2])
                if high is None or low_end is None:
                    continue  # an emptied group (or a key of another type): nothing to seed
                newest += (high, gk.member)
                oldest += (low_end, gk.member)
                seeded += 1
            batch: list[Request] = []
            if ttls:
                batch.append(Command("ZADD", (self.keys.ttls, "LT", *ttls)))
            if newest:
                batch.append(Command("ZADD", (self.keys.newest, "GT", *newest)))
                batch.append(Command("ZADD", (self.keys.oldest, "LT", *oldest)))
            if batch:
                yield batch
            if len(members) < page:
                return seeded
            after = members[-1]

    def _move_legacy(self) -> Plan[int]:
        """The 0.1 index's groups moved into ``P:groups``; returns how many."""
        moved = 0
        legacy = self.keys.legacy_index
        while True:
            (members,) = yield [Command("SRANDMEMBER", (legacy, self.limits.groups))]
            if not members:
                return moved
            groups = [self.keys.from_legacy_member(member) for member in members]
            live = [gk for gk in groups if gk is not None]
            exists = yield [Command("EXISTS", (gk.hb,)) for gk in live]
            listed = [
                m for gk, e in zip(live, exists, strict=True) if int(e) for m in (0, gk.member)
            ]
            if listed:
                yield [Command("ZADD", (self.keys.groups, *listed))]
            yield [Command("SREM", (legacy, *members))]
            moved += len(listed) // 2

    def fleet_indexes(self) -> Plan[FleetIndexes]:
        """Whether a reader may pick groups from ``P:newest`` and ``P:oldest`` (standalone,
        a prefix that says ``"2"``: no version-1 writer is left to skip them), whether
        each holds as many groups as the index (a group missing from one, as between
        `migrate`'s ``SET`` and its seeding, makes its fleet-wide ranges incomplete), and
        the least own TTL of a group (``P:ttls``: complete from the moment the prefix says
        ``"2"``, since `migrate` seeds it first and every writer of version 2 keeps it).
        One round trip: ``GET P:protocol`` (another version is refused), three ``ZCARD``
        and the lowest member of ``P:ttls``."""
        if self.clustered:
            return FleetIndexes(False, False, False)
        version, listed, newest, oldest, least = yield [
            Command("GET", (self.keys.protocol,)),
            Command("ZCARD", (self.keys.groups,)),
            Command("ZCARD", (self.keys.newest,)),
            Command("ZCARD", (self.keys.oldest,)),
            Command("ZRANGEBYSCORE", (self.keys.ttls, "-inf", "+inf", "WITHSCORES", "LIMIT", 0, 1)),
        ]
        _check_protocol(self.keys.protocol, version)
        if version is None or _text(version) != PROTOCOL_VERSION:
            return FleetIndexes(False, False, False)
        return FleetIndexes(
            True, int(newest) >= int(listed), int(oldest) >= int(listed), _least_ttl(least)
        )

    def index_scores(self, key: str, groups: Sequence[GroupKeys]) -> Plan[list[float | None]]:
        """Each group's score in the fleet index `key` (None: not there): a ``ZMSCORE`` of
        `Limits.groups` members at a time, all in one round trip."""
        if not groups:
            return []
        page = self.limits.groups
        replies = yield [
            Command("ZMSCORE", (key, *(gk.member for gk in groups[i : i + page])))
            for i in range(0, len(groups), page)
        ]
        return [None if s is None else float(s) for scores in replies for s in scores]

    def every_group(self, skipped: list[Skipped]) -> Plan[list[GroupKeys]]:
        """Every indexed group, in the index's order, in two round trips for any size:
        ``ZCARD``, then pages of `Limits.groups` members by rank (``ZRANGE``), each
        starting RANK_OVERLAP members before the last one ended, all sent at once (and more
        pages while the last is full). The pages are not one snapshot: up to RANK_OVERLAP
        groups that leave the index between two of them shift none out of sight; a group
        added meanwhile may be missed, as by a read just before it came. A member this
        package did not write is set aside in `skipped`."""
        page = self.limits.groups
        stride = max(1, page - RANK_OVERLAP)
        (size,) = yield [Command("ZCARD", (self.keys.groups,))]
        members: dict[Any, None] = {}
        start = 0
        while True:
            starts = list(range(start, max(int(size), start + 1), stride))
            replies = yield [
                Command("ZRANGE", (self.keys.groups, first, first + page - 1)) for first in starts
            ]
            for reply in replies:
                members.update(dict.fromkeys(reply))
            if len(replies[-1]) < page:
                break
            start = size = starts[-1] + stride
        found = []
        for member in sorted(members, key=_text):
            try:
                found.append(self.keys.from_member(member))
            except PresenceDataError as error:
                skipped.append(Skipped(_text(member), str(error)))
        return found

    def scored_at_most(
        self, key: str, bound_us: int, skipped: list[Skipped]
    ) -> Plan[list[GroupKeys]]:
        """Every group of the fleet index `key` scored at most `bound_us`, lowest first
        (``ZRANGEBYSCORE``, `Limits.groups` a command, all read before the caller acts on
        any); a member this package did not write is set aside in `skipped`."""
        found = yield from self.scores_at_most(key, bound_us, skipped)
        return [gk for gk, _ in found]

    def scores_at_most(
        self, key: str, bound_us: int, skipped: list[Skipped]
    ) -> Plan[list[tuple[GroupKeys, float]]]:
        """`scored_at_most`, each group with its score (``WITHSCORES``)."""
        found: list[tuple[GroupKeys, float]] = []
        page = self.limits.groups
        offset = 0
        while True:
            (reply,) = yield [
                Command(
                    "ZRANGEBYSCORE",
                    (key, "-inf", bound_us, "WITHSCORES", "LIMIT", offset, page),
                )
            ]
            pairs = (
                reply
                if reply and isinstance(reply[0], list | tuple)
                else list(zip(reply[::2], reply[1::2], strict=True))
            )
            for member, score in pairs:
                try:
                    found.append((self.keys.from_member(member), float(score)))
                except PresenceDataError as error:
                    skipped.append(Skipped(_text(member), str(error)))
            if len(pairs) < page:
                return found
            offset += page


class FleetIndexes(NamedTuple):
    """What `IndexPlans.fleet_indexes` found: whether ``P:newest``, ``P:oldest`` and
    ``P:ttls`` are kept (`kept`), whether the first two hold every indexed group, and the
    lowest score of ``P:ttls`` (`least_own_ttl_ms`; None: no group has its own TTL)."""

    kept: bool
    newest_complete: bool
    oldest_complete: bool
    least_own_ttl_ms: int | None = None


def _least_ttl(reply: Any) -> int | None:
    """The lowest score of ``P:ttls`` from its ``ZRANGEBYSCORE ... LIMIT 0 1`` reply (None:
    empty), in whole ms from 0 to MAX_TTL_MS: a score no client writes (a fraction, a
    negative or infinite one) is a hint still, rounded down or clamped."""
    if not reply:
        return None
    first = reply[0]
    score = float(first[1] if isinstance(first, list | tuple) else reply[1])
    return int(max(0.0, min(score, float(MAX_TTL_MS))))

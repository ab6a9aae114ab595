"""The per-group summary: `groups`, `group`, `group_page`, `group_names` and `group_order`,
each tracked group's counts (active, stale, expired; with details its oldest beat and the
leases of its expired consumers; with capacity its live consumers' capacity, free slots and
draining) reported with the declared groups (`DeclaredPlans`) and their minimums.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any

from ..errors import PresenceDataError
from ..keys import GroupKeys, decode_min_active
from ..model import (
    DEFAULT_PRESENCE_TTL_MS,
    ConsumerPresence,
    GroupPresence,
    GroupsPage,
    LiveTally,
    PresenceState,
    Rows,
    Skipped,
    StaleTally,
    groups_set_aside,
)
from ..replies import sound_columns
from ..validation import (
    check_filter,
    check_flags,
    check_name,
    check_now_ns,
    check_optional_ttl_ms,
)
from .caches import SettingsCache
from .core import Job, Scope, Spoilt, _report, _text, _unique
from .declared import DeclaredPlans
from .index import FleetIndexes, IndexPlans
from .reads import ReadPlans
from .requests import Command, Partial, Plan, Request
from .settings import SettingsPlans


def _lowest(reply: Any) -> tuple[Any, int] | None:
    """The member and score (whole microseconds) of a ``ZRANGEBYSCORE ... WITHSCORES LIMIT
    0 1`` reply (None: an empty set): a flat ``[member, score]`` or, with RESP3,
    ``[[member, score]]``."""
    if not reply:
        return None
    first = reply[0]
    name, score = first if isinstance(first, list | tuple) else (reply[0], reply[1])
    return name, int(float(score))


DETAILED_GROUPS = 1_000
"""Most groups `groups(details=True)` counts a round trip: ten index pages (each command
still touches one group, or the settings of a page). A scrape waits for the server once
per round trip: under load, more than for its work."""


class _Degraded:
    """A group of `DeclaredPlans._detailed` whose oldest consumer is not active: its
    horizons (ns) and their microseconds (`edges`), its oldest member (name, µs), and what
    its counts found (`counted`: above the active edge; `between`: between the edges)."""

    __slots__ = ("between", "counted", "edges", "gk", "horizons", "low")

    def __init__(self, gk: GroupKeys, horizons: tuple[int, int], low: tuple[Any, int]) -> None:
        self.gk = gk
        self.horizons = horizons
        self.edges = (horizons[0] // 1_000, horizons[1] // 1_000)
        self.low = low
        self.counted = 0
        self.between = 0


class GroupPlans(Job):
    """The per-group summary (`groups`, `group`, `group_page`, `group_names`,
    `group_order`), which reports the declared groups with the live ones. Built from its
    `Scope`, its planner's `SettingsCache`, and the jobs whose steps it takes
    (`DeclaredPlans`' declarations, `SettingsPlans`, `IndexPlans`, and `ReadPlans`'
    counting)."""

    __slots__ = ("_cache", "_declared", "_index", "_reads", "_settings")

    def __init__(
        self,
        scope: Scope,
        cache: SettingsCache,
        declared: DeclaredPlans,
        settings: SettingsPlans,
        index: IndexPlans,
        reads: ReadPlans,
    ) -> None:
        super().__init__(scope)
        self._cache = cache
        self._declared = declared
        self._settings = settings
        self._index = index
        self._reads = reads

    def groups(
        self,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        details: bool = False,
        capacity: bool = False,
        departures: bool = False,
    ) -> Plan[list[GroupPresence]]:
        """Every tracked or declared group, ordered by (queue, group), with its active, stale
        and expired consumers (at `now_ns`, under `ttl_ms` or each group's shared TTL), its
        `min_active` (None: not declared) and whether it has fewer active consumers.

        With `details`, also each group's oldest heartbeat (its sorted set's lowest score:
        O(log n) a group, in the same batch as its size) and the leases its expired
        consumers hold: the expired ones are a range of its sorted set, read
        `Limits.consumers` names at a time, and only their stored values (``HMGET``), so
        this costs what the expired consumers are, not the group (a group's leases in total
        would need every stored value: a snapshot's cost).

        With `capacity`, also each group's capacity, free slots, draining consumers and
        conflicts (so its `verdict` can be `DRAINING`, and draining excuses a shortfall):
        the stored values of its live (active and stale) consumers, never its expired ones
        (`live`: a ``ZRANGEBYSCORE`` and an ``HMGET`` a group for each `Limits.consumers`
        live consumers, one round trip more a page of groups). Without it those are None
        (docs/concepts.md, "Capacity and draining"). With `departures` (and not `capacity`),
        only the stale consumers' values are read, of the groups that have some: enough to
        tell a planned departure (`draining_stale`, which excuses a shortfall in the
        verdict) from a failure, at the cost of the stale consumers alone; the other four
        stay None."""
        ttl = check_optional_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        check_flags(details=details, capacity=capacity, departures=departures)
        return self._groups(now, ttl, details, capacity, departures)

    def _groups(
        self,
        now_ns: int | None,
        ttl_ms: int | None,
        details: bool = False,
        capacity: bool = False,
        departures: bool = False,
    ) -> Plan[list[GroupPresence]]:
        now = yield from self.scope.now(now_ns)
        skipped: list[Skipped] = []
        declared = yield from self._declared.declarations(skipped)
        counts: dict[tuple[str, str], tuple[int, int, int]] = {}
        extra: dict[tuple[str, str], tuple[int | None, int]] = {}
        lives: dict[tuple[str, str], LiveTally] = {}
        after: Any = None
        while True:
            groups, after = yield from self._index.listed(None, None, after, skipped)
            ttls: list[int] = []
            while details and after is not None and len(groups) < DETAILED_GROUPS:
                page, after = yield from self._index.listed(None, None, after, skipped)
                groups = [*groups, *page]
            if groups and details:
                found = yield from self._detailed(groups, now, ttl_ms, skipped)
                for gk, tally, oldest, held in found:
                    counts[(gk.queue, gk.group)] = tally
                    extra[(gk.queue, gk.group)] = (oldest, held)
            elif groups:
                groups, ttls = yield from self._settings.sound_ttls(
                    groups, ttl_ms, skipped, together=True
                )
            if groups and not details:
                horizons = [PresenceState.horizons_ns(now, ttl) for ttl in ttls]
                # Each group's size with both counts' first requests, in one batch.
                lows, highs = [h[0] for h in horizons], [h[1] for h in horizons]
                pairs = [gk for gk in groups for _ in (0, 1)]
                counting = [
                    *self._reads.above_asks(groups, lows),
                    *self._reads.above_asks(groups, highs),
                ]
                n = len(groups)
                replies = yield Partial([*(Command("ZCARD", (gk.hb,)) for gk in groups), *counting])
                cards = self._index.set_aside(groups, replies[:n], skipped)
                counted = self._index.set_aside([*pairs, *pairs], replies[n:], skipped)
                active = yield from self._reads.above_rest(groups, lows, counted[: 2 * n], skipped)
                alive = yield from self._reads.above_rest(groups, highs, counted[2 * n :], skipped)
                for gk, card, a, b in zip(groups, cards, active, alive, strict=True):
                    if card is not None and a is not None and b is not None:
                        counts[(gk.queue, gk.group)] = (a, b - a, int(card) - b)
            stale_only = departures and not capacity
            if groups and (capacity or departures):
                counted = [
                    gk
                    for gk in groups
                    if (gk.queue, gk.group) in counts
                    and (capacity or counts[(gk.queue, gk.group)][1] > 0)
                ]
                if details:  # the TTLs `_detailed` read (cached)
                    ttls = yield from self._settings.ttls_for(counted, ttl_ms)
                else:
                    ttl_of = dict(zip(groups, ttls, strict=True))
                    ttls = [ttl_of[gk] for gk in counted]
                found_live = yield from self.live(counted, now, ttls, skipped, stale_only)
                lives.update(
                    ((gk.queue, gk.group), t) for gk, t in zip(counted, found_live, strict=True)
                )
            if after is None:
                break
        _report(skipped)
        out: Rows[GroupPresence] = Rows()
        nothing: tuple[int | None, int] = (None, 0)
        # A group set aside is left out, declared or not: never shown without consumers.
        for key in sorted((counts.keys() | declared.keys()) - groups_set_aside(skipped)):
            n_active, n_stale, n_expired = counts.get(key, (0, 0, 0))
            more: tuple[int | None, int | None] = (
                extra.get(key, nothing) if details else (None, None)
            )
            live: LiveTally | None = None
            if capacity:
                live = lives.get(key, LiveTally())
            elif departures:
                live = lives.get(key, StaleTally())
            out.append(
                GroupPresence.of(
                    *key, n_active, n_stale, n_expired, declared.get(key), *more, live=live
                )
            )
        out.skipped = _unique(skipped)
        return out

    def group(
        self, queue: str, group: str, now_ns: int | None = None, ttl_ms: int | None = None
    ) -> Plan[GroupPresence]:
        """One group as a row of `groups()` (its counts at `now_ns` under `ttl_ms` or its
        shared TTL, and its declared minimum; zeros for a group neither tracked nor
        declared), with its capacity, free slots, draining consumers and conflicts (so its
        `verdict` can be `DRAINING`): its keys alone, ``ZCARD``, both counts and the
        declaration's ``HMGET`` and its first page of live names in one batch (after the
        shared TTL, cached), then the stored values of its live consumers only (`live`: a
        round trip of an ``HMGET`` and the next ``ZRANGEBYSCORE`` for each
        `Limits.consumers` of them); no expired consumer's value is read."""
        queue, group = check_name("queue", queue), check_name("group", group)
        ttl = check_optional_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        return self._group(queue, group, now, ttl)

    def _group(
        self, queue: str, group: str, now_ns: int | None, ttl_ms: int | None
    ) -> Plan[GroupPresence]:
        now = yield from self.scope.now(now_ns)
        gk = self.keys.group(queue, group)
        (ttl,) = yield from self._settings.ttls_for([gk], ttl_ms)
        horizons = list(PresenceState.horizons_ns(now, ttl))
        key = self.keys.queue_expect(queue)
        card, (least,), first, *counted = yield [
            Command("ZCARD", (gk.hb,)),
            Command("HMGET", (key, group)),  # the reader role's, as `min_active`
            *self.live_asks([gk], now, [ttl]),
            *self._reads.above_asks([gk, gk], horizons),
        ]
        skipped: list[Skipped] = []
        active, alive = yield from self._reads.above_rest([gk, gk], horizons, counted, skipped)
        (tally,) = yield from self.live_rest([gk], now, [ttl], [first], skipped)
        _report(skipped)
        a, b = active or 0, alive or 0
        minimum = None if least is None else decode_min_active(key, group, least)
        return GroupPresence.of(queue, group, a, b - a, int(card) - b, minimum, live=tally)

    def _tally(
        self, groups: list[GroupKeys], horizons: list[tuple[int, int]], skipped: list[Skipped]
    ) -> Plan[list[tuple[int, int, int] | None]]:
        """Each group's active, stale and expired consumers (``ZCARD`` and ``ZCOUNT``s,
        O(log n) a group); None for a group set aside in `skipped` (data it cannot read)."""
        cards = yield from self._index.sound(
            groups, [Command("ZCARD", (gk.hb,)) for gk in groups], skipped
        )
        active = yield from self._reads.above(groups, [h[0] for h in horizons], skipped, skipped)
        alive = yield from self._reads.above(groups, [h[1] for h in horizons], skipped, skipped)
        return [
            None if card is None or a is None or b is None else (a, b - a, int(card) - b)
            for card, a, b in zip(cards, active, alive, strict=True)
        ]

    def group_page(
        self,
        *,
        after: tuple[str, str] | None = None,
        before: tuple[str, str] | None = None,
        limit: int = 100,
        queue: str | None = None,
        names: Callable[[str, str], bool] | None = None,
        match: Callable[[GroupPresence], bool] | None = None,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        attention: bool = False,
    ) -> Plan[GroupsPage]:
        """Up to `limit` tracked or declared groups in the index's order (`group_order`),
        strictly after the group `after` (or before `before`, still given in that order), of
        one `queue` when given, whose names pass `names` and whose counts pass `match`; and
        whether more of them lie beyond on that side. The index is read from the cursor a
        page (`Limits.groups`) at a time and only the groups whose names pass are counted,
        as `groups()` counts them; declared groups come from `expected()`.

        With `attention`, only the groups nobody reads (no active consumer) or below their
        declared minimum: on a standalone server of a prefix at version 2 only the groups
        whose ``P:newest`` is at or below their active horizon (and the declared ones) are
        counted, picked from one range of it when `ttl_ms` is given, else from each index
        page's scores (``ZMSCORE``); elsewhere every group is (docs/performance.md)."""
        if type(attention) is not bool:
            raise TypeError(f"attention must be a bool, got {type(attention).__name__}")
        if after is not None and before is not None:
            raise ValueError("a page of groups starts after one group or ends before one, not both")
        if type(limit) is not int or not 1 <= limit <= 10_000:
            raise ValueError(f"limit must be an integer from 1 to 10,000, got {limit!r:.40}")
        edge = after if after is not None else before
        bound = None
        if edge is not None:
            bound = self.group_order(*edge)
        return self._group_page(
            bound,
            before is not None,
            limit,
            check_filter("queue", queue),
            names,
            match,
            check_now_ns(now_ns),
            check_optional_ttl_ms(ttl_ms),
            attention,
        )

    def group_names(self, queue: str | None = None) -> Plan[list[tuple[str, str]]]:
        """Every indexed (queue, group) (of one `queue`), ordered by name: the index alone,
        `Limits.groups` members a command; no group is counted or read."""
        return self._group_names(check_filter("queue", queue))

    def _group_names(self, queue: str | None) -> Plan[list[tuple[str, str]]]:
        found: list[tuple[str, str]] = []
        skipped: list[Skipped] = []
        after: Any = None
        while True:
            groups, after = yield from self._index.listed(queue, None, after, skipped)
            found += [(gk.queue, gk.group) for gk in groups]
            if after is None:
                _report(skipped)
                return sorted(found)

    def group_order(self, queue: str, group: str) -> str:
        """What `group_page` orders groups by: their index member (the percent-encoded
        queue, then group, names: byte order for names of ASCII letters, digits, ``-``,
        ``_``, ``.``, ``~`` where neither name extends another)."""
        return self.keys.group(check_name("queue", queue), check_name("group", group)).member

    def _group_page(
        self,
        bound: str | None,
        reverse: bool,
        limit: int,
        queue: str | None,
        names: Callable[[str, str], bool] | None,
        match: Callable[[GroupPresence], bool] | None,
        now_ns: int | None,
        ttl_ms: int | None,
        attention: bool = False,
    ) -> Plan[GroupsPage]:
        now = yield from self.scope.now(now_ns)
        skipped: list[Skipped] = []
        declared = yield from self._declared.declarations(skipped)
        fleet = FleetIndexes(False, False, False)
        if attention:
            fleet = yield from self._index.fleet_indexes()
        # The groups nobody may read, read whole, and walked with the declared ones instead
        # of the index (every declared group is counted: it may be below its minimum).
        # One TTL for all: one range of P:newest, at or below the active horizon (a lower
        # bound of a group's newest beat, so none is missed). Each group's own TTL: the
        # same range at the horizon of the least TTL any group may have (the prefix's, or
        # the lowest of P:ttls: a later horizon, so it holds every group unread under its
        # own TTL), of which those at or below their own horizon are kept (their TTLs: one
        # MGET). Else (P:newest incomplete, the prefix's TTL spoilt) every indexed group
        # (`every_group`, two round trips), its shared TTL (one) and its P:newest (one),
        # kept when at or below its own active horizon or missing.
        unread: list[Any] | None = None
        quiet: list[GroupKeys] | None = None
        least = ttl_ms
        if fleet.newest_complete and ttl_ms is None:
            least = yield from self._settings.least_ttl(fleet.least_own_ttl_ms)
        if fleet.newest_complete and ttl_ms is not None:
            edge_us = PresenceState.horizons_ns(now, ttl_ms)[0] // 1_000
            quiet = yield from self._index.scored_at_most(self.keys.newest, edge_us, skipped)
        elif fleet.newest_complete and least is not None:
            edge_us = PresenceState.horizons_ns(now, least)[0] // 1_000
            scored = yield from self._index.scores_at_most(self.keys.newest, edge_us, skipped)
            quiet = yield from self._maybe_unread(now, skipped, scored)
        elif fleet.kept and ttl_ms is None:
            quiet = yield from self._maybe_unread(now, skipped)
        if quiet is not None:
            unread = sorted(
                {gk.member for gk in quiet} | {self.keys.group(q, g).member for q, g in declared}
            )
        lonely = sorted(
            (self.keys.group(q, g) for q, g in declared if queue is None or q == queue),
            key=attrgetter("member"),
            reverse=reverse,
        )
        low, high = self.keys.queue_range(queue) if queue is not None else ("-", "+")
        step = self.limits.groups
        picked: list[GroupPresence] = []

        def past(member: str, mark: str | None) -> bool:  # beyond `mark` in reading order
            return mark is None or (member < mark if reverse else member > mark)

        while True:
            if reverse:
                top = high if bound is None or (queue and bound >= high[1:]) else f"({bound}"
                command = Command("ZREVRANGEBYLEX", (self.keys.groups, top, low, "LIMIT", 0, step))
            else:
                bottom = low if bound is None or (queue and bound < low[1:]) else f"({bound}"
                command = Command("ZRANGEBYLEX", (self.keys.groups, bottom, high, "LIMIT", 0, step))
            if unread is not None:
                members = [
                    m
                    for m in (unread[::-1] if reverse else unread)
                    if past(m, bound) and low[1:] <= m and (high == "+" or m < high[1:])
                ]
                step = len(members) + 1  # one page: every candidate
            else:
                (members,) = yield [command]
            listed = []
            for member in members:
                try:
                    listed.append(self.keys.from_member(member))
                except PresenceDataError as error:
                    skipped.append(Skipped(_text(member), str(error)))
            last = _text(members[-1]) if len(members) == step else None  # None: the end
            seen = {gk.member for gk in listed}
            alone = [
                gk
                for gk in lonely
                if past(gk.member, bound)
                and (last is None or not past(gk.member, last))
                and gk.member not in seen
            ]
            wanted = sorted(
                (
                    gk
                    for gk in (*listed, *alone)
                    if (queue is None or gk.queue == queue)
                    and (names is None or names(gk.queue, gk.group))
                ),
                key=attrgetter("member"),
                reverse=reverse,
            )
            while wanted and len(picked) <= limit:
                chunk, wanted = wanted[: limit + 1 - len(picked)], wanted[limit + 1 - len(picked) :]
                tracked = [gk for gk in chunk if gk.member in seen]
                # A group set aside (None) is left out, declared or not.
                counted: dict[str, tuple[int, int, int] | None] = {}
                if tracked:
                    lost: list[Skipped] = []
                    sound, ttls = yield from self._settings.sound_ttls(
                        tracked, ttl_ms, lost, together=True
                    )
                    skipped += lost
                    counted.update((s.key, None) for s in lost)
                    horizons = [PresenceState.horizons_ns(now, ttl) for ttl in ttls]
                    found = yield from self._tally(sound, horizons, skipped)
                    counted.update(zip((gk.member for gk in sound), found, strict=True))
                for gk in chunk:
                    if gk.member in counted and counted[gk.member] is None:
                        continue  # set aside: its data cannot be read
                    row = GroupPresence.of(
                        gk.queue,
                        gk.group,
                        *(counted.get(gk.member) or (0, 0, 0)),
                        declared.get((gk.queue, gk.group)),
                    )
                    if match is None or match(row):
                        picked.append(row)
            if len(picked) > limit or last is None:
                break
            bound = last
        _report(skipped)
        shown = picked[:limit]
        return GroupsPage(shown[::-1] if reverse else shown, len(picked) > limit)

    def _maybe_unread(
        self, now: int, skipped: list[Skipped], found: list[tuple[GroupKeys, float]] | None = None
    ) -> Plan[list[GroupKeys]]:
        """Every group of `found` (None: every indexed group) that may have no active
        consumer under its own shared TTL: its ``P:newest`` at or below its active horizon,
        or missing; and every group whose TTL cannot be read (its count sets it aside)."""
        return (
            yield from self._settings.due_by_own_ttl(
                self._index,
                self.keys.newest,
                lambda ttl: PresenceState.horizons_ns(now, ttl)[0] // 1_000,
                skipped,
                found,
            )
        )

    def _detailed(
        self, groups: list[GroupKeys], now_ns: int, ttl_ms: int | None, skipped: list[Skipped]
    ) -> Plan[list[tuple[GroupKeys, tuple[int, int, int], int | None, int]]]:
        """Each group of an index page that can be read, with its active, stale and expired
        consumers, its oldest beat (ns; None: no consumer) and the leases its expired
        consumers hold (what the metrics report), each group set aside in `skipped` left
        out. What it sends costs what the groups are: first each group's ``ZCARD`` and its
        oldest member (``ZRANGEBYSCORE ... LIMIT 0 1``), with the page's shared TTLs (one
        ``MGET`` and one ``EXISTS`` on a standalone server); a group whose oldest beat is
        after its active horizon is all active (two commands). Only the others are counted
        (`_degraded`)."""
        n = len(groups)
        firsts = [
            request
            for gk in groups
            for request in (
                Command("ZCARD", (gk.hb,)),
                Command("ZRANGEBYSCORE", (gk.hb, "-inf", "+inf", "WITHSCORES", "LIMIT", 0, 1)),
            )
        ]
        asks = self._cache.asks(groups, together=not self.clustered) if ttl_ms is None else None
        also = asks.requests if asks is not None else self._cache.protocol_asks()
        replies = yield Partial([*firsts, *also])
        cards = self._index.set_aside(groups, replies[0 : 2 * n : 2], skipped)
        lows = self._index.set_aside(groups, replies[1 : 2 * n : 2], skipped)
        kept = [i for i in range(n) if cards[i] is not None and lows[i] is not None]
        ttls: list[int | Spoilt] = [Spoilt("")] * n
        if asks is None:
            self._cache.protocol_took(replies[2 * n :])
            ttls = [ttl_ms or DEFAULT_PRESENCE_TTL_MS] * n  # ttl_ms is given: no asks
        else:
            settings = yield from self._settings.spread(asks, replies[2 * n :])
            self._cache.take(asks, settings, {groups[i].data for i in kept})
            if kept:
                sound = [groups[i] for i in kept]
                seen = asks.seen["ttl"]
                found = self._settings.settled(seen, DEFAULT_PRESENCE_TTL_MS, sound, "ttl")
                for i, ttl in zip(kept, found, strict=True):
                    ttls[i] = ttl
        out: list[tuple[GroupKeys, tuple[int, int, int], int | None, int]] = []
        degraded: list[_Degraded] = []
        for i in kept:
            gk, ttl, card = groups[i], ttls[i], int(cards[i])
            if isinstance(ttl, Spoilt):
                skipped.append(Skipped(gk.data, ttl.reason, gk.queue, gk.group))
                continue
            low = _lowest(lows[i])
            if card == 0 or low is None:
                out.append((gk, (0, 0, 0), None, 0))
                continue
            horizons = PresenceState.horizons_ns(now_ns, ttl)
            if low[1] > horizons[0] // 1_000:  # the oldest beat is active: so is every one
                out.append((gk, (card, 0, 0), low[1] * 1_000, 0))
            else:
                degraded.append(_Degraded(gk, horizons, low))
        if degraded:
            out += yield from self._degraded(degraded, skipped)
        return out

    def _degraded(
        self, groups: list[_Degraded], skipped: list[Skipped]
    ) -> Plan[list[tuple[GroupKeys, tuple[int, int, int], int | None, int]]]:
        """The counts, oldest beat and expired leases of groups whose oldest consumer is not
        active, in one batch: the consumers above the active horizon's microsecond
        (``ZCOUNT``), between the two horizons' (``ZCOUNT``) and, when the oldest beat is
        at or before the expired horizon's microsecond, the names up to it (a page of
        `Limits.consumers`). A consumer on a horizon's microsecond is told by its stored
        value: those on the active one read when one may be there (`ReadPlans.above_rest`),
        those on the expired one with the expired names (`_expired`), whose leases that
        read sums. The counts come from one batch, so a consumer that left meanwhile is
        never counted alive."""
        most = self.limits.consumers
        batch: list[Request] = []
        owners: list[GroupKeys] = []
        for d in groups:
            hb, (active_us, expired_us) = d.gk.hb, d.edges
            batch += (
                Command("ZCOUNT", (hb, f"({active_us}", "+inf")),
                Command("ZCOUNT", (hb, f"({expired_us}", active_us)),
            )
            owners += (d.gk, d.gk)
            if d.low[1] <= expired_us:
                batch.append(Command("ZRANGEBYSCORE", (hb, "-inf", expired_us, "LIMIT", 0, most)))
                owners.append(d.gk)
        replies = iter(self._index.set_aside(owners, (yield Partial(batch)), skipped))
        sound: list[_Degraded] = []
        above: list[Any] = []  # `above_rest`'s replies: the count, then the names to tell
        pages: list[list[Any]] = []
        probes: list[int] = []
        for d in groups:
            count, between = next(replies), next(replies)
            names = next(replies) if d.low[1] <= d.edges[1] else []
            if count is None or between is None or names is None:
                continue  # set aside: a key of another type meanwhile
            d.between = int(between)
            if d.between >= 2 or (d.between == 1 and d.low[1] <= d.edges[1]):
                probes.append(len(sound))  # which of them is on the active edge: read them
            sound.append(d)
            tied = [d.low[0]] if d.between == 1 and d.low[1] == d.edges[0] else []
            d.counted = int(count)
            above += (d.counted, tied)
            pages.append(list(names))
        if probes:
            found = yield [
                Command(
                    "ZRANGEBYSCORE", (sound[j].gk.hb, *(sound[j].edges[0],) * 2, "LIMIT", 0, most)
                )
                for j in probes
            ]
            for j, names in zip(probes, found, strict=True):
                above[2 * j + 1] = list(names)
        keys = [d.gk for d in sound]
        active = yield from self._reads.above_rest(
            keys, [d.horizons[0] for d in sound], above, skipped
        )
        expired = yield from self._expired(keys, [d.horizons[1] for d in sound], pages, skipped)
        out: list[tuple[GroupKeys, tuple[int, int, int], int | None, int]] = []
        for d, n_active, (n_names, alive, held) in zip(sound, active, expired, strict=True):
            if n_active is None:
                continue
            out.append(
                (
                    d.gk,
                    (n_active, d.between - (n_active - d.counted) + alive, n_names - alive),
                    d.low[1] * 1_000,
                    held,
                )
            )
        return out

    def _expired(
        self,
        groups: list[GroupKeys],
        horizons: list[int],
        firsts: list[list[Any]],
        skipped: list[Skipped],
    ) -> Plan[list[tuple[int, int, int]]]:
        """For each group, given the first page of its names at or before its expired
        horizon's microsecond (`firsts`), the number of such names, those of them whose
        stored beat is after the horizon (on its microsecond: stale), and the leases the
        others hold: their stored values (``HMGET``, which say the beat to the nanosecond),
        the names `Limits.consumers` a command. A consumer whose stored value cannot be
        decoded is set aside in `skipped`, its leases uncounted (it stays expired)."""
        most = self.limits.consumers
        edges = [horizon // 1_000 for horizon in horizons]
        found = [[0, 0, 0] for _ in groups]
        pages = {i: (0, names) for i, names in enumerate(firsts) if names}
        while pages:
            order = list(pages)
            values = yield [Command("HMGET", (groups[i].data, *pages[i][1])) for i in order]
            going_on: list[int] = []
            for i, stored in zip(order, values, strict=True):
                _, names = pages[i]
                table = {n: v for n, v in zip(names, stored, strict=True) if v is not None}
                gk = groups[i]
                (_, _, beats, leases, _, _), bad = sound_columns(gk, table)
                skipped += (Skipped(gk.data, str(e), gk.queue, gk.group, c) for c, e in bad)
                edge = horizons[i]
                found[i][0] += len(names)
                found[i][1] += sum(beat > edge for beat in beats)
                found[i][2] += sum(k for beat, k in zip(beats, leases, strict=True) if beat <= edge)
                if len(names) == most:
                    going_on.append(i)
            if not going_on:
                break
            more = yield [
                Command(
                    "ZRANGEBYSCORE",
                    (groups[i].hb, "-inf", edges[i], "LIMIT", pages[i][0] + most, most),
                )
                for i in going_on
            ]
            pages = {
                i: (pages[i][0] + most, list(names))
                for i, names in zip(going_on, more, strict=True)
                if names
            }
        return [(a, b, c) for a, b, c in found]

    def live(
        self,
        groups: list[GroupKeys],
        now_ns: int,
        ttls: list[int],
        skipped: list[Skipped],
        stale_only: bool = False,
    ) -> Plan[list[LiveTally]]:
        """What the stored values of each group's live consumers say (`LiveTally`: capacity,
        leases, draining, conflicts): the names whose beat is at or after the expired
        horizon's microsecond (``ZRANGEBYSCORE``, `Limits.consumers` names a command) and
        their values (``HMGET`` of those names): two commands a group for each page of
        `Limits.consumers` live consumers, a round trip a page (the next page's names are
        asked with this page's values). It costs what the live consumers are, never the
        expired ones. A consumer on the horizon's microsecond is told by its stored beat;
        one whose stored value cannot be decoded is set aside in `skipped`, uncounted.
        `stale_only`: the names up to the active horizon's microsecond only (`StaleTally`s:
        the stale consumers' values, and the few active ones on that microsecond)."""
        firsts = yield self.live_asks(groups, now_ns, ttls, stale_only)
        return (yield from self.live_rest(groups, now_ns, ttls, firsts, skipped, stale_only))

    def live_asks(
        self, groups: list[GroupKeys], now_ns: int, ttls: list[int], stale_only: bool = False
    ) -> list[Request]:
        """The first requests of `live`: one ``ZRANGEBYSCORE`` a group."""
        return [
            self._live_page(gk, now_ns, ttl, 0, stale_only)
            for gk, ttl in zip(groups, ttls, strict=True)
        ]

    def _live_page(
        self, gk: GroupKeys, now_ns: int, ttl_ms: int, offset: int, stale_only: bool = False
    ) -> Command:
        horizons = PresenceState.horizons_ns(now_ns, ttl_ms)
        edge = horizons[1] // 1_000
        top: int | str = horizons[0] // 1_000 if stale_only else "+inf"
        return Command("ZRANGEBYSCORE", (gk.hb, edge, top, "LIMIT", offset, self.limits.consumers))

    def live_rest(
        self,
        groups: list[GroupKeys],
        now_ns: int,
        ttls: list[int],
        firsts: list[Any],
        skipped: list[Skipped],
        stale_only: bool = False,
    ) -> Plan[list[LiveTally]]:
        """`live` from the replies to its first requests (`live_asks`)."""
        most = self.limits.consumers
        tallies = [StaleTally() if stale_only else LiveTally() for _ in groups]
        pages = {i: (0, list(names)) for i, names in enumerate(firsts) if names}
        while pages:
            order = list(pages)
            batch: list[Request] = []
            for i in order:
                offset, names = pages[i]
                batch.append(Command("HMGET", (groups[i].data, *names)))
                if len(names) == most:
                    batch.append(
                        self._live_page(groups[i], now_ns, ttls[i], offset + most, stale_only)
                    )
            answers = iter((yield batch))
            going_on: dict[int, tuple[int, list[Any]]] = {}
            for i in order:
                offset, names = pages[i]
                gk = groups[i]
                got = next(answers)
                table = {n: v for n, v in zip(names, got, strict=True) if v is not None}
                columns, bad = sound_columns(gk, table)
                skipped += (Skipped(gk.data, str(e), gk.queue, gk.group, c) for c, e in bad)
                rows = ConsumerPresence.columns(
                    gk.queue, gk.group, *columns, now_ns=now_ns, ttl_ms=ttls[i]
                )
                for row in rows:
                    tallies[i].add(row)
                if len(names) == most:
                    more = list(next(answers))
                    if more:
                        going_on[i] = (offset + most, more)
            pages = going_on
        return tallies

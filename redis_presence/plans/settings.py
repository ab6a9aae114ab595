"""The shared settings: the TTL and the progress budget stored for a prefix or a group, as
plans that store and read them, and the steps every write and read takes to know them
(from the planner's `SettingsCache`, read again after `TTL_CACHE_MS`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from ..errors import PresenceDataError, PresenceError
from ..keys import GroupKeys
from ..model import DEFAULT_PRESENCE_TTL_MS, DEFAULT_STUCK_AFTER_MS, Skipped
from ..validation import (
    check_filter,
    check_name,
    check_optional_stuck_after_ms,
    check_optional_ttl_ms,
)
from .caches import _WHAT, BeatCache, Entry, SettingsCache, SharedAsks, _setting
from .core import Job, Scope, Spoilt, TtlSource
from .index import IndexPlans
from .requests import Command, Partial, Plan

V = TypeVar("V")


def _prefix_error(spoilt: Spoilt, kind: str) -> PresenceDataError:
    """The data error of a spoilt prefix-wide setting: every group without its own uses it,
    so it is no group's to set aside (docs/protocol.md, section 8)."""
    fix = "set_ttl, or redis-presence ttl set / unset" if kind == "ttl" else "set_stuck_after"
    return PresenceDataError(
        f"{spoilt.reason}; it is the prefix's shared {_WHAT[kind][2:]}, which every group "
        f"without its own uses, so every read that needs it fails until it is stored again "
        f"or deleted ({fix})"
    )


class SettingsPlans(Job):
    """The shared settings: the TTL and the progress budget stored for a prefix or a group.
    Built from its `Scope`, its planner's `SettingsCache` (what the planner read of them)
    and `BeatCache` (whose calls carry a TTL, forgotten when this planner stores one)."""

    __slots__ = ("_beats", "_cache")

    def __init__(self, scope: Scope, cache: SettingsCache, beats: BeatCache) -> None:
        super().__init__(scope)
        self._cache = cache
        self._beats = beats

    def set_ttl(
        self, ttl_ms: int | None, *, queue: str | None = None, group: str | None = None
    ) -> Plan[None]:
        """Store the TTL every reader and writer of this prefix shares (None: forget it): for
        the prefix (the default of every group), or for one group (`queue` and `group`)."""
        self.scope.writable("set_ttl")
        ttl = check_optional_ttl_ms(ttl_ms)
        gk = self._setting_group(queue, group, "ttl")
        return self._set_ttl(self.keys.ttl if gk is None else gk.ttl, ttl, gk)

    def _set_ttl(self, key: str, ttl_ms: int | None, own: GroupKeys | None = None) -> Plan[None]:
        """One call of ``setting.lua``, which checks the protocol version and stores (or
        forgets) the setting atomically, with, on a standalone server, a group's `own` TTL
        in the fleet index ``P:ttls``; on a cluster the version is checked first."""
        if self.clustered:
            yield from self._cache.protocol_checked()
        keys = [key] if self.clustered else [key, self.keys.protocol, self.keys.ttls]
        args: list[str | int] = ["" if ttl_ms is None else ttl_ms]
        if own is not None and not self.clustered:
            args.append(own.member)
        yield [self.scope.call("setting", keys, args)]
        self._cache.forget()  # this planner's next reads and beats see it at once
        self._beats.clear()

    def set_stuck_after(
        self, stuck_after_ms: int | None, *, queue: str | None = None, group: str | None = None
    ) -> Plan[None]:
        """Store the progress budget every reader shares (None: forget it), for the prefix
        or one group, as `set_ttl` stores the TTL: reads whose `stuck_after_ms` is None use
        it (within TTL_CACHE_MS in other processes)."""
        self.scope.writable("set_stuck_after")
        budget = check_optional_stuck_after_ms(stuck_after_ms)
        key = self._setting_key(queue, group, "stuck")
        return self._set_ttl(key, budget)

    def stuck_after(
        self, queue: str | None = None, group: str | None = None
    ) -> Plan[tuple[int, TtlSource]]:
        """The shared progress budget of one group (or of the prefix), read now, and where it
        comes from: ``"group"``, ``"prefix"`` or ``"default"`` (DEFAULT_STUCK_AFTER_MS)."""
        key = self._setting_key(queue, group, "stuck")
        return self._read_setting(key, self.keys.stuck, DEFAULT_STUCK_AFTER_MS, "stuck")

    def ttl(
        self, queue: str | None = None, group: str | None = None
    ) -> Plan[tuple[int, TtlSource]]:
        """The shared TTL of one group (or of the prefix), read now, and where it comes from:
        ``"group"`` (stored for it), ``"prefix"`` (stored for the prefix) or ``"default"``
        (DEFAULT_PRESENCE_TTL_MS, nothing stored)."""
        key = self._ttl_key(queue, group)
        return self._read_ttl(key)

    def ttl_in_use(
        self, queue: str | None = None, group: str | None = None
    ) -> Plan[tuple[int, TtlSource]]:
        """`ttl` as this planner's reads and beats with `ttl_ms` None use it: from its cache
        of shared settings, read again (one batch) when older than TTL_CACHE_MS, so a reader
        that shows its TTL shows the one its counts were made with."""
        return self._in_use(self._setting_group(queue, group, "ttl"), stucks=False)

    def stuck_after_in_use(
        self, queue: str | None = None, group: str | None = None
    ) -> Plan[tuple[int, TtlSource]]:
        """`stuck_after` as this planner's reads use it, from the same cache as `ttl_in_use`."""
        return self._in_use(self._setting_group(queue, group, "stuck"), stucks=True)

    def _in_use(self, gk: GroupKeys | None, *, stucks: bool) -> Plan[tuple[int, TtlSource]]:
        kind, default = (
            ("stuck", DEFAULT_STUCK_AFTER_MS) if stucks else ("ttl", DEFAULT_PRESENCE_TTL_MS)
        )
        groups = [] if gk is None else [gk]
        asks = yield from self.refresh_shared(groups, ttls=not stucks, stucks=stucks)
        known = asks.seen[kind]
        own = None if gk is None else known[gk.data][0]
        if isinstance(own, Spoilt):
            raise own.error()
        if own is not None:
            return own, "group"
        shared = known[None][0]
        if isinstance(shared, Spoilt):
            raise _prefix_error(shared, kind)
        return (default, "default") if shared is None else (shared, "prefix")

    def ttl_sources(
        self, groups: Iterable[tuple[str, str]]
    ) -> Plan[dict[tuple[str, str], tuple[int, TtlSource]]]:
        """`ttl` of each `(queue, group)`, read now: one ``GET`` a group (and one of the
        prefix), `Limits.rows` of them a round trip. A group whose own TTL this package
        cannot read is left out (a read of many groups sets it aside)."""
        pairs = list(
            dict.fromkeys((check_name("queue", q), check_name("group", g)) for q, g in groups)
        )
        return self._ttl_sources(pairs)

    def _ttl_sources(
        self, pairs: list[tuple[str, str]]
    ) -> Plan[dict[tuple[str, str], tuple[int, TtlSource]]]:
        (prefix,) = yield [Command("GET", (self.keys.ttl,))]
        shared = _setting(self.keys.ttl, prefix, "ttl")
        if isinstance(shared, Spoilt):
            raise _prefix_error(shared, "ttl")
        found: dict[tuple[str, str], tuple[int, TtlSource]] = {}
        fallback: tuple[int, TtlSource] = (
            (DEFAULT_PRESENCE_TTL_MS, "default") if shared is None else (shared, "prefix")
        )
        step = self.limits.rows
        for start in range(0, len(pairs), step):
            part = pairs[start : start + step]
            keys = [self.keys.group(q, g).ttl for q, g in part]
            replies = yield Partial(Command("GET", (key,)) for key in keys)
            for pair, key, reply in zip(part, keys, replies, strict=True):
                if isinstance(reply, PresenceError) and not isinstance(reply, PresenceDataError):
                    raise reply
                own = _setting(key, reply, "ttl")
                if not isinstance(own, Spoilt):
                    found[pair] = fallback if own is None else (own, "group")
        return found

    def _read_ttl(self, key: str) -> Plan[tuple[int, TtlSource]]:
        return self._read_setting(key, self.keys.ttl, DEFAULT_PRESENCE_TTL_MS, "ttl")

    def _read_setting(
        self, key: str, prefix_key: str, default: int, kind: str
    ) -> Plan[tuple[int, TtlSource]]:
        """The setting of one group (or of the prefix), read now: a spoilt one of the group
        is its data error, a spoilt one of the prefix raises when the group has none."""
        keys = [prefix_key] if key == prefix_key else [prefix_key, key]
        replies = yield Partial(Command("GET", (k,)) for k in keys)
        for reply in replies:
            if isinstance(reply, PresenceError) and not isinstance(reply, PresenceDataError):
                raise reply
        stored = [_setting(k, r, kind) for k, r in zip(keys, replies, strict=True)]
        own = stored[1] if len(stored) == 2 else None
        if isinstance(own, Spoilt):
            raise own.error()
        if own is not None:
            return own, "group"
        if isinstance(stored[0], Spoilt):
            raise _prefix_error(stored[0], kind)
        if stored[0] is not None:
            return stored[0], "prefix"
        return default, "default"

    def _ttl_key(self, queue: str | None, group: str | None) -> str:
        return self._setting_key(queue, group, "ttl")

    def _setting_key(self, queue: str | None, group: str | None, kind: str) -> str:
        gk = self._setting_group(queue, group, kind)
        if gk is None:
            return self.keys.ttl if kind == "ttl" else self.keys.stuck
        return gk.ttl if kind == "ttl" else gk.stuck

    def _setting_group(self, queue: str | None, group: str | None, kind: str) -> GroupKeys | None:
        """The group whose setting is asked for (None: the prefix's), its names checked."""
        if (queue is None) != (group is None):
            what = "a TTL" if kind == "ttl" else "a progress budget"
            raise ValueError(f"{what} is the prefix's (no queue, no group) or one group's (both)")
        if queue is None or group is None:
            return None
        queue, group = check_filter("queue", queue) or "", check_filter("group", group) or ""
        return self.keys.group(queue, group)

    def least_ttl(self, least_own_ttl_ms: int | None) -> Plan[int | None]:
        """The least shared TTL any group may have: the prefix's (else the default), or the
        least own TTL of a group (``P:ttls``, `IndexPlans.fleet_indexes`) when lower; None
        when the prefix's cannot be read (the caller then reads each group's, and that
        names it). From this planner's cache, read again when older than TTL_CACHE_MS."""
        asks = yield from self.refresh_shared([], ttls=True)
        shared = asks.seen["ttl"][None][0]
        if isinstance(shared, Spoilt):
            return None
        prefix = DEFAULT_PRESENCE_TTL_MS if shared is None else shared
        return prefix if least_own_ttl_ms is None else min(prefix, least_own_ttl_ms)

    def ttls_for(self, groups: list[GroupKeys], ttl_ms: int | None) -> Plan[list[int]]:
        """`ttl_ms` for every group, or, when it is None, each group's shared TTL (read with
        the protocol version; a given TTL reads the version alone, when it is due)."""
        if ttl_ms is not None:
            yield from self._cache.protocol_checked()
            return [ttl_ms] * len(groups)
        return (yield from self.shared_ttls(groups))

    def shared_ttls(self, groups: Sequence[GroupKeys]) -> Plan[list[int]]:
        """Each group's shared TTL (its own, else the prefix's, else the default), from what
        this planner read in the last TTL_CACHE_MS, reading the rest in one batch; a TTL it
        cannot read is a `PresenceDataError`."""
        asks = yield from self.refresh_shared(groups, stucks=False)
        return self.cached(asks.seen["ttl"], DEFAULT_PRESENCE_TTL_MS, groups, "ttl")

    def settled_ttls(
        self, groups: Sequence[GroupKeys], *, together: bool = False
    ) -> Plan[list[int | Spoilt]]:
        """`shared_ttls`, with `Spoilt` for a group whose own TTL cannot be read (a spoilt
        prefix TTL still raises: `settled`); `together`: as `refresh_shared`."""
        asks = yield from self.refresh_shared(groups, stucks=False, together=together)
        return self.settled(asks.seen["ttl"], DEFAULT_PRESENCE_TTL_MS, groups, "ttl")

    def shared_stucks(self, groups: Sequence[GroupKeys]) -> Plan[list[int]]:
        """Each group's shared progress budget (its own, else the prefix's, else
        DEFAULT_STUCK_AFTER_MS), cached and read as the TTLs are."""
        asks = yield from self.refresh_shared(groups, stucks=True)
        return self.cached(asks.seen["stuck"], DEFAULT_STUCK_AFTER_MS, groups, "stuck")

    @classmethod
    def cached(
        cls,
        known: dict[str | None, Entry],
        default: int,
        groups: Sequence[GroupKeys],
        kind: str,
    ) -> list[int]:
        """Each group's setting from what a plan just saw or read (`SharedAsks.seen`): its
        own, else the prefix's, else `default`; one that cannot be read raises."""
        found = cls.settled(known, default, groups, kind)
        for value in found:
            if isinstance(value, Spoilt):
                raise value.error()
        return found  # type: ignore[return-value]  # no Spoilt left

    @staticmethod
    def settled(
        known: dict[str | None, Entry],
        default: int,
        groups: Sequence[GroupKeys],
        kind: str,
    ) -> list[int | Spoilt]:
        """`cached`, with `Spoilt` for a group whose own setting cannot be read (its
        group's alone: a read of many sets that group aside). A spoilt setting of the
        prefix raises when a group has none of its own: it concerns them all."""
        prefix = known[None][0]
        out: list[int | Spoilt] = []
        for gk in groups:
            own = known[gk.data][0]
            if own is None:
                if isinstance(prefix, Spoilt):
                    raise _prefix_error(prefix, kind)
                own = default if prefix is None else prefix
            out.append(own)
        return out

    @staticmethod
    def keep(
        groups: Sequence[GroupKeys], settings: Sequence[V | Spoilt], aside: list[Skipped]
    ) -> tuple[list[GroupKeys], list[V]]:
        """The groups whose settings could be read, with them; the others set aside in
        `aside` (each with why)."""
        kept: list[GroupKeys] = []
        values: list[V] = []
        for gk, value in zip(groups, settings, strict=True):
            if isinstance(value, Spoilt):
                aside.append(Skipped(gk.data, value.reason, gk.queue, gk.group))
            else:
                kept.append(gk)
                values.append(value)
        return kept, values

    def sound_ttls(
        self,
        groups: list[GroupKeys],
        ttl_ms: int | None,
        aside: list[Skipped] | None,
        *,
        together: bool = False,
    ) -> Plan[tuple[list[GroupKeys], list[int]]]:
        """`ttls_for`, for a read that sets aside (in `aside`) a group whose own shared
        TTL cannot be read, and reads the others; `aside` None: that raises. `together`
        (a read of a page of groups): as `refresh_shared`."""
        if ttl_ms is not None or aside is None:
            return groups, (yield from self.ttls_for(groups, ttl_ms))
        settled = yield from self.settled_ttls(groups, together=together)
        return self.keep(groups, settled, aside)

    def ttls_and_stucks(
        self, groups: Sequence[GroupKeys], ttl_ms: int | None, stuck_after_ms: int | None
    ) -> Plan[tuple[list[int], list[int]]]:
        """The TTL and the progress budget of every group: the given ones, else the shared
        ones (read in one batch when both are needed)."""
        if ttl_ms is None and stuck_after_ms is None:
            yield from self.refresh_shared(groups, ttls=True, stucks=True)
        ttls = yield from self.ttls_for(list(groups), ttl_ms)
        if stuck_after_ms is not None:
            return ttls, [stuck_after_ms] * len(groups)
        return ttls, (yield from self.shared_stucks(groups))

    def refresh_shared(
        self,
        groups: Sequence[GroupKeys],
        *,
        ttls: bool = True,
        stucks: bool = False,
        together: bool = False,
    ) -> Plan[SharedAsks]:
        """Read, in one batch, the shared TTLs (and with `stucks` the progress budgets) of
        the prefix and of each group that this planner did not read in the last
        TTL_CACHE_MS; the asks, whose `seen` holds every setting asked for. With
        `together` (a read of many groups), on a standalone server, one ``MGET`` and one
        ``EXISTS`` read them all (`SettingsCache.asks`)."""
        together = together and not self.clustered
        asks = self._cache.asks(groups, ttls=ttls, stucks=stucks, together=together)
        if asks.requests:
            replies = yield from self.spread(asks, (yield Partial(asks.requests)))
            self._cache.take(asks, replies)
        return asks

    def spread(self, asks: SharedAsks, replies: list[Any]) -> Plan[list[Any]]:
        """`SettingsCache.spread`, with a ``GET`` of each key it cannot tell (a key of
        another type, or none): a reply per key of `asks`, as `SettingsCache.take` wants."""
        found, doubt = self._cache.spread(asks, replies)
        if doubt:
            skip = 1 if asks.protocol else 0
            again = yield Partial([Command("GET", (asks.asks[i - skip][2],)) for i in doubt])
            for i, reply in zip(doubt, again, strict=True):
                found[i] = reply
        return found

    def due_by_own_ttl(
        self,
        index: IndexPlans,
        key: str,
        horizon_us: Callable[[int], int],
        skipped: list[Skipped],
        found: list[tuple[GroupKeys, float]] | None = None,
    ) -> Plan[list[GroupKeys]]:
        """Every group of `found` (each with its score in the fleet index `key`; None: every
        indexed group, its score read) whose score is at or below the horizon of its own
        shared TTL (`horizon_us`), or missing from `key`, or whose TTL cannot be read (its
        reader names it, as before): the groups a prune (``P:oldest``) or the groups nobody
        reads (``P:newest``) visit. The TTLs and, without `found`, `every_group` and the
        scores: four round trips for any number of groups."""
        if found is None:
            groups = yield from index.every_group(skipped)
        else:
            groups = [gk for gk, _ in found]
        lost: list[Skipped] = []
        sound, ttls = yield from self.sound_ttls(groups, None, lost, together=True)
        if found is None:
            scores = yield from index.index_scores(key, sound)
        else:
            known = {gk.member: score for gk, score in found}
            scores = [known[gk.member] for gk in sound]
        due = {
            gk.member
            for gk, ttl, score in zip(sound, ttls, scores, strict=True)
            if score is None or score <= horizon_us(ttl)
        }
        kept = {gk.member for gk in sound}
        return [gk for gk in groups if gk.member in due or gk.member not in kept]

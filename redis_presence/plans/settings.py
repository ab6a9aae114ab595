"""The shared settings: the TTL and the progress budget stored for a prefix or a group,
and the cache of them every write and read consults (`TTL_CACHE_MS`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from ..errors import PresenceError
from ..keys import GroupKeys
from ..model import DEFAULT_PRESENCE_TTL_MS, DEFAULT_STUCK_AFTER_MS, NS_PER_MS
from ..validation import (
    check_filter,
    check_name,
    check_optional_stuck_after_ms,
    check_optional_ttl_ms,
)
from .core import TtlSource, _check_protocol, _stored_ttl
from .index import IndexPlans
from .limits import MAX_CACHED_GROUPS, TTL_CACHE_MS
from .requests import Command, Plan, Request


class SharedAsks(NamedTuple):
    """The reads of shared settings a plan has to send (`SettingsPlans._shared_asks`)."""

    requests: tuple[Request, ...]
    protocol: bool
    """Whether the first request reads ``P:protocol``."""
    asks: list[tuple[dict[str | None, tuple[int | None, int]], str | None, str, str]]
    """Each other request's cache, member (None: the prefix's), key and kind."""
    seen: dict[str, dict[str | None, tuple[int | None, int]]]
    """What the plan goes on with, by kind (``"ttl"``, ``"stuck"``): the entries that were
    fresh when it asked, then its replies (`_take_shared`). Its own, not the cache: another
    plan may empty the cache while this one waits on Redis."""


class SettingsPlans(IndexPlans):
    """The shared settings: the TTL and the progress budget stored for a prefix or a group,"""

    __slots__ = ()

    def set_ttl(
        self, ttl_ms: int | None, *, queue: str | None = None, group: str | None = None
    ) -> Plan[None]:
        """Store the TTL every reader and writer of this prefix shares (None: forget it): for
        the prefix (the default of every group), or for one group (`queue` and `group`)."""
        self._writable("set_ttl")
        ttl = check_optional_ttl_ms(ttl_ms)
        key = self._ttl_key(queue, group)
        return self._set_ttl(key, ttl)

    def _set_ttl(self, key: str, ttl_ms: int | None) -> Plan[None]:
        """One call of ``setting.lua``, which checks the protocol version and stores (or
        forgets) the setting atomically; on a cluster the version is checked first."""
        if self.clustered:
            yield from self._protocol_checked()
        keys = [key] if self.clustered else [key, self.keys.protocol]
        yield [self._call("setting", keys, ["" if ttl_ms is None else ttl_ms])]
        self._ttls.clear()  # this planner's next reads and beats see it at once
        self._stucks.clear()
        self._beat_calls.clear()

    def set_stuck_after(
        self, stuck_after_ms: int | None, *, queue: str | None = None, group: str | None = None
    ) -> Plan[None]:
        """Store the progress budget every reader shares (None: forget it), for the prefix
        or one group, as `set_ttl` stores the TTL: reads whose `stuck_after_ms` is None use
        it (within TTL_CACHE_MS in other processes)."""
        self._writable("set_stuck_after")
        budget = check_optional_stuck_after_ms(stuck_after_ms)
        key = self._setting_key(queue, group, "stuck")
        return self._set_ttl(key, budget)

    def stuck_after(
        self, queue: str | None = None, group: str | None = None
    ) -> Plan[tuple[int, TtlSource]]:
        """The shared progress budget of one group (or of the prefix), read now, and where it
        comes from: ``"group"``, ``"prefix"`` or ``"default"`` (DEFAULT_STUCK_AFTER_MS)."""
        key = self._setting_key(queue, group, "stuck")
        return self._read_setting(key, self.keys.stuck, DEFAULT_STUCK_AFTER_MS)

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
        asks = yield from self._refresh_shared(groups, ttls=not stucks, stucks=stucks)
        known = asks.seen[kind]
        own = None if gk is None else known[gk.data][0]
        if own is not None:
            return own, "group"
        shared = known[None][0]
        return (default, "default") if shared is None else (shared, "prefix")

    def ttl_sources(
        self, groups: Iterable[tuple[str, str]]
    ) -> Plan[dict[tuple[str, str], tuple[int, TtlSource]]]:
        """`ttl` of each `(queue, group)`, read now: one ``GET`` a group (and one of the
        prefix), `Limits.rows` of them a round trip."""
        pairs = list(
            dict.fromkeys((check_name("queue", q), check_name("group", g)) for q, g in groups)
        )
        return self._ttl_sources(pairs)

    def _ttl_sources(
        self, pairs: list[tuple[str, str]]
    ) -> Plan[dict[tuple[str, str], tuple[int, TtlSource]]]:
        (prefix,) = yield [Command("GET", (self.keys.ttl,))]
        shared = _stored_ttl(self.keys.ttl, prefix)
        found: dict[tuple[str, str], tuple[int, TtlSource]] = {}
        fallback: tuple[int, TtlSource] = (
            (DEFAULT_PRESENCE_TTL_MS, "default") if shared is None else (shared, "prefix")
        )
        step = self.limits.rows
        for start in range(0, len(pairs), step):
            part = pairs[start : start + step]
            keys = [self.keys.group(q, g).ttl for q, g in part]
            replies = yield [Command("GET", (key,)) for key in keys]
            for pair, key, reply in zip(part, keys, replies, strict=True):
                own = _stored_ttl(key, reply)
                found[pair] = fallback if own is None else (own, "group")
        return found

    def _read_ttl(self, key: str) -> Plan[tuple[int, TtlSource]]:
        return self._read_setting(key, self.keys.ttl, DEFAULT_PRESENCE_TTL_MS)

    def _read_setting(self, key: str, prefix_key: str, default: int) -> Plan[tuple[int, TtlSource]]:
        keys = [prefix_key] if key == prefix_key else [prefix_key, key]
        replies = yield [Command("GET", (k,)) for k in keys]
        stored = [_stored_ttl(k, r) for k, r in zip(keys, replies, strict=True)]
        if len(stored) == 2 and stored[1] is not None:
            return stored[1], "group"
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

    def _ttls_for(self, groups: list[GroupKeys], ttl_ms: int | None) -> Plan[list[int]]:
        """`ttl_ms` for every group, or, when it is None, each group's shared TTL (read with
        the protocol version; a given TTL reads the version alone, when it is due)."""
        if ttl_ms is not None:
            yield from self._protocol_checked()
            return [ttl_ms] * len(groups)
        return (yield from self._shared_ttls(groups))

    def _shared_ttls(self, groups: Sequence[GroupKeys]) -> Plan[list[int]]:
        """Each group's shared TTL (its own, else the prefix's, else the default), from what
        this planner read in the last TTL_CACHE_MS, reading the rest in one batch."""
        asks = yield from self._refresh_shared(groups, stucks=False)
        return self._cached(asks.seen["ttl"], DEFAULT_PRESENCE_TTL_MS, groups)

    def _shared_stucks(self, groups: Sequence[GroupKeys]) -> Plan[list[int]]:
        """Each group's shared progress budget (its own, else the prefix's, else
        DEFAULT_STUCK_AFTER_MS), cached and read as the TTLs are."""
        asks = yield from self._refresh_shared(groups, stucks=True)
        return self._cached(asks.seen["stuck"], DEFAULT_STUCK_AFTER_MS, groups)

    @staticmethod
    def _cached(
        known: dict[str | None, tuple[int | None, int]], default: int, groups: Sequence[GroupKeys]
    ) -> list[int]:
        """Each group's setting from what a plan just saw or read (`SharedAsks.seen`): its
        own, else the prefix's, else `default`."""
        default = known[None][0] or default
        return [known[gk.data][0] or default for gk in groups]

    def _ttls_and_stucks(
        self, groups: Sequence[GroupKeys], ttl_ms: int | None, stuck_after_ms: int | None
    ) -> Plan[tuple[list[int], list[int]]]:
        """The TTL and the progress budget of every group: the given ones, else the shared
        ones (read in one batch when both are needed)."""
        if ttl_ms is None and stuck_after_ms is None:
            yield from self._refresh_shared(groups, ttls=True, stucks=True)
        ttls = yield from self._ttls_for(list(groups), ttl_ms)
        if stuck_after_ms is not None:
            return ttls, [stuck_after_ms] * len(groups)
        return ttls, (yield from self._shared_stucks(groups))

    def _refresh_shared(
        self,
        groups: Sequence[GroupKeys],
        *,
        ttls: bool = True,
        stucks: bool = False,
    ) -> Plan[SharedAsks]:
        """Read, in one batch, the shared TTLs (and with `stucks` the progress budgets) of
        the prefix and of each group that this planner did not read in the last
        TTL_CACHE_MS; the asks, whose `seen` holds every setting asked for."""
        asks = self._shared_asks(groups, ttls=ttls, stucks=stucks)
        if asks.requests:
            self._take_shared(asks, (yield list(asks.requests)))
        return asks

    def _shared_asks(
        self,
        groups: Sequence[GroupKeys],
        *,
        ttls: bool = True,
        stucks: bool = False,
    ) -> SharedAsks:
        """The requests `_refresh_shared` sends (none when all is fresh), so that a plan may
        send them with requests of its own and hand their replies to `_take_shared`."""
        limit = self._clock() - TTL_CACHE_MS * NS_PER_MS
        caches = [(self._ttls, "ttl")] if ttls else []
        if stucks:
            caches.append((self._stucks, "stuck"))
        if len(self._ttls) + len(self._stucks) + len(groups) > MAX_CACHED_GROUPS:
            self._ttls.clear()  # start over, as the single-beat cache does
            self._stucks.clear()
        asks: list[tuple[dict[str | None, tuple[int | None, int]], str | None, str, str]] = []
        seen: dict[str, dict[str | None, tuple[int | None, int]]] = {}
        for cache, kind in caches:
            wanted: list[str | None] = [None, *dict.fromkeys(gk.data for gk in groups)]
            fresh = seen[kind] = {}
            for member in wanted:
                entry = cache.get(member)
                if entry is None or entry[1] < limit:
                    place = self.keys if member is None else self.keys.from_member(member)
                    asks.append((cache, member, getattr(place, kind), kind))
                else:
                    fresh[member] = entry
        protocol: list[Request] = []
        if self._protocol_at is None or self._protocol_at < limit:
            # The protocol version, with the shared settings (docs/protocol.md): every read
            # of the settings checks it (and a heartbeat claims it, `_claim`).
            protocol.append(Command("GET", (self.keys.protocol,)))
        requests = (*protocol, *(Command("GET", (key,)) for _, _, key, _ in asks))
        return SharedAsks(requests, bool(protocol), asks, seen)

    def _take_shared(
        self, asks: SharedAsks, replies: Sequence[Any], only: set[str] | None = None
    ) -> None:
        """Keep the replies to `asks` (with `only`, of those groups' members and the
        prefix's only: what the plan went on to read; an error reply among them raises)."""
        read_at = self._clock()
        skip = 1 if asks.protocol else 0
        kept = [
            reply
            for i, reply in enumerate(replies)
            if i < skip or only is None or asks.asks[i - skip][1] in (None, *only)
        ]
        for reply in kept:  # error replies come back in place from a `Partial` batch
            if isinstance(reply, PresenceError):
                raise reply
        if asks.protocol:
            _check_protocol(self.keys.protocol, replies[0])
            self._protocol_at = read_at
        for (cache, member, key, kind), reply in zip(asks.asks, replies[skip:], strict=True):
            if only is None or member is None or member in only:
                cache[member] = asks.seen[kind][member] = (_stored_ttl(key, reply), read_at)

    def _trusted_until(self, gk: GroupKeys) -> int:  # the TTL cache is refreshed as a whole
        """Until when (monotonic ns) the TTL this planner read for `gk` may be trusted."""
        prefix, own = self._ttls.get(None), self._ttls.get(gk.data)
        if prefix is None or own is None:  # emptied since (by another thread's plan)
            return 0  # trusted no longer: the next beat reads the TTL again
        return min(prefix[1], own[1]) + TTL_CACHE_MS * NS_PER_MS

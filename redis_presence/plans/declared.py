"""Declared groups (``expect``/``unexpect``, their minimums) and the per-group summary
(`groups`), which reports the declared groups with the live ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import PresenceDataError, PresenceError
from ..keys import GroupKeys
from ..model import GroupPresence, PresenceState, Rows, Skipped
from ..replies import stored_columns
from ..validation import check_min_active, check_name, check_now_ns, check_optional_ttl_ms
from .core import T, _report, _text, _unique
from .reads import ReadPlans
from .requests import Command, Partial, Plan


def _stored_min(key: str, name: Any, value: Any) -> int:
    """A stored `min_active`; anything else is a data error."""
    try:
        return check_min_active(int(value))
    except (TypeError, ValueError):
        raise PresenceDataError(
            f"{key} field {_text(name)!r:.80} holds a minimum this package did not write: "
            f"{value!r:.40}"
        ) from None


def _lowest_score_ns(reply: Any) -> int | None:
    """The nanoseconds of a ``ZRANGE key 0 0 WITHSCORES`` reply's score (whole microseconds;
    None: an empty set): a flat ``[member, score]`` or, with RESP3, ``[[member, score]]``."""
    if not reply:
        return None
    first = reply[0]
    score = first[1] if isinstance(first, list | tuple) else reply[1]
    return int(float(score)) * 1_000


class DeclaredPlans(ReadPlans):
    """Declared groups (``expect``/``unexpect``, their minimums) and the per-group summary"""

    __slots__ = ()

    def expect(self, queue: str, group: str, min_active: int = 1) -> Plan[None]:
        """Declare that `group` must have at least `min_active` active readers of `queue`:
        kept in Redis (``P:{Q}:expect``, listed in ``P:expects``) until `unexpect`, whether
        or not the group has consumers."""
        self._writable("expect")
        queue, group = check_name("queue", queue), check_name("group", group)
        least = check_min_active(min_active)
        return self._expect(queue, group, least)

    def _expect(self, queue: str, group: str, least: int) -> Plan[None]:
        key = self.keys.queue_expect(queue)
        # The declaration first, then the index: a racing unexpect's re-check sees it.
        yield [Command("HSET", (key, group, least))]
        yield [Command("ZADD", (self.keys.expects, 0, key))]

    def unexpect(self, queue: str, group: str) -> Plan[bool]:
        """Forget a declared group; returns whether it was declared."""
        self._writable("unexpect")
        queue, group = check_name("queue", queue), check_name("group", group)
        return self._unexpect(queue, group)

    def _unexpect(self, queue: str, group: str) -> Plan[bool]:
        key = self.keys.queue_expect(queue)
        removed, left = yield [Command("HDEL", (key, group)), Command("HLEN", (key,))]
        if not int(left):
            # As the index of groups (docs/index-protocol.md): unlist, re-check, list again
            # when a racing expect declared a group meanwhile.
            yield [Command("ZREM", (self.keys.expects, key))]
            (exists,) = yield [Command("EXISTS", (key,))]
            if int(exists):
                yield [Command("ZADD", (self.keys.expects, 0, key))]
        return int(removed) == 1

    def expected(self) -> Plan[dict[tuple[str, str], int]]:
        """Every declared group and its `min_active`: the index a page of `Limits.groups`
        queues at a time, each queue's declarations ``HSCAN``ned `Limits.consumers` at a time."""
        return self._reported(self._expected)

    def _reported(self, read: Callable[[list[Skipped]], Plan[T]]) -> Plan[T]:
        """`read` with its own list of what it sets aside, reported when it is done."""
        skipped: list[Skipped] = []
        result = yield from read(skipped)
        _report(skipped)
        return result

    def min_active(self, queue: str, group: str) -> Plan[int | None]:
        """The minimum one group was declared with (None: not declared): one ``HMGET``."""
        queue, group = check_name("queue", queue), check_name("group", group)
        return self._min_active(queue, group)

    def _min_active(self, queue: str, group: str) -> Plan[int | None]:
        key = self.keys.queue_expect(queue)
        ((value,),) = yield [Command("HMGET", (key, group))]  # the reader role's
        return None if value is None else _stored_min(key, group, value)

    def _expected(self, skipped: list[Skipped]) -> Plan[dict[tuple[str, str], int]]:
        found: dict[tuple[str, str], int] = {}
        low = "-"
        page = self.limits.groups
        while True:
            (members,) = yield [
                Command("ZRANGEBYLEX", (self.keys.expects, low, "+", "LIMIT", 0, page))
            ]
            every = [_text(member) for member in members]
            keys, queues = [], []
            for key in every:
                try:
                    queues.append(self.keys.queue_of_expect(key))
                    keys.append(key)
                except PresenceDataError as error:
                    skipped.append(Skipped(key, str(error)))
            cursors: dict[int, int] = dict.fromkeys(range(len(keys)), 0)
            while cursors:
                order = list(cursors)
                replies = yield [
                    Command("HSCAN", (keys[i], cursors[i], "COUNT", self.limits.consumers))
                    for i in order
                ]
                going_on: dict[int, int] = {}
                for i, (cursor, part) in zip(order, replies, strict=True):
                    table = (
                        part
                        if isinstance(part, dict)
                        else dict(zip(part[::2], part[1::2], strict=True))
                    )
                    for name, least in table.items():
                        try:
                            found[(queues[i], _text(name))] = _stored_min(keys[i], name, least)
                        except PresenceDataError as error:
                            skipped.append(Skipped(keys[i], str(error)))
                    if int(cursor):
                        going_on[i] = int(cursor)
                cursors = going_on
            if len(every) < page:
                return dict(sorted(found.items()))
            low = f"({every[-1]}"

    def groups(
        self, now_ns: int | None = None, ttl_ms: int | None = None, *, details: bool = False
    ) -> Plan[list[GroupPresence]]:
        """Every tracked or declared group, ordered by (queue, group), with its active, stale
        and expired consumers (at `now_ns`, under `ttl_ms` or each group's shared TTL), its
        `min_active` (None: not declared) and whether it has fewer active consumers.

        With `details`, also each group's oldest heartbeat (its sorted set's lowest score:
        O(log n) a group, in the same batch as its size) and the leases its expired
        consumers hold: the expired ones are a range of its sorted set, read
        `Limits.consumers` names at a time, and only their stored values (``HMGET``), so
        this costs what the expired consumers are, not the group (a group's leases in total
        would need every stored value: a snapshot's cost)."""
        ttl = check_optional_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        if type(details) is not bool:
            raise TypeError(f"details must be a bool, got {type(details).__name__}")
        return self._groups(now, ttl, details)

    def _groups(
        self, now_ns: int | None, ttl_ms: int | None, details: bool = False
    ) -> Plan[list[GroupPresence]]:
        now = yield from self._now(now_ns)
        skipped: list[Skipped] = []
        declared = yield from self._expected(skipped)
        counts: dict[tuple[str, str], tuple[int, int, int]] = {}
        extra: dict[tuple[str, str], tuple[int | None, int]] = {}
        after: Any = None
        while True:
            groups, after = yield from self._listed(None, None, after, skipped)
            if groups:
                ttls = yield from self._ttls_for(groups, ttl_ms)
                horizons = [PresenceState.horizons_ns(now, ttl) for ttl in ttls]
                # Each group's size (and, with details, its oldest beat) with both counts'
                # first requests, in one batch.
                lows, highs = [h[0] for h in horizons], [h[1] for h in horizons]
                pairs = [gk for gk in groups for _ in (0, 1)]
                counting = [*self._above_asks(groups, lows), *self._above_asks(groups, highs)]
                n = len(groups)
                if details:
                    sizes = [
                        request
                        for gk in groups
                        for request in (
                            Command("ZCARD", (gk.hb,)),
                            Command(
                                "ZRANGEBYSCORE",
                                (gk.hb, "-inf", "+inf", "WITHSCORES", "LIMIT", 0, 1),
                            ),
                        )
                    ]
                    replies = yield Partial([*sizes, *counting])
                    for reply in replies[: 2 * n]:  # these raise, as in a batch of their own
                        if isinstance(reply, PresenceError):
                            raise reply
                    cards, firsts = replies[0 : 2 * n : 2], replies[1 : 2 * n : 2]
                    counted = replies[2 * n :]
                else:
                    replies = yield Partial(
                        [*(Command("ZCARD", (gk.hb,)) for gk in groups), *counting]
                    )
                    cards = self._set_aside(groups, replies[:n], skipped)
                    counted = replies[n:]
                counted = self._set_aside([*pairs, *pairs], counted, skipped)
                active = yield from self._above_rest(groups, lows, counted[: 2 * n], skipped)
                alive = yield from self._above_rest(groups, highs, counted[2 * n :], skipped)
                for gk, card, a, b in zip(groups, cards, active, alive, strict=True):
                    if card is not None and a is not None and b is not None:
                        counts[(gk.queue, gk.group)] = (a, b - a, int(card) - b)
                if details:
                    dead = [
                        card is not None and b is not None and int(card) > b
                        for card, b in zip(cards, alive, strict=True)
                    ]
                    lost = yield from self._expired_leases(groups, highs, dead)
                    for gk, first, held in zip(groups, firsts, lost, strict=True):
                        extra[(gk.queue, gk.group)] = (_lowest_score_ns(first), held)
            if after is None:
                break
        _report(skipped)
        out: Rows[GroupPresence] = Rows()
        nothing: tuple[int | None, int] = (None, 0)
        for key in sorted(counts.keys() | declared.keys()):
            n_active, n_stale, n_expired = counts.get(key, (0, 0, 0))
            more: tuple[int | None, int | None] = (
                extra.get(key, nothing) if details else (None, None)
            )
            out.append(
                GroupPresence.of(*key, n_active, n_stale, n_expired, declared.get(key), *more)
            )
        out.skipped = _unique(skipped)
        return out

    def _expired_leases(
        self, groups: list[GroupKeys], horizons: list[int], dead: list[bool]
    ) -> Plan[list[int]]:
        """The leases held by each group's consumers whose last beat is at or before its
        horizon (ns), for the groups with an expired consumer (`dead`; the others hold
        none): the names up to the horizon's microsecond, `Limits.consumers` a command, and
        their stored values (``HMGET``), which say the beat to the nanosecond."""
        most = self.limits.consumers
        edges = [horizon // 1_000 for horizon in horizons]
        held = [0] * len(groups)
        reads = {i: 0 for i, any_dead in enumerate(dead) if any_dead}  # offset of next page
        while reads:
            order = list(reads)
            pages = yield [
                Command("ZRANGEBYSCORE", (groups[i].hb, "-inf", edges[i], "LIMIT", reads[i], most))
                for i in order
            ]
            found = [(i, list(names)) for i, names in zip(order, pages, strict=True) if names]
            if not found:
                break
            values = yield [Command("HMGET", (groups[i].data, *names)) for i, names in found]
            going_on: dict[int, int] = {}
            for (i, names), stored in zip(found, values, strict=True):
                table = {n: v for n, v in zip(names, stored, strict=True) if v is not None}
                _, _, beats, leases, _ = stored_columns(groups[i], table)
                edge = horizons[i]
                held[i] += sum(n for beat, n in zip(beats, leases, strict=True) if beat <= edge)
                if len(names) == most:
                    going_on[i] = reads[i] + most
            reads = going_on
        return held

"""Declared groups: ``expect``/``unexpect`` and their minimums (`expected`, `min_active`),
which the per-group summary (`plans/groups.py`) reports with the live groups.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import PresenceDataError, PresenceError
from ..keys import decode_min_active
from ..model import Skipped
from ..validation import check_min_active, check_name
from .caches import SettingsCache
from .core import Job, Scope, T, _report, _text
from .requests import Command, Partial, Plan


class DeclaredPlans(Job):
    """Declared groups (``expect``/``unexpect``, their minimums: `expected`, `min_active`),
    and `declarations`, the step of `GroupPlans` that reads them. Built from its `Scope` and
    its planner's `SettingsCache` (the protocol version read with the declarations)."""

    __slots__ = ("_cache",)

    def __init__(self, scope: Scope, cache: SettingsCache) -> None:
        super().__init__(scope)
        self._cache = cache

    def expect(self, queue: str, group: str, min_active: int = 1) -> Plan[None]:
        """Declare that `group` must have at least `min_active` active readers of `queue`:
        kept in Redis (``P:{Q}:expect``, listed in ``P:expects``) until `unexpect`, whether
        or not the group has consumers."""
        self.scope.writable("expect")
        queue, group = check_name("queue", queue), check_name("group", group)
        least = check_min_active(min_active)
        return self._expect(queue, group, least)

    def _expect(self, queue: str, group: str, least: int) -> Plan[None]:
        """One call of ``expect.lua``: the version checked, the declaration and its index
        written atomically; on a cluster (other slots) the version is checked first, and the
        index written after the declaration, so a racing unexpect's re-check sees it."""
        key = self.keys.queue_expect(queue)
        if not self.clustered:
            keys = [key, self.keys.expects, self.keys.protocol]
            yield [self.scope.call("expect", keys, [group, least])]
            return
        yield from self._cache.protocol_checked()
        yield [self.scope.call("expect", [key], [group, least])]
        yield [Command("ZADD", (self.keys.expects, 0, key))]

    def unexpect(self, queue: str, group: str) -> Plan[bool]:
        """Forget a declared group; returns whether it was declared."""
        self.scope.writable("unexpect")
        queue, group = check_name("queue", queue), check_name("group", group)
        return self._unexpect(queue, group)

    def _unexpect(self, queue: str, group: str) -> Plan[bool]:
        """One call of ``unexpect.lua`` (the version checked, the declaration and, once its
        queue declares none, the queue's index entry removed atomically); on a cluster the
        version is checked first and the index kept as the index of groups is."""
        key = self.keys.queue_expect(queue)
        if not self.clustered:
            keys = [key, self.keys.expects, self.keys.protocol]
            ((removed, _),) = yield [self.scope.call("unexpect", keys, [group])]
            return int(removed) == 1
        yield from self._cache.protocol_checked()
        ((removed, left),) = yield [self.scope.call("unexpect", [key], [group])]
        if not int(left):
            # As the index of groups (docs/protocol.md, section 14): unlist, re-check, list again
            # when a racing expect declared a group meanwhile.
            yield [Command("ZREM", (self.keys.expects, key))]
            (exists,) = yield [Command("EXISTS", (key,))]
            if int(exists):
                yield [Command("ZADD", (self.keys.expects, 0, key))]
        return int(removed) == 1

    def expected(self) -> Plan[dict[tuple[str, str], int]]:
        """Every declared group and its `min_active`: the index a page of `Limits.groups`
        queues at a time, each queue's declarations ``HSCAN``ned `Limits.consumers` at a time."""
        return self._reported(self.declarations)

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
        return None if value is None else decode_min_active(key, group, value)

    def declarations(self, skipped: list[Skipped]) -> Plan[dict[tuple[str, str], int]]:
        """The step of `expected` other jobs take: every declared group and its minimum,
        what cannot be read set aside in `skipped` (not reported)."""
        found: dict[tuple[str, str], int] = {}
        low = "-"
        page = self.limits.groups
        while True:
            members, *version = yield [
                Command("ZRANGEBYLEX", (self.keys.expects, low, "+", "LIMIT", 0, page)),
                *self._cache.protocol_asks(),  # with the first page (as the index of groups)
            ]
            self._cache.protocol_took(version)
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
                replies = yield Partial(
                    Command("HSCAN", (keys[i], cursors[i], "COUNT", self.limits.consumers))
                    for i in order
                )
                going_on: dict[int, int] = {}
                for i, reply in zip(order, replies, strict=True):
                    if isinstance(reply, PresenceDataError):  # a key of another type
                        skipped.append(Skipped(keys[i], str(reply), queues[i]))
                        continue
                    if isinstance(reply, PresenceError):
                        raise reply
                    cursor, part = reply
                    table = (
                        part
                        if isinstance(part, dict)
                        else dict(zip(part[::2], part[1::2], strict=True))
                    )
                    for name, least in table.items():
                        try:
                            found[(queues[i], _text(name))] = decode_min_active(
                                keys[i], name, least
                            )
                        except PresenceDataError as error:
                            skipped.append(Skipped(keys[i], str(error), queues[i]))
                    if int(cursor):
                        going_on[i] = int(cursor)
                cursors = going_on
            if len(every) < page:
                return dict(sorted(found.items()))
            low = f"({every[-1]}"

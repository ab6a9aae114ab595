"""Consumers rolled up by a metadata field (no I/O): per value of the field (a host, a
version, any key of `describe`'s metadata), how many consumers are active, stale and
expired, in how many groups, holding how many leases. What the CLI's ``ls --by`` and the
web service's ``/hosts`` show, from rows read with their metadata.

Only what the rows say: a consumer without the field counts under `NONE` ("(none)"), one
whose metadata could not be read (another program's) under `UNREADABLE`, never under a
value it might have had.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import NamedTuple

from .model import ConsumerPresence, PresenceState

NONE = "(none)"
"""The row of the consumers without the field (shown so; its `value` is None)."""
UNREADABLE = "(unreadable)"
"""The row of the consumers whose metadata could not be read (its `value` is None too)."""

_ACTIVE, _STALE, _EXPIRED = PresenceState.ACTIVE, PresenceState.STALE, PresenceState.EXPIRED


class RollupRow(NamedTuple):
    """One value of the field and its consumers' counts. `value` None with `label` `NONE`
    (without the field) or `UNREADABLE`; else `label` is the value."""

    label: str
    value: str | None
    active: int
    stale: int
    expired: int
    stuck: int
    groups: int
    """The groups (queue and group) with at least one of these consumers."""
    leases: int
    leases_expired: int
    """The leases held by the expired ones among them (work nobody will finish)."""
    draining: int = 0
    """The active or stale ones among them that say they are draining (protocol version 2)."""
    capacity: int | None = None
    """The capacities the active ones among them report, summed (None: none reports one)."""

    @property
    def consumers(self) -> int:
        return self.active + self.stale + self.expired

    @property
    def drained(self) -> bool:
        """No active or stale consumer (a stale one may only have missed a beat) and no
        lease held (an expired consumer's leases are work nobody finished): nothing of this
        value runs any more, nor is owed."""
        return self.active == 0 and self.stale == 0 and self.leases == 0

    def to_dict(self) -> dict[str, object]:
        return {
            "value": self.value,
            "label": self.label,
            "consumers": self.consumers,
            "active": self.active,
            "stale": self.stale,
            "expired": self.expired,
            "stuck": self.stuck,
            "groups": self.groups,
            "leases": self.leases,
            "leases_expired": self.leases_expired,
            "drained": self.drained,
            "draining": self.draining,
            "capacity": self.capacity,
        }


class _Tally:
    __slots__ = (
        "active",
        "capacity",
        "draining",
        "expired",
        "groups",
        "leases",
        "leases_expired",
        "stale",
        "stuck",
    )

    def __init__(self) -> None:
        self.active = self.stale = self.expired = self.stuck = self.draining = 0
        self.leases = self.leases_expired = 0
        self.capacity: int | None = None
        self.groups: set[tuple[str, str]] = set()

    def add(self, row: ConsumerPresence) -> None:
        state = row.state
        if state is _ACTIVE:
            self.active += 1
            if row.capacity is not None:
                self.capacity = (self.capacity or 0) + row.capacity
            self.draining += row.draining
        elif state is _STALE:
            self.stale += 1
            self.draining += row.draining
        else:
            self.expired += 1
            self.leases_expired += row.lease_count
        self.stuck += row.stuck
        self.leases += row.lease_count
        self.groups.add((row.queue, row.group))

    def row(self, label: str, value: str | None) -> RollupRow:
        return RollupRow(
            label,
            value,
            self.active,
            self.stale,
            self.expired,
            self.stuck,
            len(self.groups),
            self.leases,
            self.leases_expired,
            self.draining,
            self.capacity,
        )


class Rollup:
    """The roll-up of rows by `field`, fed a chunk at a time (it keeps one tally per value
    and, until `unreadable` is known, the rows without the field: never all the rows).
    Not shared between threads."""

    __slots__ = ("_by", "_without", "consumers", "field")

    def __init__(self, field: str) -> None:
        self.field = field
        self.consumers = 0
        self._by: dict[str, _Tally] = {}
        self._without: list[ConsumerPresence] = []

    def feed(self, rows: Iterable[ConsumerPresence]) -> None:
        field, by, without = self.field, self._by, self._without
        for row in rows:
            self.consumers += 1
            value = row.meta.get(field)
            if value is None:
                without.append(row)
                continue
            tally = by.get(value)
            if tally is None:
                tally = by[value] = _Tally()
            tally.add(row)

    def rows(self, unreadable: Collection[tuple[str, str, str]] = frozenset()) -> list[RollupRow]:
        """The values in order (`NONE` and `UNREADABLE` first, when they have consumers),
        given the consumers whose metadata could not be read (`PresenceMetaError.unreadable`)."""
        none, lost = _Tally(), _Tally()
        for row in self._without:
            (lost if row.key in unreadable else none).add(row)
        out = [
            tally.row(label, None)
            for label, tally in ((NONE, none), (UNREADABLE, lost))
            if tally.groups
        ]
        out += [self._by[value].row(value, value) for value in sorted(self._by)]
        return out


def roll_up(
    rows: Iterable[ConsumerPresence],
    field: str,
    unreadable: Collection[tuple[str, str, str]] = frozenset(),
) -> list[RollupRow]:
    """`rows` rolled up by `field` at once (`Rollup`)."""
    rollup = Rollup(field)
    rollup.feed(rows)
    return rollup.rows(unreadable)


__all__ = ["NONE", "UNREADABLE", "Rollup", "RollupRow", "roll_up"]

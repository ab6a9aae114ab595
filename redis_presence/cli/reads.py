"""Every read the CLI makes, in one place, and how its rows are chosen and ordered.

`consumers`, `active_counts` and `stuck_in_group` are the only functions that ask the library
for presence.
The library filters by queue and group itself (it reads only that queue's part of the
index, or that one group's keys); states are chosen here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from redis_presence.model import (
    DEFAULT_STUCK_AFTER_MS,
    ConsumerPresence,
    LiveTally,
    PresenceState,
    groups_set_aside,
)

if TYPE_CHECKING:
    from redis_presence.contract import PresenceRegistry
    from redis_presence.rollup import RollupRow

T = TypeVar("T")

SORTS = ("name", "age", "state")
"""`--sort`: by (queue, group, consumer); longest silent first; expired, stale, then active."""

_STATE_RANK = {PresenceState.EXPIRED: 0, PresenceState.STALE: 1, PresenceState.ACTIVE: 2}


@dataclass(frozen=True)
class Selection:
    """Which consumers a command shows: an exact queue and group, and a set of states."""

    queue: str | None = None
    group: str | None = None
    states: frozenset[PresenceState] = frozenset()

    @classmethod
    def of(
        cls, queue: str | None = None, group: str | None = None, states: Iterable[str] = ()
    ) -> Selection:
        """From the values of `--queue`, `--group` and `--state` (case-insensitive)."""
        return cls(queue, group, frozenset(PresenceState(s.lower()) for s in states))

    def holds_group(self, queue: str, group: str) -> bool:
        return (self.queue is None or queue == self.queue) and (
            self.group is None or group == self.group
        )

    def holds_state(self, state: PresenceState) -> bool:
        return not self.states or state in self.states

    def describe(self) -> str:
        """`queue 'orders', state stale or expired`; empty when nothing is filtered."""
        parts = []
        if self.queue is not None:
            parts.append(f"queue {self.queue!r}")
        if self.group is not None:
            parts.append(f"group {self.group!r}")
        if self.states:
            ordered = [s.value for s in PresenceState if s in self.states]
            parts.append("state " + " or ".join(ordered))
        return ", ".join(parts)


EVERYTHING = Selection()


def consumers(
    registry: PresenceRegistry,
    selection: Selection,
    *,
    now_ns: int | None,
    ttl_ms: int | None,
    states: bool = True,
    with_meta: bool = False,
) -> list[ConsumerPresence]:
    """The consumers of the selected queue and group (and states, unless `states=False`,
    which `watch` uses to tell a change of state from a consumer joining)."""
    if with_meta:
        rows = registry.snapshot(
            now_ns=now_ns,
            ttl_ms=ttl_ms,
            queue=selection.queue,
            group=selection.group,
            with_meta=True,
        )
    else:
        rows = registry.snapshot(
            now_ns=now_ns, ttl_ms=ttl_ms, queue=selection.queue, group=selection.group
        )
    if not states or not selection.states:
        return rows
    return [row for row in rows if selection.holds_state(row.state)]


def rolled_up(
    registry: PresenceRegistry,
    selection: Selection,
    field: str,
    *,
    now_ns: int | None,
    ttl_ms: int | None,
    stuck: bool = False,
) -> tuple[int, list[RollupRow]]:
    """How many consumers were selected (`stuck`: the stuck ones), and they rolled up by
    metadata `field` (one snapshot with metadata; a consumer whose metadata another program
    wrote counts as unreadable, not as one without the field)."""
    from redis_presence.errors import PresenceMetaError  # (it imports the driver)
    from redis_presence.rollup import roll_up

    unreadable: frozenset[tuple[str, str, str]] = frozenset()
    try:
        rows = registry.snapshot(
            now_ns=now_ns,
            ttl_ms=ttl_ms,
            queue=selection.queue,
            group=selection.group,
            with_meta=True,
        )
    except PresenceMetaError as exc:
        rows, unreadable = exc.rows, frozenset(exc.unreadable)
    chosen = [row for row in rows if selection.holds_state(row.state) and (row.stuck or not stuck)]
    return len(chosen), roll_up(chosen, field, unreadable)


class ActiveCounts(dict[tuple[str, str], int]):
    """`active_counts`' answer: active consumers per group, with `capacities`, the
    ``(capacity, free)`` of each group some active consumer of which reports a capacity
    (`GroupPresence.capacity` and `free`, from the rows the counts read anyway)."""

    capacities: Mapping[tuple[str, str], tuple[int, int]] = {}


def active_counts(
    registry: PresenceRegistry, selection: Selection, *, now_ns: int | None, ttl_ms: int | None
) -> ActiveCounts:
    """Active consumers per selected `(queue, group)`; tracked groups without one count 0. A
    group a read set aside is left out (never shown as a group without consumers). No
    progress budget is read: counts judge no `stuck`, so a spoilt one never stops them.
    Each group's capacity and free slots come from the snapshot it reads for the groups
    without an active consumer: no command more."""
    counts = registry.count_active_by_group(
        now_ns=now_ns, ttl_ms=ttl_ms, queue=selection.queue, group=selection.group
    )
    # The tracked groups (those without an active consumer too) are a snapshot's; any budget
    # given keeps it from reading the shared one, which the counts do not need.
    tracked = registry.snapshot(
        now_ns=now_ns,
        ttl_ms=ttl_ms,
        queue=selection.queue,
        group=selection.group,
        stuck_after_ms=DEFAULT_STUCK_AFTER_MS,
    )
    aside = groups_set_aside(getattr(counts, "skipped", ()))  # the counts could not read them
    groups = {(row.queue, row.group): 0 for row in tracked}
    groups.update((key, 0) for key in declared(registry, selection))
    groups.update(counts)
    out = ActiveCounts((key, n) for key, n in groups.items() if key not in aside)
    tallies: dict[tuple[str, str], LiveTally] = {}
    for row in tracked:
        if row.capacity is not None:
            tallies.setdefault((row.queue, row.group), LiveTally()).add(row)
    capacities = {}
    for key, tally in tallies.items():
        capacity, free, *_ = tally.fields()
        if key in out and capacity is not None and free is not None:
            capacities[key] = (capacity, free)
    out.capacities = capacities
    return out


def stuck_in_group(
    registry: PresenceRegistry, queue: str, group: str, now_ns: int | None, ttl_ms: int | None
) -> int:
    """How many of one group's consumers are stuck now (a read of that group's rows alone)."""
    return sum(row.stuck for row in registry.snapshot(now_ns, ttl_ms, queue=queue, group=group))


def declared(registry: PresenceRegistry, selection: Selection) -> dict[tuple[str, str], int]:
    """The declared groups (`expect`) of the selected queue and group, and their minimum."""
    return {key: least for key, least in registry.expected().items() if selection.holds_group(*key)}


def sort_key(sort: str) -> Callable[[ConsumerPresence], tuple[object, ...]]:
    """The key that orders rows for `--sort` (ties by name)."""
    if sort == "age":
        return lambda row: (-row.last_seen_age_ms, row.key)
    if sort == "state":
        return lambda row: (_STATE_RANK[row.state], row.key)
    return lambda row: row.key


def arrange(
    items: Sequence[T],
    sort: str,
    limit: int | None,
    row: Callable[[T], ConsumerPresence],
) -> list[T]:
    """`items` ordered by `sort` (each item's row via `row`) and cut to `limit`."""
    key = sort_key(sort)
    ordered = sorted(items, key=lambda item: key(row(item)))
    return ordered if limit is None else ordered[:limit]

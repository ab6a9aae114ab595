"""What `watch` and `demo` show: the changes between two snapshots, with no I/O.

A refresh is one snapshot; `Watcher.refresh` compares it with the previous one and
marks each consumer that joined, went stale, expired, left, or became active again.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from redis_presence.model import ConsumerPresence, PresenceState

_Key = tuple[str, str, str]


class Change(str, enum.Enum):
    """What happened to one consumer since the previous refresh."""

    JOINED = "joined"
    WENT_STALE = "went stale"
    EXPIRED = "expired"
    LEFT = "left"
    BACK = "active again"

    def __str__(self) -> str:
        return self.value


_ENTERED: Mapping[PresenceState, Change] = {
    PresenceState.ACTIVE: Change.BACK,
    PresenceState.STALE: Change.WENT_STALE,
    PresenceState.EXPIRED: Change.EXPIRED,
}


def diff(
    previous: Iterable[ConsumerPresence], current: Iterable[ConsumerPresence]
) -> dict[_Key, Change]:
    """The change of every consumer whose presence differs between two snapshots.

    A consumer that is new, or whose `registered_at_ns` changed (it left and came back
    between refreshes), joined; one that is gone left; one whose state changed is
    marked with the state it entered.
    """
    before = {row.key: row for row in previous}
    changes: dict[_Key, Change] = {}
    for row in current:
        old = before.pop(row.key, None)
        if old is None or old.registered_at_ns != row.registered_at_ns:
            changes[row.key] = Change.JOINED
        elif old.state is not row.state:
            changes[row.key] = _ENTERED[row.state]
    for key in before:
        changes[key] = Change.LEFT
    return changes


@dataclass(frozen=True, slots=True)
class WatchRow:
    """One line of a refresh: the consumer as last seen, and what changed, if anything.

    A consumer that left is shown once more with its last known row.
    """

    row: ConsumerPresence
    change: Change | None


@dataclass(frozen=True, slots=True)
class GroupTally:
    """Consumers of one `(queue, group)` per state."""

    active: int = 0
    stale: int = 0
    expired: int = 0


def tally(rows: Iterable[ConsumerPresence]) -> dict[tuple[str, str], GroupTally]:
    """Per-group state counts from a snapshot: every tracked group, even with 0 active."""
    counts: dict[tuple[str, str], list[int]] = {}
    index = {PresenceState.ACTIVE: 0, PresenceState.STALE: 1, PresenceState.EXPIRED: 2}
    for row in rows:
        counts.setdefault((row.queue, row.group), [0, 0, 0])[index[row.state]] += 1
    return {key: GroupTally(*values) for key, values in counts.items()}


@dataclass(frozen=True, slots=True)
class Frame:
    """One refresh: the rows to show (current plus those that just left), sorted."""

    rows: tuple[WatchRow, ...]
    tallies: Mapping[tuple[str, str], GroupTally]
    changes: Mapping[_Key, Change]

    @property
    def states(self) -> dict[PresenceState, int]:
        """How many current consumers are in each state."""
        totals = dict.fromkeys(PresenceState, 0)
        for item in self.rows:
            if item.change is not Change.LEFT:
                totals[item.row.state] += 1
        return totals


class Watcher:
    """Remembers the previous snapshot; the first refresh marks nothing."""

    def __init__(self) -> None:
        self._previous: dict[_Key, ConsumerPresence] | None = None

    def refresh(self, rows: Sequence[ConsumerPresence]) -> Frame:
        """The frame for a new snapshot, compared with the one before it."""
        previous = self._previous
        changes = {} if previous is None else diff(previous.values(), rows)
        items = [WatchRow(row, changes.get(row.key)) for row in rows]
        if previous is not None:
            items.extend(
                WatchRow(previous[key], change)
                for key, change in changes.items()
                if change is Change.LEFT
            )
            items.sort(key=lambda item: item.row.key)
        self._previous = {row.key: row for row in rows}
        return Frame(tuple(items), tally(rows), changes)


@dataclass(frozen=True, slots=True)
class Outage:
    """Reads failing since `since_s` (on the watch's clock): `failures` in a row, the last
    with `error`; the next attempt comes `retry_in_s` after it."""

    error: Exception
    since_s: float
    failures: int
    retry_in_s: float


def backoff_s(failures: int, interval_s: float) -> float:
    """The wait before the next read after `failures` failed reads in a row: the interval,
    doubling, at most `max(interval_s, 10)` seconds."""
    cap = max(interval_s, 10.0)
    return min(cap, interval_s * 2.0 ** min(failures - 1, 32))


def run_watch(
    read: Callable[[], Sequence[ConsumerPresence]],
    show: Callable[[Frame], None],
    *,
    interval_s: float,
    iterations: int | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    transient: Callable[[Exception], bool] = lambda exc: False,
    on_outage: Callable[[Outage], None] = lambda outage: None,
    on_recovered: Callable[[Outage], None] = lambda outage: None,
) -> int:
    """Read, diff and show every `interval_s` seconds (on a fixed beat, without drift).

    A read that fails with an error `transient` accepts (Redis unreachable) is reported to
    `on_outage` and tried again with `backoff_s`; the first good read after it goes to
    `on_recovered`, then is diffed against the last good one. Stops after `iterations`
    attempts when given (the last one's error, if any, is raised); returns how many ran.
    """
    watcher = Watcher()
    attempts = 0
    outage: Outage | None = None
    next_tick = clock()
    while iterations is None or attempts < iterations:
        attempts += 1
        final = iterations is not None and attempts >= iterations
        try:
            rows = read()
        except Exception as exc:
            if final or not transient(exc):
                raise
            failures = outage.failures + 1 if outage is not None else 1
            since = outage.since_s if outage is not None else clock()
            outage = Outage(exc, since, failures, backoff_s(failures, interval_s))
            on_outage(outage)
            sleep(outage.retry_in_s)
            next_tick = clock()
            continue
        if outage is not None:
            on_recovered(outage)
            outage = None
        show(watcher.refresh(rows))
        if final:
            break
        next_tick += interval_s
        delay = next_tick - clock()
        if delay < 0:  # fell behind (slow read): restart the beat rather than burst
            next_tick = clock()
        else:
            sleep(delay)
    return attempts

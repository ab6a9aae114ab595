"""The frames `watch` and `demo` show: what changed, with no I/O.

`EventWatcher` (what `watch` uses) keeps the state from `follow`: the first snapshot, then
the events, so that a refresh costs what changed; each change stays marked, with its time,
for `MARK_REFRESHES` refreshes. `Watcher` (the demo, and `watch` at a fixed clock or an
explicit `--ttl-ms`) compares whole snapshots and marks each consumer that joined, went
stale, expired, left, or became active again.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redis_presence.model import NS_PER_MS, ConsumerPresence, PresenceState

if TYPE_CHECKING:  # `events` loads redis-py (through `keys`): not for `--help`
    from redis_presence.events import PresenceEvent

_Key = tuple[str, str, str]


class Change(str, enum.Enum):
    """What happened to one consumer since the previous refresh."""

    JOINED = "joined"
    WENT_STALE = "went stale"
    EXPIRED = "expired"
    LEFT = "left"
    BACK = "active again"
    PRUNED = "pruned"

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
    changed_at_ns: int | None = None
    """When the change happened (the event's `at_ns`), where it is known."""
    age_bound: bool = False
    """The row's age is only a bound: an active consumer beat since, writing no event."""


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
            if item.change not in (Change.LEFT, Change.PRUNED):
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


REREAD_MAX = 1_000
"""How many active rows `watch` re-reads each refresh, at most (their real age and leases:
one ``HMGET`` per group); beyond them an active row's age reads as a bound."""

MARK_REFRESHES = 5
"""How many refreshes of `watch` a change stays marked (with its time) after it happened."""

# By `EventKind` value (a str enum: its members hash and compare as their values).
_AFTER: Mapping[str, PresenceState] = {
    "joined": PresenceState.ACTIVE,
    "recovered": PresenceState.ACTIVE,
    "stale": PresenceState.STALE,
    "expired": PresenceState.EXPIRED,
}
_MARK: Mapping[str, Change] = {
    "joined": Change.JOINED,
    "recovered": Change.BACK,
    "stale": Change.WENT_STALE,
    "expired": Change.EXPIRED,
    "left": Change.LEFT,
    "pruned": Change.PRUNED,
}
_SLOT = {PresenceState.ACTIVE: 0, PresenceState.STALE: 1, PresenceState.EXPIRED: 2}


class EventWatcher:
    """The consumers as `follow` tells them: a snapshot (`start`), then events (`apply`),
    each in time linear in what it is given; `frame` lays out a refresh.

    Events carry no beat of an active consumer (it writes none), so after the first
    snapshot an active row's age and leases are those of its last event, unless `update`
    gave it as re-read since: the age of a row not re-read is shown as a bound
    (`WatchRow.age_bound`). Stale and expired rows are exact (they have not beaten since, or
    there would be an event).
    """

    def __init__(self, keep: int = MARK_REFRESHES) -> None:
        self.keep = keep
        self.rows: dict[_Key, ConsumerPresence] = {}
        self.gone: dict[_Key, ConsumerPresence] = {}
        """Consumers that left or were pruned, shown while their mark lasts."""
        self.marks: dict[_Key, tuple[Change, int, int]] = {}
        """key -> (change, at_ns, refreshes left)."""
        self.counts: dict[tuple[str, str], list[int]] = {}
        self.started_ns: int | None = None
        self.now_ns = 0
        self.reread: set[_Key] = set()
        """The rows `update` gave since the last events: their age and leases are exact."""

    def _count(self, row: ConsumerPresence, step: int) -> None:
        counts = self.counts.setdefault((row.queue, row.group), [0, 0, 0])
        counts[_SLOT[row.state]] += step
        if step < 0 and not any(counts):
            del self.counts[(row.queue, row.group)]

    def start(self, rows: Iterable[ConsumerPresence], now_ns: int) -> None:
        """The state at `now_ns` (follow's snapshot); after a resync, what differs from the
        state before it is marked as changed at `now_ns`."""
        fresh = {row.key: row for row in rows}
        if self.started_ns is not None:
            for key, change in diff(self.rows.values(), fresh.values()).items():
                self.marks[key] = (change, now_ns, self.keep)
                if change is Change.LEFT:
                    self.gone[key] = self.rows[key]
        self.rows = fresh
        self.counts = {}
        for row in fresh.values():
            self._count(row, 1)
        self.started_ns = self.now_ns = now_ns
        self.reread = set()

    def active_keys(self) -> list[_Key]:
        """The consumers this watcher holds as active (whose rows `update` may refresh)."""
        return [key for key, row in self.rows.items() if row.state is PresenceState.ACTIVE]

    def update(self, rows: Iterable[ConsumerPresence], now_ns: int) -> None:
        """Rows re-read at `now_ns` (`Planner.rows_of`): each replaces the one held for the
        same registration, with its real last beat, leases and state; the others keep
        theirs (an event tells what happened to them)."""
        self.reread = set()
        for row in rows:
            old = self.rows.get(row.key)
            if old is None or old.registered_at_ns != row.registered_at_ns:
                continue
            self._count(old, -1)
            self.rows[row.key] = row
            self._count(row, 1)
            self.reread.add(row.key)
        self.now_ns = max(self.now_ns, now_ns)

    def apply(self, events: Iterable[PresenceEvent], now_ns: int) -> None:
        """The events up to `now_ns`, in order: each changes one row and marks it (those of
        an active consumer's beats, protocol version 2's draining, conflict, restarted and
        drain_requested, change no row: the next re-read shows what they say)."""
        for event in events:
            if event.kind not in _MARK:  # an active consumer's beat said more: no change
                continue
            key = event.key
            old = self.rows.pop(key, None)
            if old is not None:
                self._count(old, -1)
            self.marks[key] = (_MARK[event.kind], event.at_ns, self.keep)
            state = _AFTER.get(event.kind)
            if state is None:  # left or pruned
                if old is not None:
                    self.gone[key] = old
                continue
            self.gone.pop(key, None)
            self.reread.discard(key)
            registered = event.registered_at_ns
            heartbeat = event.last_heartbeat_ns
            row = ConsumerPresence(
                event.queue,
                event.group,
                event.consumer,
                registered if registered is not None else event.at_ns,
                heartbeat if heartbeat is not None else event.at_ns,
                0,
                event.lease_count,
                state,
            )
            self.rows[key] = row
            self._count(row, 1)
        self.now_ns = max(self.now_ns, now_ns)

    def frame(self) -> Frame:
        """One refresh: every consumer (ages at `now_ns`) and those that just left; marks
        age by one refresh."""
        now = self.now_ns
        marks = self.marks
        items = []
        for key, row in self.rows.items():
            age = max(0, (now - row.last_heartbeat_ns) // NS_PER_MS)
            mark = marks.get(key)
            bound = (
                row.state is PresenceState.ACTIVE
                and now != self.started_ns
                and key not in self.reread
            )
            items.append(
                WatchRow(
                    row._replace(last_seen_age_ms=age),
                    mark[0] if mark else None,
                    mark[1] if mark else None,
                    bound,
                )
            )
        for key, row in self.gone.items():
            change, at, _ = marks[key]
            items.append(WatchRow(row, change, at))
        changes = {key: mark[0] for key, mark in marks.items()}
        for key, (change, at, left) in list(marks.items()):
            if left <= 1:
                del marks[key]
                self.gone.pop(key, None)
            else:
                marks[key] = (change, at, left - 1)
        tallies = {key: GroupTally(*counts) for key, counts in self.counts.items()}
        return Frame(tuple(items), tallies, changes)


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
    read: Callable[[], Any],
    show: Callable[[Frame], None],
    *,
    interval_s: float,
    refresh: Callable[[Any], Frame] | None = None,
    paced: bool = True,
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
    `refresh` turns what `read` returned into a frame (default: a `Watcher` diffing
    snapshots); `paced=False` when `read` waits for the next refresh itself (`follow`).
    """
    refresh = refresh or Watcher().refresh
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
        show(refresh(rows))
        if final:
            break
        if not paced:
            continue
        next_tick += interval_s
        delay = next_tick - clock()
        if delay < 0:  # fell behind (slow read): restart the beat rather than burst
            next_tick = clock()
        else:
            sleep(delay)
    return attempts

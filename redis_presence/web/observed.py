"""What this service saw of Redis over the last hour: when it could not reach it, and when
the data it read changed under it (the epoch marker changed: a restart without the data,
a flush, a failover to an empty node, a restore), so that the charts of the recent past
mark those spans instead of drawing what the event log makes of them (no heartbeat got
through an outage, so the log's rule draws its consumers going stale: "surely 0").

Fed by the reads (`PresenceData.changes` and `PresenceData.epoch` see the marker and that
Redis answered) and by the live feed (`LiveFeed.unreachable_since_ns`: a read that could
not reach Redis); read by `web.history`. Instants are the service's clock (the reads' fixed
clock in tests): the service's and Redis's clocks are taken to agree within a second.
Only what this service saw: one started after an outage knows nothing of it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

KEPT_NS = 3_600 * 1_000_000_000
"""How long a mark is kept (the charts' window: an hour)."""
MAX_MARKS = 100
"""Marks kept at most (the oldest go first)."""


class Mark(NamedTuple):
    """A span the charts do not draw: ``"outage"`` (Redis could not be reached from
    `start_ns`; `end_ns` None while it still cannot) or ``"data"`` (the epoch marker read
    at `end_ns` is not the one last read at `start_ns`: Redis lost or replaced its data in
    between, and what came before is not this data's past)."""

    kind: str
    start_ns: int
    end_ns: int | None


class Observed:
    """The marks of one service (its methods run on the event loop's thread)."""

    def __init__(self, clock: Callable[[], int] | None = None) -> None:
        self._clock = clock or time.time_ns
        self.marks: deque[Mark] = deque(maxlen=MAX_MARKS)
        self._down_since: int | None = None
        self._epoch: str | None = None
        self._epoch_at = 0

    def now_ns(self) -> int:
        return self._clock()

    def unreachable(self) -> None:
        """A read could not reach Redis: an outage runs from the first such read."""
        if self._down_since is None:
            self._down_since = self.now_ns()

    def answered(self, epoch: str | None) -> None:
        """A read reached Redis and found `epoch` (the marker; None: none): an outage, if
        one ran, ends now; a marker other than the last one read (or none, after one) is a
        change of data. A first marker after none is not (an empty keyspace's first write,
        or data of a release without the marker, as `changes` treats it)."""
        now = self.now_ns()
        if self._down_since is not None:
            self.marks.append(Mark("outage", self._down_since, now))
            self._down_since = None
        if self._epoch is not None and epoch != self._epoch:
            self.marks.append(Mark("data", self._epoch_at, now))
        if epoch is not None or self._epoch is not None:
            self._epoch = epoch
        self._epoch_at = now
        while self.marks and (self.marks[0].end_ns or now) < now - KEPT_NS:
            self.marks.popleft()

    def within(self, since_ns: int, now_ns: int) -> list[Mark]:
        """The marks that overlap ``[since_ns, now_ns]``, an ongoing outage included (its
        end None), oldest first."""
        found = [m for m in self.marks if m.start_ns <= now_ns and (m.end_ns or now_ns) >= since_ns]
        if self._down_since is not None and self._down_since <= now_ns:
            found.append(Mark("outage", self._down_since, None))
        return found


__all__ = ["KEPT_NS", "Mark", "Observed"]

"""One verdict per group: `OK`, `DRAINING`, `DEGRADED`, `STALLED` or `STOPPED`, with the
reason in words, from facts a read already holds (no I/O, no clock: a pure function).

The verdict is Burrow's idea (one status per consumer group, judged over a sliding window
with no threshold to tune) on presence's facts. Its windows are the budgets a group already
has: a beat vouches for its consumer for one TTL (`active`) and is looked back on for two
(`stale`: the second TTL, when a consumer missed its beats but is not yet gone); progress is
judged over the stuck budget (`stuck`: an active consumer holding leases without progress
for longer). A consumer whose last beat is more than two TTLs old (`expired`) is outside
the window: it counts only in that the group has nobody left inside it. So every input is
what one read at one instant says, and the verdict costs no command beyond that read
(docs/concepts.md, "One verdict per group", defines each verdict with its table).

The rules, first match wins (`wanted` is the declared minimum, else 1 for a group nobody
declared; a *shortfall* is ``wanted - active`` when positive, *excused* up to the number of
stale consumers whose row says `draining`, a planned departure still inside the window):

1. ``STOPPED``: no active consumer, and a shortfall that draining does not excuse or a
   stale consumer that did not say it was draining.
2. ``STALLED``: every active consumer is stuck (known only to a read of the rows).
3. ``DEGRADED``: an unexcused shortfall (below its minimum), a stale consumer not draining,
   or a stuck consumer.
4. ``DRAINING``: a consumer says it is draining (active, or stale after it said so).
5. ``OK``: none of these.

Inputs a read does not have are None, and no rule that needs them can hold: `stuck` is
known to reads of the rows (a group's page, ``/metrics --stuck-metrics``, ``check
--progress``), not to `groups()`'s counts; `draining` and `capacity` to the reads of the
live consumers' stored values (protocol version 2: `group()`, ``groups(capacity=True)``,
rows; docs/concepts.md, "Capacity and draining"), None in the plain counts, where
`DRAINING` is never the verdict. Capacity never changes the verdict (a group using every
slot is busy, not unwell: a threshold on it is the kind of tuning the window avoids); with
`leases`, the reason says how many slots are in use.
"""

from __future__ import annotations

import enum
from typing import NamedTuple


class Verdict(str, enum.Enum):
    """One group's verdict (docs/concepts.md); `severity` orders them, worst last."""

    OK = "OK"
    DRAINING = "DRAINING"
    DEGRADED = "DEGRADED"
    STALLED = "STALLED"
    STOPPED = "STOPPED"

    @property
    def severity(self) -> int:
        """0 (`OK`) to 4 (`STOPPED`): the order in which verdicts are worse."""
        return _SEVERITY[self]

    @property
    def passes(self) -> bool:
        """Whether a probe passes on it: `OK` and `DRAINING` (a planned departure)."""
        return self in (Verdict.OK, Verdict.DRAINING)

    def __str__(self) -> str:
        return self.value


_SEVERITY = {verdict: rank for rank, verdict in enumerate(Verdict)}

VERDICTS: tuple[Verdict, ...] = tuple(Verdict)
"""Every verdict, best first (the label values of ``redis_presence_group_verdict``)."""


class GroupFacts(NamedTuple):
    """What the verdict is judged from: the group's consumers by state, its declared
    minimum (None: not declared), and, where the read knows them (else None), its stuck
    consumers, its consumers that say they are draining (active, and stale), and the
    capacity and leases of its active consumers."""

    active: int
    stale: int
    expired: int
    min_active: int | None = None
    stuck: int | None = None
    draining_active: int | None = None
    draining_stale: int | None = None
    capacity: int | None = None
    leases: int | None = None


class GroupVerdict(NamedTuple):
    """A verdict and its reason in words."""

    verdict: Verdict
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"verdict": self.verdict.value, "reason": self.reason}


def _consumers(n: int) -> str:
    return f"{n} consumer" if n == 1 else f"{n} consumers"


def verdict_of(facts: GroupFacts) -> Verdict:
    """The group's verdict alone (the module's rules, first match wins), without building
    its reason: what ``/metrics`` needs for every group of a scrape."""
    active, stale, _, min_active, stuck, d_active, d_stale, _, _ = facts
    gone = min(d_stale or 0, stale)
    unexcused = max(0, (1 if min_active is None else min_active) - active - gone)
    lapsed = stale - gone
    if active == 0 and (unexcused or lapsed):
        return Verdict.STOPPED
    if stuck is not None and active > 0 and stuck >= active:
        return Verdict.STALLED
    if unexcused or lapsed or stuck:
        return Verdict.DEGRADED
    if d_active or gone:
        return Verdict.DRAINING
    return Verdict.OK


def judge(facts: GroupFacts) -> GroupVerdict:
    """The group's verdict (`verdict_of`) and its reason in words."""
    verdict = verdict_of(facts)
    active, stale, expired, min_active, stuck, d_active, d_stale, capacity, leases = facts
    wanted = 1 if min_active is None else min_active
    gone = min(d_stale or 0, stale)
    unexcused = max(0, wanted - active - gone)
    lapsed = stale - gone
    if verdict is Verdict.STOPPED:
        if stale or expired:
            others = ", ".join(
                f"{n} {state}" for n, state in ((stale, "stale"), (expired, "expired")) if n
            )
            return GroupVerdict(verdict, f"nobody reading: 0 active ({others})")
        if min_active is not None:
            return GroupVerdict(
                verdict, f"nobody reading: no consumer, at least {min_active} wanted"
            )
        return GroupVerdict(verdict, "nobody reading: no consumer")
    if verdict is Verdict.STALLED:
        what = "the only active consumer is" if active == 1 else f"all {active} active are"
        return GroupVerdict(
            verdict,
            f"alive but not progressing: {what} stuck, holding leases without progress "
            "for longer than the progress budget",
        )
    if verdict is Verdict.DEGRADED:
        faults = []
        if unexcused:
            faults.append(f"below its minimum: {active} active, at least {wanted} wanted")
        if lapsed:
            faults.append(f"{_consumers(lapsed)} stale (missed beats without draining)")
        if stuck:
            faults.append(f"{stuck} of {active} active stuck")
        return GroupVerdict(verdict, "; ".join(faults))
    counts = f"{active} active" + (f", at least {min_active} wanted" if min_active else "")
    if capacity is not None and leases is not None:
        counts += f"; {leases} of {capacity} slots in use"
    if verdict is Verdict.DRAINING:
        parts = []
        if d_active:
            parts.append(f"{_consumers(d_active)} draining")
        if gone:
            parts.append(f"{_consumers(gone)} left on purpose")
        return GroupVerdict(verdict, f"planned departure: {', '.join(parts)}; {counts}")
    return GroupVerdict(verdict, counts)

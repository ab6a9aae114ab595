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
known to reads of the rows (a group's page, ``/metrics --stuck-metrics``, `check`), not to
`groups()`'s counts; `draining` and `capacity` come with the protocol version that stores
them (until then always None, and `DRAINING` is never the verdict). Capacity never changes
the verdict (a group using every slot is busy, not unwell: a threshold on it is the kind
of tuning the window avoids); with `leases`, the reason says how many slots are in use.
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


def judge(facts: GroupFacts) -> GroupVerdict:
    """The group's verdict and its reason (the module's rules, first match wins)."""
    active, stale, expired, min_active, stuck, d_active, d_stale, capacity, leases = facts
    wanted = 1 if min_active is None else min_active
    leaving = d_active or 0
    gone = min(d_stale or 0, stale)
    shortfall = max(0, wanted - active)
    excused = min(shortfall, gone)
    unexcused = shortfall - excused
    lapsed = stale - gone  # stale without having said they were leaving

    counts = f"{active} active" + (f", at least {min_active} wanted" if min_active else "")
    if capacity is not None and leases is not None:
        counts += f"; {leases} of {capacity} slots in use"
    if active == 0 and (unexcused or lapsed):
        if stale or expired:
            others = ", ".join(
                f"{n} {state}" for n, state in ((stale, "stale"), (expired, "expired")) if n
            )
            return GroupVerdict(Verdict.STOPPED, f"nobody reading: 0 active ({others})")
        if min_active is not None:
            return GroupVerdict(
                Verdict.STOPPED, f"nobody reading: no consumer, at least {min_active} wanted"
            )
        return GroupVerdict(Verdict.STOPPED, "nobody reading: no consumer")
    if stuck is not None and active > 0 and stuck >= active:
        what = "the only active consumer is" if active == 1 else f"all {active} active are"
        return GroupVerdict(
            Verdict.STALLED,
            f"alive but not progressing: {what} stuck, holding leases without progress "
            "for longer than the progress budget",
        )
    faults = []
    if unexcused:
        faults.append(f"below its minimum: {active} active, at least {wanted} wanted")
    if lapsed:
        faults.append(f"{_consumers(lapsed)} stale (missed beats without draining)")
    if stuck:
        faults.append(f"{stuck} of {active} active stuck")
    if faults:
        return GroupVerdict(Verdict.DEGRADED, "; ".join(faults))
    if leaving or gone:
        parts = []
        if leaving:
            parts.append(f"{_consumers(leaving)} draining")
        if gone:
            parts.append(f"{_consumers(gone)} left on purpose")
        return GroupVerdict(Verdict.DRAINING, f"planned departure: {', '.join(parts)}; {counts}")
    return GroupVerdict(Verdict.OK, counts)

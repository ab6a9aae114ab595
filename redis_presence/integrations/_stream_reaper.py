"""Removing dead consumers of a Redis Streams consumer group without losing their entries:
`reap_stream_consumers`, public through `redis_presence.integrations.streams` (whose
docstring says why and how).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import ResponseError

from redis_presence.contract import PresenceRegistry
from redis_presence.errors import DRIVER_ERRORS, PresenceError, translate
from redis_presence.model import DEFAULT_PRESENCE_TTL_MS, ConsumerPresence, PresenceState
from redis_presence.plans import Plan, ScriptCall
from redis_presence.registry import RedisPresenceRegistry
from redis_presence.scripts import script
from redis_presence.validation import check_name, check_now_ns, check_ttl_ms

MAX_ENTRIES_PER_CALL = 1_000
"""Most entries one script call moves (a few ms of server time); a consumer holding more
takes one more call per thousand."""

UNSEEN = "unseen"
"""The presence of a consumer that Redis lists but presence has never seen (or pruned)."""

NO_TARGET = "no active consumer to take its entries"
"""Why a dead consumer is left alone when no consumer of its group is active in presence."""


@dataclass(frozen=True)
class ReapedConsumer:
    """What the reaper found and did for one consumer of the group."""

    consumer: str
    presence: str
    """``active``, ``stale``, ``expired`` or `UNSEEN`."""
    idle_ms: int | None
    """Milliseconds since Redis last saw it read or claim (``XINFO CONSUMERS`` idle); None
    when Redis does not list it."""
    pending: int
    """Entries it held when surveyed."""
    moved: int = 0
    """Entries moved to the target (in a dry run: that would be moved)."""
    removed: bool = False
    """Removed from the group (in a dry run: would be)."""
    deregistered: bool = False
    """Its presence row was deregistered (in a dry run: would be)."""
    reason: str = ""
    """Why it was left alone (empty when it was reaped)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "consumer": self.consumer,
            "presence": self.presence,
            "idle_ms": self.idle_ms,
            "pending": self.pending,
            "moved": self.moved,
            "removed": self.removed,
            "deregistered": self.deregistered,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class StreamReap:
    """The outcome of one reap of one group: what moved where, what was removed, and why
    the rest was left alone."""

    stream: str
    group: str
    target: str | None
    """The live consumer that takes the entries (None: there is none)."""
    dry_run: bool
    consumers: tuple[ReapedConsumer, ...] = field(default=())
    note: str = ""
    """Why nothing was claimed or removed at all, when that is the case."""
    ttl_ms: int = DEFAULT_PRESENCE_TTL_MS
    """The TTL presence was judged with (the expiry horizon is twice it)."""

    @property
    def moved(self) -> Mapping[str, int]:
        """Consumer -> entries moved to `target`."""
        return {c.consumer: c.moved for c in self.consumers if c.moved}

    @property
    def removed(self) -> tuple[str, ...]:
        """The consumers removed from the group."""
        return tuple(c.consumer for c in self.consumers if c.removed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "group": self.group,
            "target": self.target,
            "dry_run": self.dry_run,
            "ttl_ms": self.ttl_ms,
            "note": self.note,
            "moved": sum(self.moved.values()),
            "removed": list(self.removed),
            "consumers": [c.to_dict() for c in self.consumers],
        }


def reap_stream_consumers(
    client: Any,
    registry: PresenceRegistry,
    stream: str,
    group: str,
    *,
    claim_to: str | None = None,
    dry_run: bool = False,
    ttl_ms: int | None = None,
    now_ns: int | None = None,
) -> StreamReap:
    """Move the pending entries of each dead consumer of `group` on `stream` to a live one,
    then remove it from the group and deregister it; returns what moved and was removed.

    A consumer is dead when presence calls it expired, or has never seen it, *and* Redis
    has not seen it read or claim for longer than the expiry horizon (2 x `ttl_ms`): an
    active or stale consumer, or one that touched the stream within the horizon, is never
    touched. `ttl_ms` None (the default) is the group's shared TTL as stored in presence
    (`registry.ttl(stream, group)`: the group's own, else the prefix's, else
    DEFAULT_PRESENCE_TTL_MS), the TTL every reader of the group judges it with.
    `claim_to` names the consumer that takes the entries: it must be active in presence
    (under that TTL), else `ValueError` naming it, before anything is changed (in a dry run
    too); a live reader that has received no entry yet (Redis may not list it in the group
    before its first entry) is as good a target as any. By default the target is the
    group's active consumer holding the fewest leases. With no active consumer nothing is
    claimed and nothing is removed (the note says so): when a whole group looks dead, the
    likelier story is that its consumers cannot reach the presence Redis. A consumer that
    still holds entries is never removed. `dry_run` changes nothing and says what would be
    done. `client` is the stream's redis-py client (standalone or cluster); `now_ns` is the
    instant presence is judged at (None: the presence server's clock; Redis's idle times
    are always its own). Redis failures raise `PresenceError`.
    """
    stream = check_name("stream", stream)
    group = check_name("group", group)
    if claim_to is not None:
        claim_to = check_name("claim_to", claim_to)
    if not isinstance(dry_run, bool):
        raise TypeError(f"dry_run must be a bool, got {type(dry_run).__name__}")
    if ttl_ms is not None:
        ttl_ms = check_ttl_ms(ttl_ms)
    now_ns = check_now_ns(now_ns)
    if ttl_ms is None:
        ttl_ms = registry.ttl(stream, group)  # the group's shared TTL (one round trip)
    reaper = _Reaper(client, registry, stream, group, ttl_ms, now_ns)
    survey = reaper.survey(claim_to)
    if dry_run or survey.target is None:
        return survey.outcome(dry_run=dry_run)
    return reaper.execute(survey)


# -- the steps ---------------------------------------------------------------------------


@dataclass
class _Candidate:
    consumer: str
    presence: str
    idle_ms: int | None
    pending: int


@dataclass
class _Survey:
    """Step 1: who is dead, who is left alone and why, and who takes the entries."""

    stream: str
    group: str
    target: str | None
    candidates: list[_Candidate]
    kept: list[ReapedConsumer]
    ttl_ms: int
    note: str = ""

    def outcome(self, *, dry_run: bool) -> StreamReap:
        """What this survey would do (or, without a target, why it does nothing)."""
        if self.target is None:
            planned = [
                ReapedConsumer(c.consumer, c.presence, c.idle_ms, c.pending, reason=NO_TARGET)
                for c in self.candidates
            ]
        else:
            planned = [
                ReapedConsumer(
                    c.consumer,
                    c.presence,
                    c.idle_ms,
                    c.pending,
                    c.pending,
                    removed=c.idle_ms is not None,
                    deregistered=c.presence != UNSEEN,
                )
                for c in self.candidates
            ]
        rows = sorted([*planned, *self.kept], key=lambda c: c.consumer)
        return StreamReap(
            self.stream, self.group, self.target, dry_run, tuple(rows), self.note, self.ttl_ms
        )


class _Reaper:
    def __init__(
        self,
        client: Any,
        registry: PresenceRegistry,
        stream: str,
        group: str,
        ttl_ms: int,
        now_ns: int | None,
    ) -> None:
        self.client = client
        self.now_ns = now_ns
        self.registry = registry
        self.stream = stream
        self.group = group
        self.ttl_ms = ttl_ms
        self.horizon_ms = 2 * ttl_ms  # older than this is expired, in presence's rule
        self._streams: RedisPresenceRegistry | None = None

    @property
    def streams(self) -> RedisPresenceRegistry:
        """What runs the script on the stream's client: an executor of the package's own
        (its one script path and NOSCRIPT reload), without the policy check (it holds no
        presence keys)."""
        if self._streams is None:
            self._streams = RedisPresenceRegistry(self.client)
            self._streams.policy_check.due = False
        return self._streams

    def presence(self) -> dict[str, ConsumerPresence]:
        """This group's presence rows, by consumer."""
        rows = self.registry.snapshot(
            now_ns=self.now_ns, ttl_ms=self.ttl_ms, queue=self.stream, group=self.group
        )  # reads this one group only
        return {r.consumer: r for r in rows}

    def redis_consumers(self) -> dict[str, tuple[int, int]]:
        """consumer -> (pending, idle_ms), from one ``XINFO CONSUMERS`` (O(consumers))."""
        try:
            reply = self.client.xinfo_consumers(self.stream, self.group)
        except ResponseError as exc:
            if "NOGROUP" in str(exc) or "no such key" in str(exc):
                raise PresenceError(
                    f"stream {self.stream!r} has no consumer group {self.group!r}"
                ) from exc
            raise translate(exc) from exc
        except DRIVER_ERRORS as exc:
            raise translate(exc) from exc
        return {
            _text(entry["name"]): (int(entry["pending"]), int(entry["idle"])) for entry in reply
        }

    def survey(self, claim_to: str | None) -> _Survey:
        presence = self.presence()
        in_redis = self.redis_consumers()
        candidates: list[_Candidate] = []
        kept: list[ReapedConsumer] = []
        for name in sorted(set(presence) | set(in_redis)):
            row = presence.get(name)
            state = row.state.value if row is not None else UNSEEN
            pending, idle = in_redis.get(name, (0, None))
            why = self._alive(state, idle)
            if why:
                kept.append(ReapedConsumer(name, state, idle, pending, reason=why))
            else:
                candidates.append(_Candidate(name, state, idle, pending))
        if claim_to is not None:
            self._check_target(claim_to, presence)
        # Alive is active in presence: a reader that has received no entry yet holds no
        # pending list, and Redis may not list it in the group before its first entry
        # (XCLAIM then adds it), but it beats, so it reads.
        active = [row for row in presence.values() if row.state is PresenceState.ACTIVE]
        target = claim_to or _least_loaded(active)
        note = ""
        if target is None and candidates:
            note = (
                f"no consumer of group {self.group!r} is active in presence (TTL "
                f"{self.ttl_ms} ms) to take the entries: nothing claimed, nothing removed"
            )
        return _Survey(self.stream, self.group, target, candidates, kept, self.ttl_ms, note)

    def _check_target(self, claim_to: str, presence: Mapping[str, ConsumerPresence]) -> None:
        """`claim_to` must be active in presence: the entries would otherwise go to a
        consumer nobody sees reading."""
        row = presence.get(claim_to)
        state = row.state.value if row is not None else UNSEEN
        if row is None or row.state is not PresenceState.ACTIVE:
            raise ValueError(
                f"claim_to must name a consumer active in presence: {claim_to!r} is {state} "
                f"in queue {self.stream!r}, group {self.group!r} (TTL {self.ttl_ms} ms)"
            )

    def _alive(self, state: str, idle_ms: int | None) -> str:
        """Why a consumer counts as alive (empty: it is dead)."""
        if state in (PresenceState.ACTIVE.value, PresenceState.STALE.value):
            return f"presence calls it {state}"
        if idle_ms is not None and idle_ms <= self.horizon_ms:
            return f"Redis saw it read or claim {idle_ms} ms ago"
        return ""

    def execute(self, survey: _Survey) -> StreamReap:
        """Steps 2 to 4, for each dead consumer. Why each is safe against a consumer that
        comes back in between is said next to it."""
        assert survey.target is not None
        target = survey.target
        # Step 2: read presence again. A consumer that beat since the survey is alive and
        # left alone. One that beats after this read but never touches the stream would
        # lose its row in step 4 until its next beat; nothing it holds is lost.
        now = self.presence()
        done: list[ReapedConsumer] = list(survey.kept)
        for c in survey.candidates:
            row = now.get(c.consumer)
            state = row.state.value if row is not None else UNSEEN
            if state not in (PresenceState.EXPIRED.value, UNSEEN):
                done.append(
                    ReapedConsumer(c.consumer, state, c.idle_ms, c.pending, reason="came back")
                )
                continue
            done.append(self._reap(c, target, deregister=row is not None))
        done.sort(key=lambda c: c.consumer)
        return StreamReap(self.stream, self.group, target, False, tuple(done), ttl_ms=self.ttl_ms)

    def _reap(self, c: _Candidate, target: str, *, deregister: bool) -> ReapedConsumer:
        if c.idle_ms is None:  # only presence knows it: nothing to move, nothing to remove
            deregistered = self.registry.deregister(self.stream, self.group, c.consumer)
            return ReapedConsumer(c.consumer, c.presence, None, 0, deregistered=deregistered)
        # Step 3: the script checks and acts atomically on the stream's node. If one of
        # the consumer's entries was delivered or claimed within the horizon (it came back
        # and read, re-read or claimed), it returns 'fresh' and changes nothing. Otherwise
        # XCLAIM's min-idle-time moves exactly the entries nobody touched since, and
        # DELCONSUMER runs only when the consumer holds none, in the same call: no entry
        # can reach it between the check and the removal. A consumer holding more than
        # MAX_ENTRIES_PER_CALL entries takes several calls, each checking again.
        args = (self.group, c.consumer, target, self.horizon_ms + 1, MAX_ENTRIES_PER_CALL, "1")
        calls = c.pending // MAX_ENTRIES_PER_CALL + 2
        moved, state = self.streams.execute(_reap_calls(self.stream, args, calls))
        if state != "done":
            why = (
                "an entry of it is younger than the horizon"
                if state == "fresh"
                else "still holds entries"
            )
            return ReapedConsumer(c.consumer, c.presence, c.idle_ms, c.pending, moved, reason=why)
        # Step 4: it is out of the group and holds nothing; now forget its presence row.
        # A consumer that comes back now reads again under its name: Redis creates it
        # anew and its next beat registers it again.
        deregistered = deregister and self.registry.deregister(self.stream, self.group, c.consumer)
        return ReapedConsumer(
            c.consumer, c.presence, c.idle_ms, c.pending, moved, True, deregistered
        )


def _reap_calls(stream: str, args: tuple[Any, ...], calls: int) -> Plan[tuple[int, str]]:
    """``stream_reap.lua`` on `stream` with `args`, called again while it says ``more`` (at
    most `calls` times): the entries it moved, and the state it ended in."""
    found = script("stream_reap")
    call = ScriptCall(found, ("EVALSHA", found.sha, 1, stream, *args))
    moved, state = 0, "more"
    while state == "more" and calls > 0:
        calls -= 1
        (reply,) = yield [call]
        moved += int(reply[0])
        state = _text(reply[2])
    return moved, state


def _least_loaded(rows: Sequence[ConsumerPresence]) -> str | None:
    """The consumer holding the fewest leases (then the first by name), or None."""
    best = min(rows, key=lambda r: (r.lease_count, r.consumer), default=None)
    return best.consumer if best is not None else None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)

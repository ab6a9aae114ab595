"""Redis Streams consumer groups: remove dead consumers without losing their entries.

Redis never removes a consumer of a group, and ``XGROUP DELCONSUMER`` discards the entries
it holds (redis/redis #11567, #9745, #13602), so groups whose consumers get a fresh name
on every start fill up with dead ones. Presence tells the dead from the living:
`reap_stream_consumers` moves a dead consumer's pending entries to a live consumer of the
same group and only then removes it (and deregisters it from presence). Here ``queue`` is
the stream key, ``group`` the consumer group and ``consumer`` the consumer name, the names
every integration of this package reports for a stream.

`StreamReader` (and `AsyncStreamReader`) is the read side: every ``XREADGROUP`` of a
consumer loop, empty ones included, carries the consumer's heartbeat in the same pipeline
(one round trip on a standalone server), with ``lease_count`` = the entries delivered to
it and not acknowledged through the reader's own `ack`; an `ack` that Redis took is
progress (``last_progress_ns``), carried by the next read's beat.

For the reaper, the stream's client and the presence registry are separate, so the stream
may live on another server, or another cluster node, than the presence keys.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from redis.exceptions import ResponseError

from redis_presence.aio import AsyncRedisPresenceRegistry
from redis_presence.contract import PresenceRegistry
from redis_presence.errors import DRIVER_ERRORS, PresenceError, translate
from redis_presence.model import DEFAULT_PRESENCE_TTL_MS, ConsumerPresence, PresenceState
from redis_presence.plans import Command, Plan, ScriptCall, alongside
from redis_presence.registry import RedisPresenceRegistry
from redis_presence.scripts import script
from redis_presence.validation import check_name, check_now_ns, check_ttl_ms

__all__ = [
    "DEFAULT_BLOCK_MS",
    "MAX_ENTRIES_PER_CALL",
    "UNSEEN",
    "AsyncStreamReader",
    "Entry",
    "ReapedConsumer",
    "StreamReader",
    "StreamReap",
    "reap_stream_consumers",
]

DEFAULT_BLOCK_MS = 2_000
"""How long a read waits for new entries by default: well within half the default TTL,
and shorter than redis-py's default socket timeout (5 s)."""

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


# -- the read side -----------------------------------------------------------------------

Entry = tuple[Any, dict[Any, Any]]
"""One stream entry as redis-py returns it: ``(id, {field: value})``."""


class _ReadLoop:
    """What both readers share (no I/O): the checks, the ``XREADGROUP`` command with its
    heartbeat, the replies, and the entries held (delivered, not acknowledged)."""

    def __init__(
        self,
        registry: Any,
        stream: str,
        group: str,
        consumer: str,
        ttl_ms: int,
        block_ms: int,
        beat_interval_ms: int,
    ) -> None:
        self.registry = registry
        self.stream = check_name("stream", stream)
        self.group = check_name("group", group)
        self.consumer = check_name("consumer", consumer)
        self.ttl_ms = check_ttl_ms(ttl_ms)
        if not isinstance(beat_interval_ms, int) or isinstance(beat_interval_ms, bool):
            raise TypeError(
                f"beat_interval_ms must be an int, got {type(beat_interval_ms).__name__}"
            )
        if not 0 <= beat_interval_ms < self.ttl_ms // 2:
            raise ValueError(
                f"beat_interval_ms must be in [0, ttl_ms // 2 = {self.ttl_ms // 2}), "
                f"got {beat_interval_ms}"
            )
        self.beat_interval_ns = beat_interval_ms * 1_000_000
        self.block_ms = self.check_block(block_ms)
        self.held: set[str] = set()  # entry ids, as text
        self.last_beat_ns: int | None = None  # monotonic, of the last beat written
        # Entries acknowledged since the last beat written: the next beat records progress
        # (`last_progress_ns`), in the same round trip as its read.
        self.progressed = False
        self._progress_sent = False
        self._reads: dict[tuple[int, int, bool], Command] = {}

    def check_block(self, block_ms: object) -> int:
        """The rule for BLOCK against the TTL: a consumer beats when a read starts, so its
        last beat is up to one beat interval, one BLOCK and the handling of one batch old.
        The interval and the BLOCK together may take at most half the TTL, which leaves
        the other half for handling a batch: the consumer stays active."""
        if not isinstance(block_ms, int) or isinstance(block_ms, bool):
            raise TypeError(f"block_ms must be an int, got {type(block_ms).__name__}")
        most = self.ttl_ms // 2 - self.beat_interval_ns // 1_000_000
        if not 0 <= block_ms <= most:
            raise ValueError(
                f"block_ms must be in [0, ttl_ms // 2 - beat_interval_ms = {most}] (a read "
                f"that blocks longer leaves the consumer unbeaten past its TTL), got {block_ms}"
            )
        timeout = _socket_timeout_s(self.registry.client)
        if timeout is not None and block_ms / 1000 >= timeout:
            raise ValueError(
                f"block_ms ({block_ms}) must be shorter than the client's socket_timeout "
                f"({timeout:g} s), or a read that waits that long fails"
            )
        return block_ms

    def plan(
        self, count: int, block_ms: int | None, pending: bool
    ) -> tuple[Command, Plan[tuple[None, list[Any]]] | None, int]:
        """One read: its ``XREADGROUP``, the plan that sends it with the heartbeat in the
        heartbeat plan's first batch (None while the last beat is younger than the beat
        interval: the read goes alone), and the instant of the read."""
        block = self.block_ms if block_ms is None else self.check_block(block_ms)
        read = self._reads.get((count, block, pending))
        if read is None:
            read = self._read(count, block, pending)
        now = time.monotonic_ns()
        last = self.last_beat_ns
        if last is not None and now - last < self.beat_interval_ns:
            return read, None, now
        lease = len(self.held)
        self._progress_sent = self.progressed
        beat = self.registry.plans.heartbeat(
            self.stream, self.group, self.consumer, lease, progressed=self.progressed
        )
        return read, alongside(beat, [read]), now

    def _read(self, count: object, block: int, pending: bool) -> Command:
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"count must be a positive int, got {count!r}")
        args: tuple[Any, ...] = ("GROUP", self.group, self.consumer, "COUNT", count)
        if block and not pending:  # a read of one's own pending entries never waits
            args += ("BLOCK", block)
        args += ("STREAMS", self.stream, "0" if pending else ">")
        if len(self._reads) < 16:
            self._reads[(count, block, pending)] = Command("XREADGROUP", args)
        return Command("XREADGROUP", args)

    def beaten(self, at_ns: int) -> None:
        """A read with its beat at `at_ns` succeeded (with the progress it carried)."""
        self.last_beat_ns = at_ns
        if self._progress_sent:
            self.progressed = self._progress_sent = False

    def entries(self, reply: Any) -> list[Entry]:
        """The entries of one ``XREADGROUP`` reply (RESP2 or RESP3), now held."""
        if not reply:
            return []
        streams = reply.values() if isinstance(reply, dict) else (item[1] for item in reply)
        found: list[Entry] = []
        for entries in streams:
            for entry in entries:
                entry_id, fields = entry[0], entry[1]
                if fields is None:  # a pending entry deleted from the stream meanwhile
                    continue
                found.append((entry_id, fields))
        self.held.update(_text(entry_id) for entry_id, _ in found)
        return found

    def acked(self, ids: Sequence[Any], count: int) -> None:
        """`ids` were acknowledged (`count` of them by Redis): none of them is held any
        more, and the next beat records progress if Redis acknowledged any."""
        self.held.difference_update(map(_text, ids))
        if count:
            self.progressed = True


def _socket_timeout_s(client: Any) -> float | None:
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(pool, "connection_kwargs", None) or {}
    timeout = kwargs.get("socket_timeout")
    return float(timeout) if isinstance(timeout, int | float) else None


R = TypeVar("R", RedisPresenceRegistry, AsyncRedisPresenceRegistry)


class _Reader(Generic[R]):
    """What both readers share: their checks, their state, and `lease_count`."""

    _registry_type: ClassVar[type[Any]]

    def __init__(
        self,
        registry: R,
        stream: str,
        group: str,
        consumer: str,
        *,
        block_ms: int = DEFAULT_BLOCK_MS,
        ttl_ms: int = DEFAULT_PRESENCE_TTL_MS,
        beat_interval_ms: int = 0,
    ) -> None:
        if not isinstance(registry, self._registry_type):
            raise TypeError(
                f"registry must be a {self._registry_type.__name__}, got {type(registry).__name__}"
            )
        self._loop = _ReadLoop(
            registry, stream, group, consumer, ttl_ms, block_ms, beat_interval_ms
        )
        self._registry: R = registry

    @property
    def lease_count(self) -> int:
        """Entries delivered to this consumer and not acknowledged (what the next beat says)."""
        return len(self._loop.held)


class StreamReader(_Reader[RedisPresenceRegistry]):
    """A consumer-group reader whose every read carries the consumer's heartbeat.

    ``queue`` is the stream key, ``group`` the consumer group, ``consumer`` this consumer's
    name; `read` sends the heartbeat and the ``XREADGROUP`` in one pipeline (one round
    trip on a standalone server; on a cluster one pipeline per node, when the stream's and
    presence's slots differ), empty reads included, so an idle poller stays active.
    ``lease_count`` is the entries delivered to this consumer and not acknowledged through
    `ack`: no ``XPENDING`` is ever sent for it. The stream lives in the registry's Redis.
    `block_ms` (default `DEFAULT_BLOCK_MS`) is how long a read waits for new entries;
    `beat_interval_ms` (default 0: every read) lets reads skip the beat while the last one
    is younger than that, for hot loops; the two together may take at most half of
    `ttl_ms`, the TTL readers use. Redis failures raise `PresenceError`.
    """

    _registry_type = RedisPresenceRegistry

    def read(
        self, count: int = 10, *, block_ms: int | None = None, pending: bool = False
    ) -> list[Entry]:
        """Beat, then read up to `count` new entries, waiting up to `block_ms` (default: the
        reader's) for some; ``pending=True`` re-reads this consumer's own pending entries
        instead (after a restart, or after a reaper moved entries to it). One round trip."""
        read, plan, at_ns = self._loop.plan(count, block_ms, pending)
        if plan is None:  # no beat due: the read alone, as a plain command
            try:
                reply = self._registry.client.execute_command(read.name, *read.args)
            except DRIVER_ERRORS as exc:
                raise translate(exc) from exc
        else:
            reply = self._registry.execute(plan)[1][0]
            self._loop.beaten(at_ns)
        return self._loop.entries(reply)

    def ack(self, *ids: Any) -> int:
        """Acknowledge entries (``XACK``); returns how many Redis acknowledged."""
        if not ids:
            return 0
        try:
            acked = self._registry.client.xack(self._loop.stream, self._loop.group, *ids)
        except DRIVER_ERRORS as exc:
            raise translate(exc) from exc
        self._loop.acked(ids, int(acked))
        return int(acked)

    def close(self) -> None:
        """Deregister this consumer (a graceful stop); its group membership stays, with
        whatever it still holds."""
        self._registry.deregister(self._loop.stream, self._loop.group, self._loop.consumer)


class AsyncStreamReader(_Reader[AsyncRedisPresenceRegistry]):
    """`StreamReader` for asyncio consumers, over an `AsyncRedisPresenceRegistry`: the
    same reads and acks as coroutines; on a cluster the heartbeat and the read go to their
    nodes concurrently."""

    _registry_type = AsyncRedisPresenceRegistry

    async def read(
        self, count: int = 10, *, block_ms: int | None = None, pending: bool = False
    ) -> list[Entry]:
        """`StreamReader.read`, awaited."""
        read, plan, at_ns = self._loop.plan(count, block_ms, pending)
        if plan is None:  # no beat due: the read alone, as a plain command
            try:
                reply = await self._registry.client.execute_command(read.name, *read.args)
            except DRIVER_ERRORS as exc:
                raise translate(exc) from exc
        else:
            reply = (await self._registry.execute(plan))[1][0]
            self._loop.beaten(at_ns)
        return self._loop.entries(reply)

    async def ack(self, *ids: Any) -> int:
        """`StreamReader.ack`, awaited."""
        if not ids:
            return 0
        try:
            acked = await self._registry.client.xack(self._loop.stream, self._loop.group, *ids)
        except DRIVER_ERRORS as exc:
            raise translate(exc) from exc
        self._loop.acked(ids, int(acked))
        return int(acked)

    async def aclose(self) -> None:
        """`StreamReader.close`, awaited."""
        await self._registry.deregister(self._loop.stream, self._loop.group, self._loop.consumer)

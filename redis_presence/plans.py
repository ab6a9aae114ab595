"""I/O-free plans of every operation: what to send to Redis, and what the replies mean.

A plan (`Plan`) is a generator: it yields a batch of requests (`ScriptCall`, `Command`),
receives their replies in order, and returns the operation's result. The
`Planner`'s public methods check their arguments at once (`TypeError` / `ValueError`, or
`PresenceReadOnlyError` for a write through a read-only planner) and return the plan, so a
bad call sends nothing. Nothing here imports a driver or does I/O:
`RedisPresenceRegistry.execute` and `AsyncRedisPresenceRegistry.execute` run any plan, and
a test can step one batch at a time.

Every request a plan sends does bounded work, whatever the fleet's size (`Limits`): the
index is read a page of groups at a time, a group's consumers at most
``Limits.consumers`` at a time, and a prune call visits at most ``Limits.prune_groups``
groups and ``Limits.prune_consumers`` consumers, with a cursor carried from call to call.
The index of groups (``P:groups``), and on a Redis Cluster the protocol that keeps it
without losing a live group, is written down with its proof in ``docs/index-protocol.md``.
"""

from __future__ import annotations

import secrets
import time
import warnings
from collections import deque
from collections.abc import Callable, Generator, Iterable, Sequence
from functools import partial
from itertools import groupby
from operator import attrgetter, itemgetter
from types import TracebackType
from typing import Any, NamedTuple, TypeVar

from .errors import (
    PresenceBatchError,
    PresenceDataError,
    PresenceDataWarning,
    PresenceError,
    PresenceMetaError,
    PresenceProtocolError,
    PresenceReadOnlyError,
    PresenceResyncRequired,
    refusal,
)
from .events import (
    DEFAULT_CHANGES_LIMIT,
    DEFAULT_EVENTS_KEPT,
    EVENT_LOG_TTL_MS,
    LOG_LAG_MS,
    Changes,
    Cursor,
    EventKind,
    FollowSnapshot,
    Ordered,
    PresenceEvent,
    Window,
    check_changes_limit,
    check_cursor_filter,
    check_epoch,
    group_event,
    logged_events,
    order,
    sorted_events,
    stream_id,
    window,
)
from .history import GroupLog
from .keys import (
    INDEX_MARK_MS,
    PROTOCOL_VERSION,
    GroupKeys,
    Keyspace,
    decode_meta,
    encode_meta,
)
from .model import (
    DEFAULT_MAX_FUTURE_MS,
    DEFAULT_PRESENCE_TTL_MS,
    DEFAULT_STUCK_AFTER_MS,
    NO_META,
    NS_PER_MS,
    ConsumerMeta,
    ConsumerPresence,
    Counts,
    GroupPresence,
    GroupsPage,
    PresenceState,
    Rows,
    Skipped,
    gc_paused,
)
from .replies import Columns, server_now_ns, stored_columns, stored_heartbeat_ns
from .scripts import Script, script
from .validation import (
    Beat,
    ConsumerKey,
    DelayedBeat,
    check_beats,
    check_consumer_key,
    check_delayed_beats,
    check_filter,
    check_lease_count,
    check_max_future_ms,
    check_meta,
    check_min_active,
    check_name,
    check_now_ns,
    check_optional_stuck_after_ms,
    check_optional_ttl_ms,
    check_ttl_ms,
)

T = TypeVar("T")

MAX_BEATS_PER_CALL = 250
"""Most beats in one heartbeat script call (``heartbeat_many.lua`` spends about 5 us of
server time a beat, so a full call holds the server about 1.5 ms); a larger batch is split,
one more call per 250 beats, all sent in one pipeline."""

MAX_CACHED_GROUPS = 4_096
"""Most groups whose single-beat call a planner keeps ready (it starts over when full)."""

MAX_GROUPS_PER_CALL = 100
"""Most groups one command touches (an index page: one ``ZRANGEBYLEX ... LIMIT``)."""

MAX_CONSUMERS_PER_CALL = 500
"""Most consumers one read command visits: a group read in one ``HGETALL``, one ``HSCAN``
step (about 0.5 ms of server time for 500 fields of a hash table), a page of ties in
counts, an ``XRANGE`` page of events."""

MAX_PRUNE_GROUPS_PER_CALL = 10
"""Most groups one ``prune.lua`` call visits. A visited group with an expired consumer costs
the script about a dozen commands (type checks, the range reads, ``HMGET``, ``ZREM``/``HDEL``,
its pruned event, and unlisting it when emptied): about 50 us of server time, so 10 of them
hold the server about 0.5 ms. An index page of MAX_GROUPS_PER_CALL groups goes as ten calls
in one pipeline."""

MAX_PRUNE_CONSUMERS_PER_CALL = 100
"""Most consumers one ``prune.lua`` call visits (its budget; the next call resumes where it
ran out). Removing one costs the script about 6 us (its range read and stored value, the
``ZREM``/``HDEL``, its field of the pruned event): with the groups' own cost, a full call
holds the server about 1 ms. The prune bounds were lowered from 20 groups and 150
consumers, whose worst calls measured 1.9 to 2.3 ms, over the 2 ms that no command may
exceed; ``tests/test_bounded.py`` reports the longest call and the p99 in each CI run
(p99 0.9 ms before, 0.52 ms after)."""

TTL_CACHE_MS = 10_000
"""How long a planner trusts a shared TTL it read (`Planner.set_ttl`): a TTL another process
stores reaches this one's heartbeats (which need it to tell a recovery) within this."""

MAX_ROWS_PER_ROUND_TRIP = 10_000
"""Most consumers a read asks for in one round trip (one pipeline): what a streaming read
holds in memory, besides the groups of more than MAX_CONSUMERS_PER_CALL it is reading."""


class Limits(NamedTuple):
    """How much work one request may do (the README's "Never stall Redis"). Tests shrink them
    to make every path cross its page boundaries."""

    groups: int = MAX_GROUPS_PER_CALL
    consumers: int = MAX_CONSUMERS_PER_CALL
    rows: int = MAX_ROWS_PER_ROUND_TRIP
    beats: int = MAX_BEATS_PER_CALL
    prune_groups: int = MAX_PRUNE_GROUPS_PER_CALL
    prune_consumers: int = MAX_PRUNE_CONSUMERS_PER_CALL


# -- requests -------------------------------------------------------------------------


class ScriptCall(NamedTuple):
    """One call of one of the package's scripts, ready to send: `args` is the whole command,
    from ``EVALSHA`` (or ``EVALSHA_RO``, which a replica runs) and the SHA of `script` on.
    After ``NOSCRIPT`` an executor loads ``script.source`` and sends the same call again.
    `packed`, when the planner was asked for it (the batched heartbeat's calls), is `args`
    already in RESP: an executor that writes to a connection itself may send it as it is."""

    script: Script
    args: tuple[Any, ...]
    packed: bytes | None = None

    @property
    def first_key(self) -> Any:
        """The call's first key (every package script takes at least one)."""
        return self.args[3]


class Command(NamedTuple):
    """One plain Redis command. On a cluster it goes to the node holding `node_key` when
    given, else the node holding its first argument (every keyed command here names its key
    first); a keyless command without `node_key` goes to any node."""

    name: str
    args: tuple[str | bytes | int, ...] = ()
    node_key: str | None = None


Request = ScriptCall | Command
Plan = Generator[list[Request], list[Any], T]
"""An operation: yields batches of requests, receives their replies, returns the result.

The first error reply of a batch is thrown into the plan as a `PresenceError` (a plan may
catch it; else it is the operation's error), unless the batch is `Partial`."""


class Partial(list[Request]):
    """A batch whose plan takes every request's outcome: an error reply comes back in its
    place as a `PresenceError` value instead of being thrown (a batch split in independent
    calls, where one call's failure must not hide what the others did)."""

    __slots__ = ()


class Single(Generator[list[Request], list[Any], T]):
    """A plan of exactly one script call (the single heartbeat): ``ScriptCall(script,
    args)``. It steps like any plan; an executor may instead send it itself and take
    `then(reply)` as the result, which saves running a generator (and building the
    `ScriptCall`) on the hottest path of all. `packed`, when the planner was asked for it,
    is the whole command already in RESP (the client's own packing of a script call's many
    arguments costs more than the rest of the call in pure Python)."""

    __slots__ = ("_sent", "args", "packed", "script", "then")

    def __init__(
        self,
        script: Script,
        args: tuple[Any, ...],
        then: Callable[[Any], T],
        packed: bytes | None = None,
    ) -> None:
        self.script = script
        self.args = args
        self.then = then
        self.packed = packed
        self._sent = False

    @property
    def call(self) -> ScriptCall:
        """The plan's one request."""
        return ScriptCall(self.script, self.args, self.packed)

    def send(self, replies: list[Any] | None) -> list[Request]:
        if not self._sent:
            self._sent = True
            return [self.call]
        if replies is None:
            raise TypeError("a Single plan expects the reply to its call")
        raise StopIteration(self.then(replies[0]))

    def throw(
        self,
        typ: Any,
        val: Any = None,
        tb: TracebackType | None = None,
    ) -> list[Request]:
        raise typ if val is None else val


def alongside(plan: Plan[T], requests: Sequence[Request]) -> Plan[tuple[T, list[Any]]]:
    """`plan` with `requests` sent in its first batch, and their replies: on a standalone
    server one round trip for both (one pipeline), on a cluster one pipeline per node
    (the nodes concurrently in the asyncio registry). A broker reading a Redis Stream
    beats this way: ``alongside(registry.plans.heartbeat(...), [Command("XREADGROUP",
    ...)])``. The requests may run before, after or between the plan's own; an error reply
    to any of them raises like the plan's own."""
    try:
        batch = next(plan)
    except StopIteration as done:
        return done.value, list((yield list(requests)))
    replies = yield [*batch, *requests]
    extra = list(replies[len(batch) :])
    try:
        batch = plan.send(list(replies[: len(batch)]))
        while True:
            batch = plan.send((yield batch))
    except StopIteration as done:
        return done.value, extra


class RowStream(NamedTuple):
    """A streaming read: `plan` appends each group's rows to `groups` as soon as the group
    is complete (its keys and rows, the rows sorted by consumer), so a driver can hand them
    out after each batch and clear the list; groups come in the index's order."""

    plan: Plan[None]
    groups: list[tuple[GroupKeys, list[ConsumerPresence]]]
    skipped: list[Skipped]
    """What the read set aside (docs/protocol.md, section 9), complete once `plan` is done."""
    unreadable: dict[ConsumerKey, str] | None = None
    """With metadata: each consumer whose metadata this package did not write, and why (its
    row's `meta` is empty); a driver raises `PresenceMetaError` once every row is out."""


def bulk(value: bytes) -> bytes:
    """One RESP bulk string."""
    return b"$%d\r\n%s\r\n" % (len(value), value)


def resp(command: Sequence[Any], codec: tuple[str, str]) -> bytes:
    """A whole command in RESP, as redis-py's own packing writes it (`bulks` of its
    arguments after the array's length). A few times faster than the client's packing in
    pure Python, which matters for a script call carrying a thousand beats (five arguments
    each)."""
    return b"*%d\r\n" % len(command) + bulks(command, codec)


def bulks(args: Iterable[Any], codec: tuple[str, str]) -> bytes:
    """Arguments as RESP bulk strings, one after the other: `str` (encoded with `codec`, the
    client's encoding and its error handler), `int` or `bytes`."""
    encoding, errors = codec
    parts = []
    for arg in args:
        kind = type(arg)
        if kind is str:
            data = arg.encode(encoding, errors)
        elif kind is int:
            data = b"%d" % arg
        elif kind is bytes:
            data = arg
        else:
            raise TypeError(f"cannot pack a {kind.__name__} argument: {arg!r:.40}")
        parts.append(b"$%d\r\n%b\r\n" % (len(data), data))
    return b"".join(parts)


def _none(reply: Any) -> None:
    return None


def _now_arg(now_ns: int | None) -> str:
    """How scripts receive the instant: decimal nanoseconds, or '' for the server clock."""
    return "" if now_ns is None else str(now_ns)


def _same(value: T) -> T:
    return value


_queue = itemgetter(0)
_BeatArgs = tuple[tuple[Any, ...], tuple[Any, ...], bytes | None, int]
"""A group's prebuilt single-beat call: head, tail, RESP head, and until when (monotonic
ns) its TTL may be trusted."""

TtlSource = str
"""Where a shared TTL comes from: "group", "prefix" or "default"."""


class _Read:
    """One group being read by a streaming read: its size, its HSCAN cursor (None before
    the first command) and what came back so far."""

    __slots__ = ("cursor", "done", "gk", "size", "table")

    def __init__(self, gk: GroupKeys, size: int) -> None:
        self.gk = gk
        self.size = size
        self.cursor: int | None = None
        self.done = False
        self.table: dict[Any, Any] = {}


class Planner:
    """Plans every operation for one key prefix, on a standalone server or a cluster.

    `read_only` refuses writes (`PresenceReadOnlyError`, before anything is planned); reads
    need no script at all. `encode` is the client's argument encoder
    (``client.get_encoder().encode``), which the single-beat call applies once per group to
    what it keeps ready; with `packed` (and `encode`), a single beat also carries its whole
    command in RESP (`Single.packed`), and so does every call of a batched heartbeat
    (`ScriptCall.packed`, its text encoded with `codec`: the client's encoding and error
    handler; written by `pack_command` when given, which is how the client's connections
    write a whole command, else by `resp`). `limits` bounds the work of every request;
    `events_kept` is about how many entries each queue's event log keeps; `max_future_ms`
    is the clock guard (a beat whose explicit ``now_ns`` is further ahead of the server
    clock is refused with `PresenceClockError`; None: no guard); `clock` (monotonic
    nanoseconds) times how long a shared TTL read from Redis is trusted.
    """

    __slots__ = (
        "_beat_calls",
        "_beat_script",
        "_claimed",
        "_clock",
        "_codec",
        "_encode",
        "_guard",
        "_pack",
        "_packed",
        "_protocol_at",
        "_stucks",
        "_ttls",
        "clustered",
        "events_kept",
        "keys",
        "limits",
        "max_future_ms",
        "read_only",
    )

    def __init__(
        self,
        prefix: str = "presence",
        *,
        clustered: bool = False,
        read_only: bool = False,
        encode: Callable[[Any], Any] | None = None,
        codec: tuple[str, str] = ("utf-8", "strict"),
        pack_command: Callable[[tuple[Any, ...]], bytes] | None = None,
        packed: bool = False,
        limits: Limits = Limits(),  # noqa: B008 (an immutable tuple)
        events_kept: int = DEFAULT_EVENTS_KEPT,
        max_future_ms: int | None = DEFAULT_MAX_FUTURE_MS,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        if not isinstance(read_only, bool):
            raise TypeError(f"read_only must be a bool, got {type(read_only).__name__}")
        if not isinstance(limits, Limits) or min(limits) < 1:
            raise ValueError(f"limits must be a Limits of positive ints, got {limits!r}")
        if type(events_kept) is not int or events_kept < 1:
            raise ValueError(f"events_kept must be a positive int, got {events_kept!r}")
        self.keys = Keyspace(prefix)
        self.clustered = clustered
        self.read_only = read_only
        self.limits = limits
        self.events_kept = events_kept
        self.max_future_ms = check_max_future_ms(max_future_ms)
        self._guard: int | str = "" if self.max_future_ms is None else self.max_future_ms
        self._clock = clock
        self._encode: Callable[[Any], Any] = encode or _same
        self._codec = codec
        self._pack: Callable[[tuple[Any, ...]], bytes] = pack_command or partial(resp, codec=codec)
        self._packed = packed and encode is not None and not clustered
        self._beat_calls: dict[tuple[str, str], _BeatArgs] = {}
        self._beat_script = script("heartbeat")
        # Shared TTLs read from Redis: None (the prefix's) or a group's hash key -> (the
        # stored ms, None when none is stored; when it was read, monotonic ns).
        self._ttls: dict[str | None, tuple[int | None, int]] = {}
        # The shared progress budgets, read with the TTLs: (the stored ms or None, when).
        self._stucks: dict[str | None, tuple[int | None, int]] = {}
        # When this planner last checked ``P:protocol`` (monotonic ns; None: never).
        self._protocol_at: int | None = None
        self._claimed = False  # whether a beat of this planner claimed it (SET NX)

    @property
    def prefix(self) -> str:
        """The key prefix; planners with different prefixes never touch each other's keys."""
        return self.keys.prefix

    # -- writes -----------------------------------------------------------------------

    def heartbeat(
        self,
        queue: str,
        group: str,
        consumer: str,
        lease_count: int = 0,
        now_ns: int | None = None,
        *,
        progressed: bool = False,
    ) -> Plan[None]:
        """Record or refresh one consumer: one call of ``heartbeat.lua`` (a `Single` plan on a
        standalone server; on a cluster, followed by the index ``ZADD`` of a new group). The
        script tells a recovery with the group's shared TTL, which the planner reads first
        when it has not read it for TTL_CACHE_MS. With `progressed`, the beat also records
        progress at its instant (one call of ``heartbeat_many.lua`` instead)."""
        if self.read_only:
            self._writable("heartbeat")
        queue, group, consumer = check_consumer_key(queue, group, consumer)
        lease = check_lease_count(lease_count)
        if progressed is not False:
            if progressed is not True:
                raise TypeError(f"progressed must be a bool, got {type(progressed).__name__}")
            return self._progressed((queue, group, consumer, lease, 0, 0), check_now_ns(now_ns))
        now = "" if now_ns is None else str(check_now_ns(now_ns))
        cached = self._beat_calls.get((queue, group))
        if cached is None or self._clock() > cached[3]:
            return self._beat_after_ttl(queue, group, consumer, lease, now)
        head, tail, resp, _ = cached
        args = (*head, now, consumer, lease, *tail)
        if self.clustered:
            return self._beat_on_cluster(ScriptCall(self._beat_script, args), queue, group)
        if resp is None:
            return Single(self._beat_script, args, _none)
        packed = b"".join(
            (resp, bulk(now.encode()), bulk(self._encode(consumer)), bulk(b"%d" % lease))
        )
        return Single(self._beat_script, args, _none, packed)

    def _progressed(self, beat: DelayedBeat, now_ns: int | None) -> Plan[None]:
        """A single beat that records progress; a refusal raises as a plain beat's would."""
        try:
            yield from self._heartbeat([beat], now_ns)
        except PresenceBatchError as error:
            raise next(iter(error.failed.values())) from None

    def _beat_after_ttl(
        self, queue: str, group: str, consumer: str, lease: int, now: str
    ) -> Plan[None]:
        """A heartbeat whose group's shared TTL must be read first (a new group, or one whose
        TTL was read more than TTL_CACHE_MS ago)."""
        gk = self.keys.group(queue, group)
        (ttl,) = yield from self._shared_ttls([gk])
        head, tail, _, _ = self._beat_args(queue, group, ttl)
        call = ScriptCall(self._beat_script, (*head, now, consumer, lease, *tail))
        if self.clustered:
            yield from self._beat_on_cluster(call, queue, group)
        else:
            yield [call]
        yield from self._claim()

    def _beat_on_cluster(self, call: ScriptCall, queue: str, group: str) -> Plan[None]:
        (reply,) = yield [call]
        gk = self.keys.group(queue, group)
        listing = [gk] if int(reply[0]) else []  # step 1 of the index protocol: no mark
        yield from self._list_on_cluster(listing, [(gk.events, int(reply[1]))])

    def _list_on_cluster(
        self, groups: Sequence[GroupKeys], logged: Sequence[tuple[str, int]]
    ) -> Plan[None]:
        """A cluster's index writes after a script: ``ZADD`` the groups it found without a
        mark, and the event logs it wrote to (scored by the event's millisecond)."""
        batch: list[Request] = []
        if groups:
            members = [m for gk in groups for m in (0, gk.member)]
            batch.append(Command("ZADD", (self.keys.groups, *members)))
        logs = [item for log, ms in logged if ms for item in (ms, log)]
        if logs:
            batch.append(Command("ZADD", (self.keys.events, "GT", *logs)))
            # A cluster's epoch marker (a standalone script writes its own: mark_epoch), a
            # new token each time: a registry that wrote the one lost must not bring it back.
            batch.append(Command("SET", (self.keys.epoch, secrets.token_hex(16), "NX")))
        if batch:
            yield batch

    def _beat_args(self, queue: str, group: str, ttl: int) -> _BeatArgs:
        """What every ``heartbeat.lua`` call of one group shares, encoded: the command up to
        the beat (KEYS, the TTL, how much the log keeps), what follows it (the mark's lifetime
        on a cluster), with `packed` the command up to the beat in RESP, and until when the
        TTL in it may be trusted."""
        if len(self._beat_calls) >= MAX_CACHED_GROUPS:
            self._beat_calls.clear()
        gk = self.keys.group(queue, group)
        keys = self._write_keys([gk])
        encode = self._encode
        tail = (INDEX_MARK_MS,) if self.clustered else ()
        # The command name stays a str: a cluster client looks it up by name.
        head = (
            "EVALSHA",
            self._beat_script.sha,
            *map(encode, (len(keys), *keys, ttl, self.events_kept, EVENT_LOG_TTL_MS, self._guard)),
        )
        resp = None
        if self._packed:
            count = len(head) + 3  # now, consumer, lease
            resp = b"*%d\r\n" % count + bulks(head, self._codec)
        trusted = self._trusted_until(gk)
        cached = self._beat_calls[(queue, group)] = (
            head,
            tuple(map(encode, tail)),
            resp,
            trusted,
        )
        return cached

    def heartbeat_many(self, beats: Iterable[Beat], now_ns: int | None = None) -> Plan[int]:
        """Write many ``(queue, group, consumer, lease_count)`` beats, each atomically; returns
        how many. One script call per queue on a cluster, one in all else, and one more per
        `Limits.beats` beats (MAX_BEATS_PER_CALL)."""
        self._writable("heartbeat_many")
        checked = check_beats(beats)
        now = check_now_ns(now_ns)
        return self._heartbeat(checked, now)

    def heartbeat_delayed(self, beats: Sequence[DelayedBeat]) -> Plan[int]:
        """Write beats that happened earlier, as a reporter collects them: each is stamped
        ``server_now - delay_us``; returns how many."""
        self._writable("heartbeat")
        return self._heartbeat(check_delayed_beats(beats), None)

    def _heartbeat(self, beats: Sequence[Beat | DelayedBeat], now_ns: int | None) -> Plan[int]:
        """Checked beats (a `Beat` is one without delay) in calls of ``heartbeat_many.lua``:
        at most `Limits.beats` a call, one queue a call on a cluster, all in one pipeline.
        This is the reporter's path, so it is written for speed: groups are found once each
        by name, and with `packed` every call also carries its RESP (`ScriptCall.packed`)."""
        if not beats:
            return 0
        now = _now_arg(now_ns)
        group_of: dict[tuple[str, str], GroupKeys] = {}
        for beat in beats:
            name = (beat[0], beat[1])
            if name not in group_of:
                group_of[name] = self.keys.group(*name)
        every = list(group_of.values())
        ttl_of = dict(zip(group_of, (yield from self._shared_ttls(every)), strict=True))
        calls: list[Request] = []
        called: list[tuple[list[tuple[str, str]], Sequence[Beat | DelayedBeat]]] = []
        per_queue = (
            [list(part) for _, part in groupby(sorted(beats, key=_queue), key=_queue)]
            if self.clustered
            else [beats]
        )
        most = self.limits.beats
        head = (now, INDEX_MARK_MS, self.events_kept, EVENT_LOG_TTL_MS, self._guard)
        for part in per_queue:
            for start in range(0, len(part), most):
                batch = part[start : start + most]
                numbers: dict[tuple[str, str], int] = {}
                tail: list[str | int] = []
                for beat in batch:
                    name = (beat[0], beat[1])
                    number = numbers.get(name)
                    if number is None:
                        number = numbers[name] = len(numbers) + 1
                    size = len(beat)
                    delay = beat[4] if size > 4 else 0  # type: ignore[misc]
                    progress = beat[5] if size == 6 else ""  # type: ignore[misc]
                    tail += (number, beat[2], beat[3], delay, progress)
                names = list(numbers)
                keys = self._write_keys([group_of[name] for name in names])
                args = (*head, *(ttl_of[name] for name in names), *tail)
                calls.append(self._call("heartbeat_many", keys, args, pack=self._packed))
                called.append((names, batch))
        # Each call on its own: one refused call (or group) must not hide what the others wrote.
        replies = yield Partial(calls) if len(calls) > 1 else calls
        failed: dict[tuple[str, str], PresenceError] = {}
        unwritten: list[ConsumerKey] = []
        unlisted: list[GroupKeys] = []
        logged: list[tuple[str, int]] = []
        for (names, batch), reply in zip(called, replies, strict=True):
            if isinstance(reply, PresenceError):
                for name in names:
                    failed.setdefault(name, reply)
                unwritten += ((beat[0], beat[1], beat[2]) for beat in batch)
                continue
            if len(reply) > 2:
                refused = _refusals(reply[2:])
                whole = {names[r.group - 1] for r in refused if r.consumer is None}
                spoilt = {(*names[r.group - 1], r.consumer) for r in refused if r.consumer}
                for r in refused:
                    failed.setdefault(names[r.group - 1], r.error)
                unwritten += (
                    (beat[0], beat[1], beat[2])
                    for beat in batch
                    if (beat[0], beat[1]) in whole or (beat[0], beat[1], beat[2]) in spoilt
                )
            if self.clustered:
                unlisted += (group_of[names[int(number) - 1]] for number in reply[0])
                logged.append((group_of[names[0]].events, int(reply[1])))
        if self.clustered:
            yield from self._list_on_cluster(unlisted, logged)
        if len(unwritten) < len(beats):
            yield from self._claim()
        if len(unwritten) == len(beats) and all(isinstance(r, PresenceError) for r in replies):
            raise replies[0]  # every call was refused whole (out of memory, say)
        if failed:
            raise PresenceBatchError(failed, len(beats) - len(unwritten), unwritten)
        return len(beats)

    def deregister(
        self, queue: str, group: str, consumer: str, now_ns: int | None = None
    ) -> Plan[bool]:
        """Forget one consumer (graceful shutdown) and log that it left, at `now_ns` (None:
        the server clock); returns whether it was tracked."""
        self._writable("deregister")
        queue, group, consumer = check_consumer_key(queue, group, consumer)
        now = _now_arg(check_now_ns(now_ns))
        return self._deregister(self.keys.group(queue, group), consumer, now)

    def _deregister(self, gk: GroupKeys, consumer: str, now: str) -> Plan[bool]:
        args: list[str | int] = [consumer, now, self.events_kept, EVENT_LOG_TTL_MS]
        (reply,) = yield [self._call("deregister", self._write_keys([gk], meta=True), args)]
        existed, emptied = int(reply[0]), int(reply[1])
        if self.clustered:
            yield from self._list_on_cluster([], [(gk.events, int(reply[2]))])
        if emptied:
            yield from self._unlist([gk])
        return existed == 1

    def describe(self, queue: str, group: str, consumer: str, meta: dict[str, str]) -> Plan[bool]:
        """Store the consumer's metadata (`check_meta`; an empty mapping removes it), written
        only when it changed; returns whether the consumer is tracked (an untracked one's
        metadata is not stored: it lives and dies with its consumer)."""
        self._writable("describe")
        queue, group, consumer = check_consumer_key(queue, group, consumer)
        checked = check_meta(meta)
        value = encode_meta(checked) if checked else ""
        return self._describe_one((queue, group, consumer, value))

    def _describe_one(self, item: tuple[str, str, str, str]) -> Plan[bool]:
        (tracked,) = yield from self._describe([item])
        return tracked

    def describe_many(
        self, descriptions: Iterable[tuple[str, str, str, dict[str, str]]]
    ) -> Plan[list[bool]]:
        """`describe` for many ``(queue, group, consumer, meta)``: one script call (one per
        queue on a cluster, one more per `Limits.beats`); returns whether each is tracked."""
        self._writable("describe")
        items = []
        for index, (queue, group, consumer, meta) in enumerate(descriptions):
            try:
                key = check_consumer_key(queue, group, consumer)
                checked = check_meta(meta)
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"descriptions[{index}]: {exc}") from None
            items.append((*key, encode_meta(checked) if checked else ""))
        return self._describe(items)

    def _describe(self, items: Sequence[tuple[str, str, str, str]]) -> Plan[list[bool]]:
        if not items:
            return []
        order = list(range(len(items)))
        parts = [order]
        if self.clustered:  # one slot a call: one call per queue
            order.sort(key=lambda i: items[i][0])
            parts = [list(part) for _, part in groupby(order, key=lambda i: items[i][0])]
        calls: list[Request] = []
        called: list[list[int]] = []
        for part in parts:
            for start in range(0, len(part), self.limits.beats):
                chunk = part[start : start + self.limits.beats]
                numbers: dict[GroupKeys, int] = {}
                args: list[str | int] = []
                for i in chunk:
                    queue, group, consumer, value = items[i]
                    number = numbers.setdefault(self.keys.group(queue, group), len(numbers) + 1)
                    args += (number, consumer, value)
                keys = self._write_keys(list(numbers), meta=True)
                calls.append(self._call("describe", keys, args))
                called.append(chunk)
        replies = yield calls
        tracked = [False] * len(items)
        for chunk, reply in zip(called, replies, strict=True):
            for i, code in zip(chunk, reply, strict=True):
                tracked[i] = int(code) != 0
        return tracked

    def prune_expired(
        self,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        queue: str | None = None,
        group: str | None = None,
    ) -> Plan[int]:
        """Remove exactly the consumers a snapshot at the same `now_ns`/`ttl_ms` calls
        expired (of one queue, or one group, when given), and log them as pruned; returns
        how many. `ttl_ms` None is each group's shared TTL. Each call of ``prune.lua``
        visits at most `Limits.prune_consumers` consumers of `Limits.prune_groups` groups,
        and the next call resumes where it stopped."""
        self._writable("prune_expired")
        ttl = check_optional_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        return self._prune(now, ttl, check_filter("queue", queue), check_filter("group", group))

    def _prune(
        self, now_ns: int | None, ttl_ms: int | None, queue: str | None, group: str | None
    ) -> Plan[int]:
        now = str((yield from self._now(now_ns)))
        budget = self.limits.prune_consumers
        removed = 0
        failed: dict[tuple[str, str], PresenceError] = {}
        left: list[ConsumerKey] = []  # expired, but left in place for a spoilt value
        after: Any = None
        aside: list[Skipped] = []
        while True:
            groups, after = yield from self._listed(queue, group, after, aside)
            ttl_of = dict(zip(groups, (yield from self._ttls_for(groups, ttl_ms)), strict=True))
            # Per queue on a cluster (one slot a call): each part goes on from where the
            # budget of its last call ran out (a group, and an offset among its ties).
            # At most `Limits.prune_groups` groups a call.
            most = self.limits.prune_groups
            parts = [
                (part[start : start + most], 0, 0)
                for part in self._per_queue(groups)
                for start in range(0, len(part), most)
            ]
            emptied: list[GroupKeys] = []
            logged: list[tuple[str, int]] = []
            while parts:
                replies = yield [
                    self._call(
                        "prune",
                        self._write_keys(part, meta=True),
                        [
                            now,
                            budget,
                            below,
                            ties,
                            self.events_kept,
                            EVENT_LOG_TTL_MS,
                            *(ttl_of[gk] for gk in part),
                        ],
                    )
                    for part, below, ties in parts
                ]
                going_on = []
                for (part, _, _), reply in zip(parts, replies, strict=True):
                    removed += int(reply[0])
                    stop = int(reply[1])
                    logged.append((part[0].events, int(reply[4])))
                    emptied += (part[int(number) - 1] for number in reply[5])
                    for r in _refusals(reply[6:]):
                        gk = part[r.group - 1]
                        failed.setdefault((gk.queue, gk.group), r.error)
                        if r.consumer is not None:
                            left.append((gk.queue, gk.group, r.consumer))
                    if stop:
                        going_on.append((part[stop - 1 :], int(reply[2]), int(reply[3])))
                parts = going_on
            if self.clustered:
                yield from self._list_on_cluster([], logged)
            if emptied:
                yield from self._unlist(emptied)
            if after is None:
                if queue is None:
                    # The event index is scored by the server's clock (as the logs expire),
                    # not by the instants of the events: a caller's now_ns a day ahead must
                    # not forget the logs that hold this very prune's events.
                    server_ns = int(now) if now_ns is None else (yield from self._now(None))
                    yield from self._forget_logs(server_ns // NS_PER_MS - EVENT_LOG_TTL_MS)
                _report(aside)
                if failed:
                    raise PresenceBatchError(failed, removed, left)
                return removed

    def _forget_logs(self, before_ms: int) -> Plan[None]:
        """Take out of the event index, a page at a time, the logs without an event since
        `before_ms` (they have expired, or are about to)."""
        while True:
            (old,) = yield [
                Command(
                    "ZRANGEBYSCORE",
                    (self.keys.events, "-inf", f"({before_ms}", "LIMIT", 0, self.limits.groups),
                )
            ]
            if not old:
                return
            yield [Command("ZREM", (self.keys.events, *old))]

    def _unlist(self, groups: list[GroupKeys]) -> Plan[None]:
        """Step 2 of the cluster index protocol (docs/index-protocol.md): ``ZREM`` the groups
        a script left empty, re-check each (``EXISTS``), ``ZADD`` back those a racing
        heartbeat filled again. Without the re-check a live group can be lost."""
        yield [Command("ZREM", (self.keys.groups, *(gk.member for gk in groups)))]
        alive = yield [Command("EXISTS", (gk.hb,)) for gk in groups]
        back = [
            member
            for gk, exists in zip(groups, alive, strict=True)
            if int(exists)
            for member in (0, gk.member)
        ]
        if back:
            yield [Command("ZADD", (self.keys.groups, *back))]

    # -- reads ------------------------------------------------------------------------

    def snapshot(
        self,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        queue: str | None = None,
        group: str | None = None,
        stuck_after_ms: int | None = None,
        with_meta: bool = False,
    ) -> Plan[list[ConsumerPresence]]:
        """Every tracked consumer (of one queue, or one group, when given), ordered by
        (queue, group, consumer), expired ones too: `iter_snapshot`'s rows, in order."""
        stream = self.iter_snapshot(
            now_ns,
            ttl_ms,
            queue=queue,
            group=group,
            stuck_after_ms=stuck_after_ms,
            with_meta=with_meta,
        )
        return self._collect(stream)

    @staticmethod
    def _collect(stream: RowStream) -> Plan[list[ConsumerPresence]]:
        yield from stream.plan
        rows: Rows[ConsumerPresence] = Rows()
        with gc_paused():
            for _, part in sorted(stream.groups, key=_by_names):
                rows += part
        rows.skipped = _unique(stream.skipped)
        if stream.unreadable:  # every row was read: the error hands them out
            raise PresenceMetaError(stream.unreadable, rows)
        return rows

    def iter_snapshot(
        self,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        queue: str | None = None,
        group: str | None = None,
        stuck_after_ms: int | None = None,
        with_meta: bool = False,
    ) -> RowStream:
        """The rows of `snapshot`, group by group as they are read (`RowStream`).

        Every row is aged against one instant, `now_ns` or the server clock read once first,
        and classified with `ttl_ms`, or with each group's shared TTL when it is None; `stuck`
        is judged with `stuck_after_ms`, or each group's shared budget when it is None
        (`set_stuck_after`). With `with_meta`, each row's `meta` is read too (``HMGET`` of at
        most `Limits.consumers` names a command); without it, no metadata is read. Metadata
        this package did not write is a `PresenceMetaError` once every row was read (those
        consumers' `meta` empty; `snapshot` hands every row to the error).
        The index is read a page of `Limits.groups` groups at a time; a group of at most
        `Limits.consumers` consumers is read by one ``HGETALL`` (one instant), a larger one by
        ``HSCAN`` steps of that many (each row consistent, the group not one instant); one
        round trip asks for at most `Limits.rows` consumers.
        """
        ttl = check_optional_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        stuck = check_optional_stuck_after_ms(stuck_after_ms)
        if type(with_meta) is not bool:
            raise TypeError(f"with_meta must be a bool, got {type(with_meta).__name__}")
        queue, group = check_filter("queue", queue), check_filter("group", group)
        groups: list[tuple[GroupKeys, list[ConsumerPresence]]] = []
        skipped: list[Skipped] = []
        unreadable: dict[ConsumerKey, str] | None = {} if with_meta else None
        plan = self._stream(now, ttl, queue, group, groups, skipped, stuck, unreadable)
        return RowStream(plan, groups, skipped, unreadable)

    def _stream(
        self,
        now_ns: int | None,
        ttl_ms: int | None,
        queue: str | None,
        group: str | None,
        out: list[tuple[GroupKeys, list[ConsumerPresence]]],
        skipped: list[Skipped],
        stuck_after_ms: int | None = None,
        unreadable: dict[ConsumerKey, str] | None = None,
    ) -> Plan[None]:
        now = yield from self._now(now_ns)
        after: Any = None
        # A read of one named group fails on its bad data; a fleet read sets it aside.
        aside = None if queue is not None and group is not None else skipped
        while True:
            groups, after = yield from self._listed(queue, group, after, skipped)
            if groups:
                sizes = yield from self._sound(
                    groups, [Command("HLEN", (gk.data,)) for gk in groups], aside
                )
                kept = [i for i, n in enumerate(sizes) if n is not None]
                groups = [groups[i] for i in kept]
                ttls, stucks = yield from self._ttls_and_stucks(groups, ttl_ms, stuck_after_ms)
                sized = [int(sizes[i]) for i in kept]
                yield from self._read(groups, sized, ttls, now, out, stucks, unreadable, aside)
            if after is None:
                _report(skipped)
                return

    def _read(
        self,
        groups: list[GroupKeys],
        sizes: list[int],
        ttls: list[int],
        now_ns: int,
        out: list[tuple[GroupKeys, list[ConsumerPresence]]],
        stucks: list[int] | None = None,
        unreadable: dict[tuple[str, str, str], str] | None = None,
        aside: list[Skipped] | None = None,
    ) -> Plan[None]:
        """Read groups of known sizes in order, a window of them per round trip: each small
        group in one ``HGETALL``, each large one in ``HSCAN`` steps; a group goes to `out`
        once it is complete and every group before it is out. With `unreadable` (a dict),
        each row's metadata is read too, and what cannot be decoded is noted there. With
        `aside`, a group whose stored values this package cannot decode is set aside there
        instead of failing."""
        most = self.limits.consumers
        ttl_of = dict(zip(groups, ttls, strict=True))
        stuck_of = dict(zip(groups, stucks or [DEFAULT_STUCK_AFTER_MS] * len(groups), strict=True))
        pending = deque(_Read(gk, size) for gk, size in zip(groups, sizes, strict=True))
        window: deque[_Read] = deque()
        while pending or window:
            budget = self.limits.rows
            batch: list[Request] = []
            sent: list[_Read] = []
            for read in window:  # the large groups already on their way
                if not read.done:
                    batch.append(Command("HSCAN", (read.gk.data, read.cursor or 0, "COUNT", most)))
                    sent.append(read)
                    budget -= most
            while pending:
                read = pending[0]
                cost = min(read.size, most)
                if batch and cost > budget:
                    break
                pending.popleft()
                window.append(read)
                if read.size > most:
                    batch.append(Command("HSCAN", (read.gk.data, 0, "COUNT", most)))
                else:
                    batch.append(Command("HGETALL", (read.gk.data,)))
                sent.append(read)
                budget -= cost
            replies = yield batch
            with gc_paused():
                for read, reply in zip(sent, replies, strict=True):
                    if read.size > most:
                        cursor, part = reply
                        read.table.update(part)
                        read.cursor = int(cursor)
                        read.done = read.cursor == 0
                    else:
                        read.table, read.done = reply, True
                finished = []
                while window and window[0].done:
                    done = window.popleft()
                    try:
                        finished.append((done.gk, stored_columns(done.gk, done.table)))
                    except PresenceDataError as error:
                        if aside is None:
                            raise
                        aside.append(Skipped(done.gk.data, str(error)))
                    done.table = {}
            metas = None if unreadable is None else (yield from self._metas(finished, unreadable))
            with gc_paused():
                for i, (gk, columns) in enumerate(finished):
                    rows = ConsumerPresence.columns(
                        gk.queue,
                        gk.group,
                        *columns,
                        now_ns=now_ns,
                        ttl_ms=ttl_of[gk],
                        stuck_after_ms=stuck_of[gk],
                        metas=None if metas is None else metas[i],
                    )
                    out.append((gk, list(rows)))

    def _metas(
        self, finished: list[tuple[GroupKeys, Columns]], unreadable: dict[ConsumerKey, str]
    ) -> Plan[list[list[ConsumerMeta]]]:
        """The metadata of every consumer of the finished groups, in their order: ``HMGET``
        of at most `Limits.consumers` names a command, `Limits.rows` names a round trip. A
        value this package did not write is `NO_META`, and why is noted in `unreadable`."""
        most, per_trip = self.limits.consumers, self.limits.rows
        asks = [
            (i, start)
            for i, (_, columns) in enumerate(finished)
            for start in range(0, len(columns[0]), most)
        ]
        found: list[list[ConsumerMeta]] = [[] for _ in finished]
        trip = max(1, per_trip // most)
        for first in range(0, len(asks), trip):
            part = asks[first : first + trip]
            replies = yield [
                Command("HMGET", (finished[i][0].meta, *finished[i][1][0][start : start + most]))
                for i, start in part
            ]
            for (i, start), values in zip(part, replies, strict=True):
                gk, names = finished[i][0], finished[i][1][0][start : start + most]
                found[i] += (
                    NO_META if value is None else _meta_of(gk, name, value, unreadable)
                    for name, value in zip(names, values, strict=True)
                )
        return found

    def count_active_by_group(
        self,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        queue: str | None = None,
        group: str | None = None,
    ) -> Plan[dict[tuple[str, str], int]]:
        """Active consumers per (queue, group) (of one queue, or one group, when given),
        counted server-side in O(log n) a group; groups without one have no key. `ttl_ms`
        None is each group's shared TTL."""
        ttl = check_optional_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        return self._count(now, ttl, check_filter("queue", queue), check_filter("group", group))

    def _count(
        self, now_ns: int | None, ttl_ms: int | None, queue: str | None, group: str | None
    ) -> Plan[dict[tuple[str, str], int]]:
        now = yield from self._now(now_ns)
        counts: Counts = Counts()
        skipped: list[Skipped] = []
        aside = None if queue is not None and group is not None else skipped
        after: Any = None
        while True:
            groups, after = yield from self._listed(queue, group, after, skipped)
            if groups:
                ttls = yield from self._ttls_for(groups, ttl_ms)
                found = yield from self._active(groups, now, ttls, aside)
                counts.update(
                    ((gk.queue, gk.group), n)
                    for gk, n in zip(groups, found, strict=True)
                    if n is not None and n
                )
            if after is None:
                counts.skipped = _unique(skipped)
                _report(skipped)
                return counts

    def count_active(
        self,
        queue: str,
        group: str,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
    ) -> Plan[int]:
        """Active consumers of one group (0 when it has none, or is not tracked)."""
        queue, group = check_filter("queue", queue) or "", check_filter("group", group) or ""
        ttl = check_optional_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        return self._count_one(self.keys.group(queue, group), now, ttl)

    def consumer(
        self,
        queue: str,
        group: str,
        consumer: str,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        stuck_after_ms: int | None = None,
    ) -> Plan[ConsumerPresence | None]:
        """One consumer's row (None: not tracked), aged at `now_ns` and classified with
        `ttl_ms` and `stuck_after_ms` (None: the group's shared ones): one ``HMGET`` (a
        command of the reader role), and no other consumer of its group is read."""
        queue, group, consumer = check_consumer_key(queue, group, consumer)
        ttl = check_optional_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        stuck = check_optional_stuck_after_ms(stuck_after_ms)
        return self._consumer(self.keys.group(queue, group), consumer, now, ttl, stuck)

    def _consumer(
        self,
        gk: GroupKeys,
        consumer: str,
        now_ns: int | None,
        ttl_ms: int | None,
        stuck_after_ms: int | None,
    ) -> Plan[ConsumerPresence | None]:
        now = yield from self._now(now_ns)
        (ttl,), (stuck,) = yield from self._ttls_and_stucks([gk], ttl_ms, stuck_after_ms)
        ((value,),) = yield [Command("HMGET", (gk.data, consumer))]  # the reader role's
        if value is None:
            return None
        name = consumer.encode() if isinstance(value, bytes) else consumer
        columns = stored_columns(gk, {name: value})
        (row,) = ConsumerPresence.columns(
            gk.queue, gk.group, *columns, now_ns=now, ttl_ms=ttl, stuck_after_ms=stuck
        )
        return row

    def consumer_meta(self, queue: str, group: str, consumer: str) -> Plan[ConsumerMeta]:
        """One consumer's metadata (`describe`; empty when none is stored): one ``HMGET``;
        metadata this package did not write is a `PresenceMetaError`."""
        queue, group, consumer = check_consumer_key(queue, group, consumer)
        return self._consumer_meta(self.keys.group(queue, group), consumer)

    def _consumer_meta(self, gk: GroupKeys, consumer: str) -> Plan[ConsumerMeta]:
        ((value,),) = yield [Command("HMGET", (gk.meta, consumer))]  # the reader role's
        unreadable: dict[ConsumerKey, str] = {}
        meta = NO_META if value is None else _meta_of(gk, consumer, value, unreadable)
        if unreadable:
            raise PresenceMetaError(unreadable)
        return meta

    def group_logs(
        self,
        groups: Sequence[tuple[str, str]],
        *,
        since_ns: int,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        entries: int = 1_000,
    ) -> Plan[list[GroupLog]]:
        """What `history` rebuilds each group's recent past from: its active count now, the
        newest `entries` entries (at most) of each queue's event log (``XREVRANGE ...
        COUNT``, one per queue), the heartbeats now of the consumers they name, and the
        crossings in ``(since_ns, now]`` of its consumers (``Limits.consumers`` at most per
        line). Bounded: it never reads a whole log or a whole group."""
        gks = [self.keys.group(check_name("queue", q), check_name("group", g)) for q, g in groups]
        ttl = check_optional_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        if isinstance(entries, bool) or not isinstance(entries, int) or entries < 1:
            raise ValueError(f"entries must be a positive int, got {entries!r}")
        since = check_now_ns(since_ns, "since_ns")
        return self._group_logs(gks, since or 0, now, ttl, entries)

    def _group_logs(
        self, gks: list[GroupKeys], since_ns: int, now_ns: int | None, ttl_ms: int | None, most: int
    ) -> Plan[list[GroupLog]]:
        now = yield from self._now(now_ns)
        ttls = yield from self._ttls_for(gks, ttl_ms)
        actives = yield from self._active(gks, now, ttls)
        queues = list(dict.fromkeys(gk.queue for gk in gks))
        logs = [self.keys.queue_events(q) for q in queues]
        reads = yield [Command("XREVRANGE", (log, "+", "-", "COUNT", most)) for log in logs]
        read = [list(entries) for entries in reads]
        asked = [log for log, entries in zip(logs, read, strict=True) if entries]
        infos = (yield Partial(Command("XINFO STREAM", (log,)) for log in asked)) if asked else []
        infos_of = iter(infos)
        events: dict[str, list[PresenceEvent]] = {}
        reach: dict[str, int | None] = {}
        for queue, entries in zip(queues, read, strict=True):
            found = [
                item
                for entry_id, fields in entries
                for item in logged_events(self.keys, queue, entry_id, fields)
            ]
            events[queue] = sorted_events(found)
            info = next(infos_of) if entries else None
            added, length = _log_counts(info)
            trimmed = added > length or len(entries) >= most
            oldest = min((e.at_ns for e in events[queue]), default=None)
            if not trimmed or oldest is None or oldest <= since_ns:
                reach[queue] = None
            else:
                reach[queue] = oldest
        mine = [[e for e in events[gk.queue] if e.group == gk.group] for gk in gks]
        line = self.limits.consumers
        windows = [
            (gk, kind, ttl, *window(kind, since_ns, now, ttl))
            for gk, ttl in zip(gks, ttls, strict=True)
            for kind in (EventKind.STALE, EventKind.EXPIRED)
        ]
        names = yield [
            Command("ZRANGEBYSCORE", (gk.hb, low // 1_000, high // 1_000, "LIMIT", 0, line))
            for gk, _, _, low, high in windows
        ]
        touched = [
            list(dict.fromkeys([e.consumer for e in own] + [_text(n) for n in crossing]))
            for own, crossing in zip(mine, names[0::2], strict=True)
        ]
        asks = [(i, part) for i, all_ in enumerate(touched) for part in _chunks(all_, line)]
        values = (
            (yield [Command("HMGET", (gks[i].data, *part)) for i, part in asks]) if asks else []
        )
        beats: list[dict[str, int | None]] = [{} for _ in gks]
        stored: list[dict[str, object]] = [{} for _ in gks]
        for (i, part), got in zip(asks, values, strict=True):
            for name, value in zip(part, got, strict=True):
                hb = None if value is None else stored_heartbeat_ns(gks[i], name, value)
                beats[i][name] = hb
                if value is not None:
                    stored[i][name] = value
        out = []
        for i, gk in enumerate(gks):
            active = actives[i]
            assert active is not None  # read without `aside`: a group it cannot read raises
            crossings = []
            for j in (2 * i, 2 * i + 1):
                _, kind, ttl, low, high = windows[j]
                for name in map(_text, names[j]):
                    value = stored[i].get(name)
                    event = None if value is None else group_event(kind, gk, name, value, ttl)
                    if event is not None and low < heartbeat_of(event) <= high:
                        crossings.append(event)
            out.append(
                GroupLog(
                    gk.queue,
                    gk.group,
                    now,
                    since_ns,
                    ttls[i],
                    active,
                    tuple(mine[i]),
                    beats[i],
                    tuple(sorted(crossings, key=attrgetter("at_ns"))),
                    reach[gk.queue],
                    capped=any(len(names[j]) >= line for j in (2 * i, 2 * i + 1)),
                )
            )
        return out

    def _count_one(self, gk: GroupKeys, now_ns: int | None, ttl_ms: int | None) -> Plan[int]:
        now = yield from self._now(now_ns)
        ttls = yield from self._ttls_for([gk], ttl_ms)
        (found,) = yield from self._active([gk], now, ttls)
        return found or 0

    def _active(
        self,
        groups: list[GroupKeys],
        now_ns: int,
        ttls: list[int],
        aside: list[Skipped] | None = None,
    ) -> Plan[list[int | None]]:
        """Active consumers of each group under its TTL (`_above` its active horizon)."""
        horizons = [PresenceState.horizons_ns(now_ns, ttl)[0] for ttl in ttls]
        return (yield from self._above(groups, horizons, aside))

    def _above(
        self, groups: list[GroupKeys], horizons: list[int], aside: list[Skipped] | None = None
    ) -> Plan[list[int | None]]:
        """Consumers of each group whose last beat is after its horizon (ns): ``ZCOUNT`` of
        the scores above the horizon's microsecond, plus those on it whose nanosecond rest is
        above the horizon's (read from their stored values, `Limits.consumers` at a time).
        With `aside`, a group with a key or a value this package cannot decode counts None
        and is set aside there instead of failing."""
        edges = [horizon // 1_000 for horizon in horizons]
        most = self.limits.consumers
        requests = [
            request
            for gk, edge in zip(groups, edges, strict=True)
            for request in (
                Command("ZCOUNT", (gk.hb, f"({edge}", "+inf")),
                Command("ZRANGEBYSCORE", (gk.hb, edge, edge, "LIMIT", 0, most)),
            )
        ]
        pairs = [gk for gk in groups for _ in (0, 1)]
        replies = yield from self._sound(pairs, requests, aside)
        counts: list[int | None] = [
            None if n is None or t is None else int(n)
            for n, t in zip(replies[0::2], replies[1::2], strict=True)
        ]
        ties = {
            i: (0, list(names))
            for i, names in enumerate(replies[1::2])
            if names and counts[i] is not None
        }
        while ties:  # consumers on the horizon's microsecond: rare, and read a page at a time
            order = list(ties)
            batch: list[Request] = []
            for i in order:
                offset, names = ties[i]
                batch.append(Command("HMGET", (groups[i].data, *names)))
                if len(names) == most:
                    page = (groups[i].hb, edges[i], edges[i], "LIMIT", offset + most, most)
                    batch.append(Command("ZRANGEBYSCORE", page))
            answers = iter((yield batch))
            going_on: dict[int, tuple[int, list[Any]]] = {}
            for i in order:
                offset, names = ties[i]
                for name, value in zip(names, next(answers), strict=True):
                    if value is None or counts[i] is None:
                        continue
                    try:
                        beat = stored_heartbeat_ns(groups[i], name, value)
                    except PresenceDataError as error:
                        if aside is None:
                            raise
                        aside.append(Skipped(groups[i].data, str(error)))
                        counts[i] = None
                        continue
                    if beat > horizons[i]:
                        counts[i] = (counts[i] or 0) + 1
                if len(names) == most:
                    more = list(next(answers))
                    if more:
                        going_on[i] = (offset + most, more)
            ties = going_on
        return counts

    def size(self) -> Plan[int]:
        """How many consumers are tracked, in every state (groups this package cannot
        decode set aside)."""
        total = 0
        skipped: list[Skipped] = []
        after: Any = None
        while True:
            groups, after = yield from self._listed(None, None, after, skipped)
            if groups:
                asks = [Command("ZCARD", (gk.hb,)) for gk in groups]
                cards = yield from self._sound(groups, asks, skipped)
                total += sum(int(n) for n in cards if n is not None)
            if after is None:
                _report(skipped)
                return total

    # -- declared groups ------------------------------------------------------------

    def expect(self, queue: str, group: str, min_active: int = 1) -> Plan[None]:
        """Declare that `group` must have at least `min_active` active readers of `queue`:
        kept in Redis (``P:{Q}:expect``, listed in ``P:expects``) until `unexpect`, whether
        or not the group has consumers."""
        self._writable("expect")
        queue, group = check_name("queue", queue), check_name("group", group)
        least = check_min_active(min_active)
        return self._expect(queue, group, least)

    def _expect(self, queue: str, group: str, least: int) -> Plan[None]:
        key = self.keys.queue_expect(queue)
        # The declaration first, then the index: a racing unexpect's re-check sees it.
        yield [Command("HSET", (key, group, least))]
        yield [Command("ZADD", (self.keys.expects, 0, key))]

    def unexpect(self, queue: str, group: str) -> Plan[bool]:
        """Forget a declared group; returns whether it was declared."""
        self._writable("unexpect")
        queue, group = check_name("queue", queue), check_name("group", group)
        return self._unexpect(queue, group)

    def _unexpect(self, queue: str, group: str) -> Plan[bool]:
        key = self.keys.queue_expect(queue)
        removed, left = yield [Command("HDEL", (key, group)), Command("HLEN", (key,))]
        if not int(left):
            # As the index of groups (docs/index-protocol.md): unlist, re-check, list again
            # when a racing expect declared a group meanwhile.
            yield [Command("ZREM", (self.keys.expects, key))]
            (exists,) = yield [Command("EXISTS", (key,))]
            if int(exists):
                yield [Command("ZADD", (self.keys.expects, 0, key))]
        return int(removed) == 1

    def expected(self) -> Plan[dict[tuple[str, str], int]]:
        """Every declared group and its `min_active`: the index a page of `Limits.groups`
        queues at a time, each queue's declarations ``HSCAN``ned `Limits.consumers` at a time."""
        return self._reported(self._expected)

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
        return None if value is None else _stored_min(key, group, value)

    def _expected(self, skipped: list[Skipped]) -> Plan[dict[tuple[str, str], int]]:
        found: dict[tuple[str, str], int] = {}
        low = "-"
        page = self.limits.groups
        while True:
            (members,) = yield [
                Command("ZRANGEBYLEX", (self.keys.expects, low, "+", "LIMIT", 0, page))
            ]
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
                replies = yield [
                    Command("HSCAN", (keys[i], cursors[i], "COUNT", self.limits.consumers))
                    for i in order
                ]
                going_on: dict[int, int] = {}
                for i, (cursor, part) in zip(order, replies, strict=True):
                    table = (
                        part
                        if isinstance(part, dict)
                        else dict(zip(part[::2], part[1::2], strict=True))
                    )
                    for name, least in table.items():
                        try:
                            found[(queues[i], _text(name))] = _stored_min(keys[i], name, least)
                        except PresenceDataError as error:
                            skipped.append(Skipped(keys[i], str(error)))
                    if int(cursor):
                        going_on[i] = int(cursor)
                cursors = going_on
            if len(every) < page:
                return dict(sorted(found.items()))
            low = f"({every[-1]}"

    def groups(
        self, now_ns: int | None = None, ttl_ms: int | None = None, *, details: bool = False
    ) -> Plan[list[GroupPresence]]:
        """Every tracked or declared group, ordered by (queue, group), with its active, stale
        and expired consumers (at `now_ns`, under `ttl_ms` or each group's shared TTL), its
        `min_active` (None: not declared) and whether it has fewer active consumers.

        With `details`, also each group's oldest heartbeat (its sorted set's lowest score:
        O(log n) a group, in the same batch as its size) and the leases its expired
        consumers hold: the expired ones are a range of its sorted set, read
        `Limits.consumers` names at a time, and only their stored values (``HMGET``), so
        this costs what the expired consumers are, not the group (a group's leases in total
        would need every stored value: a snapshot's cost)."""
        ttl = check_optional_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        if type(details) is not bool:
            raise TypeError(f"details must be a bool, got {type(details).__name__}")
        return self._groups(now, ttl, details)

    def _groups(
        self, now_ns: int | None, ttl_ms: int | None, details: bool = False
    ) -> Plan[list[GroupPresence]]:
        now = yield from self._now(now_ns)
        skipped: list[Skipped] = []
        declared = yield from self._expected(skipped)
        counts: dict[tuple[str, str], tuple[int, int, int]] = {}
        extra: dict[tuple[str, str], tuple[int | None, int]] = {}
        after: Any = None
        while True:
            groups, after = yield from self._listed(None, None, after, skipped)
            if groups:
                ttls = yield from self._ttls_for(groups, ttl_ms)
                horizons = [PresenceState.horizons_ns(now, ttl) for ttl in ttls]
                if details:
                    replies = yield [
                        request
                        for gk in groups
                        for request in (
                            Command("ZCARD", (gk.hb,)),
                            Command(
                                "ZRANGEBYSCORE",
                                (gk.hb, "-inf", "+inf", "WITHSCORES", "LIMIT", 0, 1),
                            ),
                        )
                    ]
                    cards, firsts = replies[0::2], replies[1::2]
                else:
                    cards = yield from self._sound(
                        groups, [Command("ZCARD", (gk.hb,)) for gk in groups], skipped
                    )
                active = yield from self._above(groups, [h[0] for h in horizons], skipped)
                alive = yield from self._above(groups, [h[1] for h in horizons], skipped)
                for gk, card, a, b in zip(groups, cards, active, alive, strict=True):
                    if card is not None and a is not None and b is not None:
                        counts[(gk.queue, gk.group)] = (a, b - a, int(card) - b)
                if details:
                    dead = [
                        card is not None and b is not None and int(card) > b
                        for card, b in zip(cards, alive, strict=True)
                    ]
                    lost = yield from self._expired_leases(groups, [h[1] for h in horizons], dead)
                    for gk, first, held in zip(groups, firsts, lost, strict=True):
                        extra[(gk.queue, gk.group)] = (_lowest_score_ns(first), held)
            if after is None:
                break
        _report(skipped)
        out: Rows[GroupPresence] = Rows()
        nothing: tuple[int | None, int] = (None, 0)
        for key in sorted(counts.keys() | declared.keys()):
            n_active, n_stale, n_expired = counts.get(key, (0, 0, 0))
            more: tuple[int | None, int | None] = (
                extra.get(key, nothing) if details else (None, None)
            )
            out.append(
                GroupPresence.of(*key, n_active, n_stale, n_expired, declared.get(key), *more)
            )
        out.skipped = _unique(skipped)
        return out

    def _tally(
        self, groups: list[GroupKeys], horizons: list[tuple[int, int]], skipped: list[Skipped]
    ) -> Plan[list[tuple[int, int, int] | None]]:
        """Each group's active, stale and expired consumers (``ZCARD`` and ``ZCOUNT``s,
        O(log n) a group); None for a group set aside in `skipped` (data it cannot read)."""
        cards = yield from self._sound(
            groups, [Command("ZCARD", (gk.hb,)) for gk in groups], skipped
        )
        active = yield from self._above(groups, [h[0] for h in horizons], skipped)
        alive = yield from self._above(groups, [h[1] for h in horizons], skipped)
        return [
            None if card is None or a is None or b is None else (a, b - a, int(card) - b)
            for card, a, b in zip(cards, active, alive, strict=True)
        ]

    def group_page(
        self,
        *,
        after: tuple[str, str] | None = None,
        before: tuple[str, str] | None = None,
        limit: int = 100,
        queue: str | None = None,
        names: Callable[[str, str], bool] | None = None,
        match: Callable[[GroupPresence], bool] | None = None,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
    ) -> Plan[GroupsPage]:
        """Up to `limit` tracked or declared groups in the index's order (`group_order`),
        strictly after the group `after` (or before `before`, still given in that order), of
        one `queue` when given, whose names pass `names` and whose counts pass `match`; and
        whether more of them lie beyond on that side. The index is read from the cursor a
        page (`Limits.groups`) at a time and only the groups whose names pass are counted,
        as `groups()` counts them; declared groups come from `expected()`."""
        if after is not None and before is not None:
            raise ValueError("a page of groups starts after one group or ends before one, not both")
        if type(limit) is not int or not 1 <= limit <= 10_000:
            raise ValueError(f"limit must be an integer from 1 to 10,000, got {limit!r:.40}")
        edge = after if after is not None else before
        bound = None
        if edge is not None:
            bound = self.group_order(*edge)
        return self._group_page(
            bound,
            before is not None,
            limit,
            check_filter("queue", queue),
            names,
            match,
            check_now_ns(now_ns),
            check_optional_ttl_ms(ttl_ms),
        )

    def group_names(self, queue: str | None = None) -> Plan[list[tuple[str, str]]]:
        """Every indexed (queue, group) (of one `queue`), ordered by name: the index alone,
        `Limits.groups` members a command; no group is counted or read."""
        return self._group_names(check_filter("queue", queue))

    def _group_names(self, queue: str | None) -> Plan[list[tuple[str, str]]]:
        found: list[tuple[str, str]] = []
        skipped: list[Skipped] = []
        after: Any = None
        while True:
            groups, after = yield from self._listed(queue, None, after, skipped)
            found += [(gk.queue, gk.group) for gk in groups]
            if after is None:
                _report(skipped)
                return sorted(found)

    def group_order(self, queue: str, group: str) -> str:
        """What `group_page` orders groups by: their index member (the percent-encoded
        queue, then group, names: byte order for names of ASCII letters, digits, ``-``,
        ``_``, ``.``, ``~`` where neither name extends another)."""
        return self.keys.group(check_name("queue", queue), check_name("group", group)).member

    def _group_page(
        self,
        bound: str | None,
        reverse: bool,
        limit: int,
        queue: str | None,
        names: Callable[[str, str], bool] | None,
        match: Callable[[GroupPresence], bool] | None,
        now_ns: int | None,
        ttl_ms: int | None,
    ) -> Plan[GroupsPage]:
        now = yield from self._now(now_ns)
        skipped: list[Skipped] = []
        declared = yield from self._expected(skipped)
        lonely = sorted(
            (self.keys.group(q, g) for q, g in declared if queue is None or q == queue),
            key=attrgetter("member"),
            reverse=reverse,
        )
        low, high = self.keys.queue_range(queue) if queue is not None else ("-", "+")
        step = self.limits.groups
        picked: list[GroupPresence] = []

        def past(member: str, mark: str | None) -> bool:  # beyond `mark` in reading order
            return mark is None or (member < mark if reverse else member > mark)

        while True:
            if reverse:
                top = high if bound is None or (queue and bound >= high[1:]) else f"({bound}"
                command = Command("ZREVRANGEBYLEX", (self.keys.groups, top, low, "LIMIT", 0, step))
            else:
                bottom = low if bound is None or (queue and bound < low[1:]) else f"({bound}"
                command = Command("ZRANGEBYLEX", (self.keys.groups, bottom, high, "LIMIT", 0, step))
            (members,) = yield [command]
            listed = []
            for member in members:
                try:
                    listed.append(self.keys.from_member(member))
                except PresenceDataError as error:
                    skipped.append(Skipped(_text(member), str(error)))
            last = _text(members[-1]) if len(members) == step else None  # None: the end
            seen = {gk.member for gk in listed}
            alone = [
                gk
                for gk in lonely
                if past(gk.member, bound)
                and (last is None or not past(gk.member, last))
                and gk.member not in seen
            ]
            wanted = sorted(
                (
                    gk
                    for gk in (*listed, *alone)
                    if (queue is None or gk.queue == queue)
                    and (names is None or names(gk.queue, gk.group))
                ),
                key=attrgetter("member"),
                reverse=reverse,
            )
            while wanted and len(picked) <= limit:
                chunk, wanted = wanted[: limit + 1 - len(picked)], wanted[limit + 1 - len(picked) :]
                tracked = [gk for gk in chunk if gk.member in seen]
                counted: dict[str, tuple[int, int, int] | None] = {}
                if tracked:
                    ttls = yield from self._ttls_for(tracked, ttl_ms)
                    horizons = [PresenceState.horizons_ns(now, ttl) for ttl in ttls]
                    found = yield from self._tally(tracked, horizons, skipped)
                    counted.update(zip((gk.member for gk in tracked), found, strict=True))
                for gk in chunk:
                    if gk.member in counted and counted[gk.member] is None:
                        continue  # set aside: its data cannot be read
                    row = GroupPresence.of(
                        gk.queue,
                        gk.group,
                        *(counted.get(gk.member) or (0, 0, 0)),
                        declared.get((gk.queue, gk.group)),
                    )
                    if match is None or match(row):
                        picked.append(row)
            if len(picked) > limit or last is None:
                break
            bound = last
        _report(skipped)
        shown = picked[:limit]
        return GroupsPage(shown[::-1] if reverse else shown, len(picked) > limit)

    def _expired_leases(
        self, groups: list[GroupKeys], horizons: list[int], dead: list[bool]
    ) -> Plan[list[int]]:
        """The leases held by each group's consumers whose last beat is at or before its
        horizon (ns), for the groups with an expired consumer (`dead`; the others hold
        none): the names up to the horizon's microsecond, `Limits.consumers` a command, and
        their stored values (``HMGET``), which say the beat to the nanosecond."""
        most = self.limits.consumers
        edges = [horizon // 1_000 for horizon in horizons]
        held = [0] * len(groups)
        reads = {i: 0 for i, any_dead in enumerate(dead) if any_dead}  # offset of next page
        while reads:
            order = list(reads)
            pages = yield [
                Command("ZRANGEBYSCORE", (groups[i].hb, "-inf", edges[i], "LIMIT", reads[i], most))
                for i in order
            ]
            found = [(i, list(names)) for i, names in zip(order, pages, strict=True) if names]
            if not found:
                break
            values = yield [Command("HMGET", (groups[i].data, *names)) for i, names in found]
            going_on: dict[int, int] = {}
            for (i, names), stored in zip(found, values, strict=True):
                table = {n: v for n, v in zip(names, stored, strict=True) if v is not None}
                _, _, beats, leases, _ = stored_columns(groups[i], table)
                edge = horizons[i]
                held[i] += sum(n for beat, n in zip(beats, leases, strict=True) if beat <= edge)
                if len(names) == most:
                    going_on[i] = reads[i] + most
            reads = going_on
        return held

    # -- the shared TTL -------------------------------------------------------------

    def set_ttl(
        self, ttl_ms: int | None, *, queue: str | None = None, group: str | None = None
    ) -> Plan[None]:
        """Store the TTL every reader and writer of this prefix shares (None: forget it): for
        the prefix (the default of every group), or for one group (`queue` and `group`)."""
        self._writable("set_ttl")
        ttl = check_optional_ttl_ms(ttl_ms)
        key = self._ttl_key(queue, group)
        return self._set_ttl(key, ttl)

    def _set_ttl(self, key: str, ttl_ms: int | None) -> Plan[None]:
        if ttl_ms is None:
            yield [Command("DEL", (key,))]
        else:
            yield [Command("SET", (key, ttl_ms))]
        self._ttls.clear()  # this planner's next reads and beats see it at once
        self._stucks.clear()
        self._beat_calls.clear()

    def set_stuck_after(
        self, stuck_after_ms: int | None, *, queue: str | None = None, group: str | None = None
    ) -> Plan[None]:
        """Store the progress budget every reader shares (None: forget it), for the prefix
        or one group, as `set_ttl` stores the TTL: reads whose `stuck_after_ms` is None use
        it (within TTL_CACHE_MS in other processes)."""
        self._writable("set_stuck_after")
        budget = check_optional_stuck_after_ms(stuck_after_ms)
        key = self._setting_key(queue, group, "stuck")
        return self._set_ttl(key, budget)

    def stuck_after(
        self, queue: str | None = None, group: str | None = None
    ) -> Plan[tuple[int, TtlSource]]:
        """The shared progress budget of one group (or of the prefix), read now, and where it
        comes from: ``"group"``, ``"prefix"`` or ``"default"`` (DEFAULT_STUCK_AFTER_MS)."""
        key = self._setting_key(queue, group, "stuck")
        return self._read_setting(key, self.keys.stuck, DEFAULT_STUCK_AFTER_MS)

    def ttl(
        self, queue: str | None = None, group: str | None = None
    ) -> Plan[tuple[int, TtlSource]]:
        """The shared TTL of one group (or of the prefix), read now, and where it comes from:
        ``"group"`` (stored for it), ``"prefix"`` (stored for the prefix) or ``"default"``
        (DEFAULT_PRESENCE_TTL_MS, nothing stored)."""
        key = self._ttl_key(queue, group)
        return self._read_ttl(key)

    def ttl_sources(
        self, groups: Iterable[tuple[str, str]]
    ) -> Plan[dict[tuple[str, str], tuple[int, TtlSource]]]:
        """`ttl` of each `(queue, group)`, read now: one ``GET`` a group (and one of the
        prefix), `Limits.rows` of them a round trip."""
        pairs = list(
            dict.fromkeys((check_name("queue", q), check_name("group", g)) for q, g in groups)
        )
        return self._ttl_sources(pairs)

    def _ttl_sources(
        self, pairs: list[tuple[str, str]]
    ) -> Plan[dict[tuple[str, str], tuple[int, TtlSource]]]:
        (prefix,) = yield [Command("GET", (self.keys.ttl,))]
        shared = _stored_ttl(self.keys.ttl, prefix)
        found: dict[tuple[str, str], tuple[int, TtlSource]] = {}
        fallback: tuple[int, TtlSource] = (
            (DEFAULT_PRESENCE_TTL_MS, "default") if shared is None else (shared, "prefix")
        )
        step = self.limits.rows
        for start in range(0, len(pairs), step):
            part = pairs[start : start + step]
            keys = [self.keys.group(q, g).ttl for q, g in part]
            replies = yield [Command("GET", (key,)) for key in keys]
            for pair, key, reply in zip(part, keys, replies, strict=True):
                own = _stored_ttl(key, reply)
                found[pair] = fallback if own is None else (own, "group")
        return found

    def _read_ttl(self, key: str) -> Plan[tuple[int, TtlSource]]:
        return self._read_setting(key, self.keys.ttl, DEFAULT_PRESENCE_TTL_MS)

    def _read_setting(self, key: str, prefix_key: str, default: int) -> Plan[tuple[int, TtlSource]]:
        keys = [prefix_key] if key == prefix_key else [prefix_key, key]
        replies = yield [Command("GET", (k,)) for k in keys]
        stored = [_stored_ttl(k, r) for k, r in zip(keys, replies, strict=True)]
        if len(stored) == 2 and stored[1] is not None:
            return stored[1], "group"
        if stored[0] is not None:
            return stored[0], "prefix"
        return default, "default"

    def _ttl_key(self, queue: str | None, group: str | None) -> str:
        return self._setting_key(queue, group, "ttl")

    def _setting_key(self, queue: str | None, group: str | None, kind: str) -> str:
        if (queue is None) != (group is None):
            what = "a TTL" if kind == "ttl" else "a progress budget"
            raise ValueError(f"{what} is the prefix's (no queue, no group) or one group's (both)")
        if queue is None or group is None:
            return self.keys.ttl if kind == "ttl" else self.keys.stuck
        queue, group = check_filter("queue", queue) or "", check_filter("group", group) or ""
        gk = self.keys.group(queue, group)
        return gk.ttl if kind == "ttl" else gk.stuck

    # -- events -----------------------------------------------------------------------

    def changes(
        self,
        cursor: str | None = None,
        *,
        now_ns: int | None = None,
        queue: str | None = None,
        group: str | None = None,
        limit: int = DEFAULT_CHANGES_LIMIT,
    ) -> Plan[Changes]:
        """The events after `cursor` up to `now_ns` (the server clock when None), in
        `events.order`, at most about `limit` of them (a log entry is never split), and the
        cursor to go on from (`Changes`: ``events, cursor = ...``; its ``more`` says the
        window is not done, so the caller should ask again at once); `cursor` None starts now
        (no events). Time-driven events (stale, expired) use each group's shared TTL. Raises
        `PresenceResyncRequired` when the log was trimmed past the cursor or the data it was
        read from was lost (another epoch); a cursor that is not one `changes` returned for
        this filter is a `ValueError`."""
        now = check_now_ns(now_ns)
        queue, group = check_filter("queue", queue), check_filter("group", group)
        most = check_changes_limit(limit)
        since = None if cursor is None else Cursor.decode(cursor)
        if since is not None:
            check_cursor_filter(since, self.keys.prefix, queue, group)
        return self._changes(since, now, queue, group, most)

    def rows_of(
        self, keys: Iterable[tuple[str, str, str]]
    ) -> Plan[tuple[int, list[ConsumerPresence]]]:
        """The server clock and the current rows, at it, of the named `(queue, group,
        consumer)` that are still tracked, under each group's shared TTL (what a live view
        re-reads of the rows it shows: events carry no beat of an active consumer). One
        ``HMGET`` per group and `Limits.consumers` names, in one round trip."""
        by_group: dict[tuple[str, str], list[str]] = {}
        for queue, group, consumer in keys:
            checked = check_consumer_key(queue, group, consumer)
            by_group.setdefault(checked[:2], []).append(checked[2])
        return self._rows_of(by_group)

    def _rows_of(
        self, by_group: dict[tuple[str, str], list[str]]
    ) -> Plan[tuple[int, list[ConsumerPresence]]]:
        (clock,) = yield [Command("TIME", node_key=self.keys.groups)]
        now = server_now_ns(*clock)
        if not by_group:
            return now, []
        groups = [self.keys.group(*name) for name in by_group]
        ttls = yield from self._shared_ttls(groups)
        most = self.limits.consumers
        asked = [
            (gk, names[start : start + most])
            for gk, names in zip(groups, by_group.values(), strict=True)
            for start in range(0, len(names), most)
        ]
        replies = yield [Command("HMGET", (gk.data, *names)) for gk, names in asked]
        tables: dict[GroupKeys, dict[Any, Any]] = {}
        for (gk, names), values in zip(asked, replies, strict=True):
            table = tables.setdefault(gk, {})
            for name, value in zip(names, values, strict=True):
                if value is not None:  # a field spelled as the reply is (bytes or str)
                    table[name.encode() if isinstance(value, bytes) else name] = value
        out: list[ConsumerPresence] = []
        for gk, ttl in zip(groups, ttls, strict=True):
            columns = stored_columns(gk, tables.get(gk, {}))
            out += ConsumerPresence.columns(gk.queue, gk.group, *columns, now_ns=now, ttl_ms=ttl)
        return now, out

    def snapshot_cursor(
        self, *, queue: str | None = None, group: str | None = None
    ) -> Plan[FollowSnapshot]:
        """A snapshot (under the shared TTL) and the cursor its events go on from, at one
        instant: what `follow` yields first."""
        queue, group = check_filter("queue", queue), check_filter("group", group)
        return self._snapshot_cursor(queue, group)

    def _snapshot_cursor(self, queue: str | None, group: str | None) -> Plan[FollowSnapshot]:
        _, cursor = yield from self._changes(None, None, queue, group, DEFAULT_CHANGES_LIMIT)
        now = Cursor.decode(cursor).now_ns
        rows = yield from self._collect(self.iter_snapshot(now, None, queue=queue, group=group))
        return FollowSnapshot(rows, cursor, now)

    def _changes(
        self,
        since: Cursor | None,
        now_ns: int | None,
        queue: str | None,
        group: str | None,
        limit: int,
    ) -> Plan[Changes]:
        # The epoch marker lives in the slot of the event index: TIME and GET go to one node.
        clock, marker = yield [
            Command("TIME", node_key=self.keys.events),
            Command("GET", (self.keys.epoch,)),
        ]
        epoch = None if marker is None else _text(marker)
        server_ns = server_now_ns(*clock)
        server_ms = server_ns // NS_PER_MS
        now = server_ns if now_ns is None else now_ns
        if since is None:
            ends = yield from self._log_ends(server_ms, queue)
            return Changes(
                [], Cursor(now, server_ms, ends, epoch, self.keys.prefix, queue, group).encode()
            )
        check_epoch(since, epoch)
        if since.server_ms > server_ms + LOG_LAG_MS:
            raise ValueError(
                f"cursor is not one that changes() returned: its position ({since.server_ms} ms) "
                f"is ahead of the server clock ({server_ms} ms)"
            )
        if server_ms - since.server_ms > EVENT_LOG_TTL_MS - LOG_LAG_MS:
            raise PresenceResyncRequired(
                "this cursor is older than the event logs last: take a fresh snapshot() and a "
                "fresh cursor (changes(None))"
            )
        at = since.window or Window(max(now, since.now_ns), server_ms, {}, ("", ""), None)
        events: list[Ordered] = []
        recent = dict(at.recent)
        step: Window | None = at
        if at.log is not None:
            step = yield from self._logged(since, at, recent, events, queue, group, limit)
        if step is not None and step.derived is not None and at.now_ns > since.now_ns:
            step = yield from self._crossed(since.now_ns, step, events, queue, group, limit)
        else:
            step = step if step is not None and step.log is not None else None
        if step is not None:
            middle = Cursor(
                since.now_ns,
                since.server_ms,
                since.positions,
                epoch,
                self.keys.prefix,
                queue,
                group,
            )
            cursor = middle._replace(window=step._replace(recent=recent))
            return Changes(sorted_events(events), cursor.encode(), True)
        # Places still within the lag that this window did not move keep their value.
        for log_queue, kept in since.positions.items():
            if log_queue not in recent and stream_id(kept)[0] >= at.server_ms - LOG_LAG_MS:
                recent[log_queue] = kept
        after = Cursor(at.now_ns, at.server_ms, recent, epoch, self.keys.prefix, queue, group)
        return Changes(sorted_events(events), after.encode())

    def _logged(
        self,
        since: Cursor,
        at: Window,
        recent: dict[str, str],
        events: list[Ordered],
        queue: str | None,
        group: str | None,
        limit: int,
    ) -> Plan[Window | None]:
        """The logged events after the cursor's place in each log, up to the window's
        millisecond, a log at a time in the order of their queues, into `events` until it
        holds `limit`; the places within the lag go into `recent`. Returns where the window
        stands then: in a log (not done), at the derived events (the logs are done), or None
        (the logs are done and the window needs no derived events)."""
        assert at.log is not None
        oldest = since.server_ms - LOG_LAG_MS
        listed = yield from self._recent_logs(oldest, queue)
        logs = sorted((self.keys.queue_of_events(log), log) for log in set(listed))
        reached, after = at.log
        logs = [(q, log) for q, log in logs if q >= reached]
        most = min(self.limits.consumers, limit)
        while logs:
            batch = logs[: self.limits.groups]
            starts = [
                f"({after}" if q == reached and after else self._log_start(log, since, oldest)
                for q, log in batch
            ]
            replies = yield [
                Command("XRANGE", (log, start, str(at.server_ms), "COUNT", most))
                for (_, log), start in zip(batch, starts, strict=True)
            ]
            fresh = [
                (log, start)
                for (_, log), start, entries in zip(batch, starts, replies, strict=True)
                if entries
            ]
            if fresh:  # was the log trimmed past where this reader goes on?
                infos = yield [Command("XINFO STREAM", (log,)) for log, _ in fresh]
                for (log, start), info in zip(fresh, infos, strict=True):
                    if _trimmed_past(info, start):
                        raise PresenceResyncRequired(
                            f"the event log {log} was trimmed past this cursor: take a fresh "
                            "snapshot() and a fresh cursor (changes(None))"
                        )
            for (log_queue, _), entries in zip(batch, replies, strict=True):
                last = ""
                for entry_id, fields in entries:
                    last = _text(entry_id)
                    for item in logged_events(self.keys, log_queue, entry_id, fields):
                        if group is None or item[1].group == group:
                            events.append(item)
                    if stream_id(last)[0] >= at.server_ms - LOG_LAG_MS:
                        recent[log_queue] = last
                    if len(events) >= limit:
                        return at._replace(log=(log_queue, last))
                if len(entries) == most:  # more of this log: go on from its last entry
                    reached, after = log_queue, last
                    break
            else:
                reached, after = "", ""
                done = {q for q, _ in batch}
                logs = [(q, log) for q, log in logs if q not in done]
                continue
            logs = [(q, log) for q, log in logs if q >= reached]
        return at._replace(log=None, derived=("", 0, 0, 0))

    def _recent_logs(self, oldest_ms: int, queue: str | None) -> Plan[list[str]]:
        """The event logs with an event since `oldest_ms` (one queue's, when given)."""
        if queue is not None:
            return [self.keys.queue_events(queue)]
        logs: list[str] = []
        offset, page = 0, self.limits.groups
        while True:
            (found,) = yield [
                Command(
                    "ZRANGEBYSCORE", (self.keys.events, oldest_ms, "+inf", "LIMIT", offset, page)
                )
            ]
            logs += [_text(log) for log in found]
            if len(found) < page:
                return logs
            offset += page

    def _log_ends(self, server_ms: int, queue: str | None) -> Plan[dict[str, str]]:
        """Where a new cursor goes on in each recently written log: after its last entry, so
        that what the log dropped before does not count against the cursor."""
        logs = yield from self._recent_logs(server_ms - LOG_LAG_MS, queue)
        if not logs:
            return {}
        # XINFO STREAM, not XREVRANGE: the reader's ACL role has it already (for the trim
        # check), and its last-generated-id is the place after the last entry.
        infos = yield Partial(Command("XINFO STREAM", (log,)) for log in logs)
        ends = {}
        for log, info in zip(logs, infos, strict=True):
            if isinstance(info, PresenceError):
                if "no such key" in str(info).lower():
                    continue  # the log went (expired) since it was listed: nothing to skip
                raise info
            last = _last_generated(info)
            if last is not None:
                ends[self.keys.queue_of_events(log)] = last
        return ends

    def _log_start(self, log: str, since: Cursor, oldest: int) -> str:
        """Where a reader goes on in one log: after the last entry it read, else from the
        oldest millisecond it may not have read."""
        entry = since.positions.get(self.keys.queue_of_events(log))
        return f"({entry}" if entry else f"{max(oldest, 0)}-0"

    def _crossed(
        self,
        since_ns: int,
        at: Window,
        events: list[Ordered],
        queue: str | None,
        group: str | None,
        limit: int,
    ) -> Plan[Window | None]:
        """The stale and expired events of ``(since_ns, at.now_ns]``, derived from each
        group's sorted set (a consumer whose last beat, shifted by the horizon, lies in the
        window), a group at a time in the order of the index, into `events` until it holds
        `limit`. Returns where the window stands then, or None when it is done."""
        assert at.derived is not None
        member, kind_at, score_at, skip_at = at.derived
        most = min(self.limits.consumers, limit)
        kinds = (EventKind.STALE, EventKind.EXPIRED)
        skipped: list[Skipped] = []
        while True:
            groups, going_on = yield from self._listed(
                queue, group, None, skipped, start=member or None
            )
            ttls = yield from self._ttls_for(groups, None)
            # (group, kind number, ttl, low, high, first score, how many at it to skip), in
            # the order events are given: a round reads them all at once, and the first
            # that has more than a page (or the limit) is where the next round goes on.
            reads = []
            for gk, ttl in zip(groups, ttls, strict=True):
                for number, kind in enumerate(kinds):
                    here = gk.member == member
                    if here and number < kind_at:
                        continue
                    low, high = window(kind, since_ns, at.now_ns, ttl)
                    resumed = here and number == kind_at and skip_at > 0
                    first, skip = (score_at, skip_at) if resumed else (low // 1_000, 0)
                    reads.append((gk, number, ttl, low, high, first, skip))
            found = yield [
                Command(
                    "ZRANGEBYSCORE",
                    (gk.hb, first, high // 1_000, "WITHSCORES", "LIMIT", skip, most),
                )
                for gk, _, _, _, high, first, skip in reads
            ]
            pairs = [[(_text(c), int(float(s))) for c, s in part] for part in found]
            values = yield [
                Command("HMGET", (read[0].data, *(c for c, _ in part)))
                for read, part in zip(reads, pairs, strict=True)
                if part
            ]
            stored = iter(values)
            for read, part in zip(reads, pairs, strict=True):
                if not part:
                    continue
                gk, number, ttl, low, high, first, skip = read
                score, ties = first, skip
                for (consumer, at_score), value in zip(part, next(stored), strict=True):
                    score, ties = (score, ties + 1) if at_score == score else (at_score, 1)
                    if value is None:
                        continue
                    event = group_event(kinds[number], gk, consumer, value, ttl)
                    if event is not None and low < heartbeat_of(event) <= high:
                        events.append(order(event))
                        if len(events) >= limit:
                            _report(skipped)
                            return at._replace(derived=(gk.member, number, score, ties))
                if len(part) == most:  # more of this one: the next round goes on from it
                    member, kind_at, score_at, skip_at = gk.member, number, score, ties
                    break
            else:
                if going_on is None:
                    _report(skipped)
                    return None
                # `start` is inclusive: the next page begins after this page's last group
                after_last = going_on + (b"\x00" if isinstance(going_on, bytes) else "\x00")
                member, kind_at, score_at, skip_at = after_last, 0, 0, 0

    # -- storage ----------------------------------------------------------------------

    def migrate(self) -> Plan[int]:
        """List in ``P:groups`` every group of the index of release 0.1 (``P:index``), a page
        at a time, and empty that index; returns how many groups it moved. Safe to run while
        brokers beat, and again at any time (it moves only what is left)."""
        self._writable("migrate")
        return self._migrate()

    def _migrate(self) -> Plan[int]:
        moved = 0
        legacy = self.keys.legacy_index
        while True:
            (members,) = yield [Command("SRANDMEMBER", (legacy, self.limits.groups))]
            if not members:
                return moved
            groups = [self.keys.from_legacy_member(member) for member in members]
            live = [gk for gk in groups if gk is not None]
            exists = yield [Command("EXISTS", (gk.hb,)) for gk in live]
            listed = [
                m for gk, e in zip(live, exists, strict=True) if int(e) for m in (0, gk.member)
            ]
            if listed:
                yield [Command("ZADD", (self.keys.groups, *listed))]
            yield [Command("SREM", (legacy, *members))]
            moved += len(listed) // 2

    # -- shared steps -----------------------------------------------------------------

    def _writable(self, operation: str) -> None:
        if self.read_only:
            raise PresenceReadOnlyError(
                f"{operation} writes, but this registry is read-only (read_only=True); "
                "use a registry on the primary"
            )

    def _call(
        self, name: str, keys: Sequence[str], args: Sequence[Any], *, pack: bool = False
    ) -> ScriptCall:
        """A call of ``lua/<name>.lua`` (only writes use scripts); with `pack`, carrying its
        RESP too (`ScriptCall.packed`)."""
        found = script(name)
        command = ("EVALSHA", found.sha, len(keys), *keys, *args)
        return ScriptCall(found, command, self._pack(command) if pack else None)

    def _write_keys(self, groups: Sequence[GroupKeys], *, meta: bool = False) -> list[str]:
        """The KEYS of a script: each group's sorted set, hash, index mark and event log
        (``group_keys(g)`` in lua/lib.lua) and, with `meta` (the scripts that call
        ``meta_layout()``), its hash of metadata; then, on a standalone server only, the
        index of groups and the index of event logs; a script runs on a cluster iff it gets
        no index (``INDEX`` in lua/lib.lua)."""
        if meta:
            keys = [k for gk in groups for k in (gk.hb, gk.data, gk.mark, gk.events, gk.meta)]
        else:
            keys = [key for gk in groups for key in (gk.hb, gk.data, gk.mark, gk.events)]
        if not self.clustered:
            keys += (self.keys.groups, self.keys.events, self.keys.epoch)
        return keys

    def _ttls_for(self, groups: list[GroupKeys], ttl_ms: int | None) -> Plan[list[int]]:
        """`ttl_ms` for every group, or, when it is None, each group's shared TTL."""
        if ttl_ms is not None:
            return [ttl_ms] * len(groups)
        return (yield from self._shared_ttls(groups))

    def _shared_ttls(self, groups: Sequence[GroupKeys]) -> Plan[list[int]]:
        """Each group's shared TTL (its own, else the prefix's, else the default), from what
        this planner read in the last TTL_CACHE_MS, reading the rest in one batch."""
        yield from self._refresh_shared(groups, stucks=False)
        known = self._ttls
        default = known[None][0] or DEFAULT_PRESENCE_TTL_MS
        return [known[gk.data][0] or default for gk in groups]

    def _shared_stucks(self, groups: Sequence[GroupKeys]) -> Plan[list[int]]:
        """Each group's shared progress budget (its own, else the prefix's, else
        DEFAULT_STUCK_AFTER_MS), cached and read as the TTLs are."""
        yield from self._refresh_shared(groups, stucks=True)
        known = self._stucks
        default = known[None][0] or DEFAULT_STUCK_AFTER_MS
        return [known[gk.data][0] or default for gk in groups]

    def _ttls_and_stucks(
        self, groups: Sequence[GroupKeys], ttl_ms: int | None, stuck_after_ms: int | None
    ) -> Plan[tuple[list[int], list[int]]]:
        """The TTL and the progress budget of every group: the given ones, else the shared
        ones (read in one batch when both are needed)."""
        if ttl_ms is None and stuck_after_ms is None:
            yield from self._refresh_shared(groups, ttls=True, stucks=True)
        ttls = yield from self._ttls_for(list(groups), ttl_ms)
        if stuck_after_ms is not None:
            return ttls, [stuck_after_ms] * len(groups)
        return ttls, (yield from self._shared_stucks(groups))

    def _refresh_shared(
        self,
        groups: Sequence[GroupKeys],
        *,
        ttls: bool = True,
        stucks: bool = False,
    ) -> Plan[None]:
        """Read, in one batch, the shared TTLs (and with `stucks` the progress budgets) of
        the prefix and of each group that this planner did not read in the last
        TTL_CACHE_MS."""
        limit = self._clock() - TTL_CACHE_MS * NS_PER_MS
        caches = [(self._ttls, "ttl")] if ttls else []
        if stucks:
            caches.append((self._stucks, "stuck"))
        if len(self._ttls) + len(self._stucks) + len(groups) > MAX_CACHED_GROUPS:
            self._ttls.clear()  # start over, as the single-beat cache does
            self._stucks.clear()
        asks: list[tuple[dict[str | None, tuple[int | None, int]], str | None, str]] = []
        for cache, kind in caches:
            wanted: list[str | None] = [None, *dict.fromkeys(gk.data for gk in groups)]
            for member in wanted:
                entry = cache.get(member)
                if entry is None or entry[1] < limit:
                    place = self.keys if member is None else self.keys.from_member(member)
                    asks.append((cache, member, getattr(place, kind)))
        protocol: list[Request] = []
        if self._protocol_at is None or self._protocol_at < limit:
            # The protocol version, with the shared settings (docs/protocol.md): every read
            # of the settings checks it (and a heartbeat claims it, `_claim`).
            protocol.append(Command("GET", (self.keys.protocol,)))
        if asks or protocol:
            replies = yield [*protocol, *(Command("GET", (key,)) for _, _, key in asks)]
            read_at = self._clock()
            if protocol:
                _check_protocol(self.keys.protocol, replies[len(protocol) - 1])
                self._protocol_at = read_at
            for (cache, member, key), reply in zip(asks, replies[len(protocol) :], strict=True):
                cache[member] = (_stored_ttl(key, reply), read_at)

    def _claim(self) -> Plan[None]:
        """After this planner's first beat that wrote: claim the prefix for this protocol
        version (``SET NX``; once, and never for a beat that was refused)."""
        if not self._claimed:
            yield [Command("SET", (self.keys.protocol, PROTOCOL_VERSION, "NX"))]
            self._claimed = True

    def _trusted_until(self, gk: GroupKeys) -> int:  # the TTL cache is refreshed as a whole
        """Until when (monotonic ns) the TTL this planner read for `gk` may be trusted."""
        read_at = min(self._ttls[None][1], self._ttls[gk.data][1])
        return read_at + TTL_CACHE_MS * NS_PER_MS

    def clock_ns(self) -> Plan[int]:
        """The clock every read uses when its ``now_ns`` is None: the server's ``TIME`` (on
        a cluster, that of the index's node), in nanoseconds."""
        return (yield from self._now(None))

    def _now(self, now_ns: int | None) -> Plan[int]:
        """`now_ns`, or the server clock (on a cluster, the clock of the index's node)."""
        if now_ns is not None:
            return now_ns
        (reply,) = yield [Command("TIME", node_key=self.keys.groups)]
        return server_now_ns(*reply)

    def _listed(
        self,
        queue: str | None,
        group: str | None,
        after: Any,
        skipped: list[Skipped],
        *,
        start: Any = None,
    ) -> Plan[tuple[list[GroupKeys], Any]]:
        """One page of indexed groups (of one queue, or one group) after the member `after`
        (None: from the first), or from the member `start` on, and the member the next page
        starts after (None: the last page). One group named by queue and group is read
        without the index. A member this package did not write (a foreign spelling of a
        name) is set aside in `skipped`."""
        if queue is not None and group is not None:
            return [self.keys.group(queue, group)], None
        low: Any
        low, high = self.keys.queue_range(queue) if queue is not None else ("-", "+")
        if after is not None:
            low = b"(" + after if isinstance(after, bytes) else f"({after}"
        elif start is not None:
            # a member of this listing, so within its range
            low = b"[" + start if isinstance(start, bytes) else f"[{start}"
        page = self.limits.groups
        (members,) = yield [Command("ZRANGEBYLEX", (self.keys.groups, low, high, "LIMIT", 0, page))]
        groups = []
        for member in members:
            try:
                groups.append(self.keys.from_member(member))
            except PresenceDataError as error:
                skipped.append(Skipped(_text(member), str(error)))
        last = members[-1] if len(members) == page else None
        if group is not None:
            groups = [gk for gk in groups if gk.group == group]
        return groups, last

    def _sound(
        self, groups: Sequence[GroupKeys], requests: Sequence[Request], aside: list[Skipped] | None
    ) -> Plan[list[Any]]:
        """The replies to `requests` (one per entry of `groups`); with `aside`, a data error
        (a key of another type) is None in place and its group set aside there."""
        if aside is None:
            return (yield list(requests))
        replies = yield Partial(requests)
        out: list[Any] = []
        for gk, reply in zip(groups, replies, strict=True):
            if isinstance(reply, PresenceDataError):
                aside.append(Skipped(gk.data, str(reply)))
                out.append(None)
            elif isinstance(reply, PresenceError):
                raise reply
            else:
                out.append(reply)
        return out

    def _per_queue(self, groups: list[GroupKeys]) -> list[list[GroupKeys]]:
        """Standalone: one script call for everything; cluster: one per queue (one slot)."""
        if not groups:
            return []
        if not self.clustered:
            return [groups]
        return [list(part) for _, part in groupby(groups, key=attrgetter("queue"))]


def _unique(skipped: list[Skipped]) -> tuple[Skipped, ...]:
    """What a read set aside, once per key (the first reason found for it)."""
    return tuple({item.key: item for item in reversed(skipped)}.values())[::-1]


def _report(skipped: list[Skipped]) -> None:
    """One `PresenceDataWarning` for each key a read set aside."""
    for item in _unique(skipped):
        warnings.warn(
            PresenceDataWarning(f"redis-presence set aside {item.key}: {item.reason}"),
            stacklevel=2,
        )


def _meta_of(
    gk: GroupKeys, name: str, value: Any, unreadable: dict[ConsumerKey, str]
) -> ConsumerMeta:
    """A stored metadata value as `ConsumerMeta`; one this package did not write is
    `NO_META`, with why in `unreadable`."""
    try:
        return ConsumerMeta(decode_meta(gk.meta, name, value))
    except PresenceDataError as error:
        unreadable[gk.queue, gk.group, name] = str(error)
        return NO_META


def _by_names(item: tuple[GroupKeys, list[ConsumerPresence]]) -> tuple[str, str]:
    return item[0].queue, item[0].group


def _chunks(names: list[str], size: int) -> list[list[str]]:
    return [names[i : i + size] for i in range(0, len(names), size)]


def _log_counts(info: Any) -> tuple[int, int]:
    """``(entries-added, length)`` of a log's ``XINFO STREAM`` (zeros when it is gone)."""
    if not isinstance(info, dict):
        return 0, 0
    fields = {_text(k): v for k, v in info.items()}
    return int(fields.get("entries-added", 0)), int(fields.get("length", 0))


def heartbeat_of(event: PresenceEvent) -> int:
    """The last heartbeat a derived event carries (it always carries one)."""
    return event.last_heartbeat_ns or 0


class _Refusal(NamedTuple):
    """What a script left unwritten: a whole group (`consumer` None) or one consumer of it."""

    group: int
    consumer: str | None
    error: PresenceError


def _refusals(flat: Sequence[Any]) -> list[_Refusal]:
    """A script's refusals, ``(group number, consumer or '', why)`` flat."""
    return [
        _Refusal(int(flat[i]), _text(flat[i + 1]) or None, refusal(_text(flat[i + 2])))
        for i in range(0, len(flat) - 2, 3)
    ]


def _lowest_score_ns(reply: Any) -> int | None:
    """The nanoseconds of a ``ZRANGE key 0 0 WITHSCORES`` reply's score (whole microseconds;
    None: an empty set): a flat ``[member, score]`` or, with RESP3, ``[[member, score]]``."""
    if not reply:
        return None
    first = reply[0]
    score = first[1] if isinstance(first, list | tuple) else reply[1]
    return int(float(score)) * 1_000


def _stored_min(key: str, name: Any, value: Any) -> int:
    """A stored `min_active`; anything else is a data error."""
    try:
        return check_min_active(int(value))
    except (TypeError, ValueError):
        raise PresenceDataError(
            f"{key} field {_text(name)!r:.80} holds a minimum this package did not write: "
            f"{value!r:.40}"
        ) from None


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _check_protocol(key: str, reply: Any) -> None:
    """Refuse a prefix whose ``P:protocol`` names another version (none yet is fine: a
    reader of a prefix no writer of this release claimed)."""
    if reply is not None and _text(reply) != PROTOCOL_VERSION:
        raise PresenceProtocolError(
            f"{key} says this prefix speaks protocol version {_text(reply)!r:.40}; this "
            f"package speaks version {PROTOCOL_VERSION} (docs/protocol.md)"
        )


def _stored_ttl(key: str, reply: Any) -> int | None:
    """A stored shared TTL (None when none is stored); anything else is a data error."""
    if reply is None:
        return None
    try:
        return check_ttl_ms(int(reply))
    except (TypeError, ValueError):
        raise PresenceDataError(
            f"{key} holds a TTL this package did not write: {reply!r:.40}"
        ) from None


def _last_generated(info: Any) -> str | None:
    """The id of the last entry ever added to a log (its ``XINFO STREAM``), if any."""
    if not isinstance(info, dict):
        return None
    fields = {_text(k): v for k, v in info.items()}
    last = fields.get("last-generated-id")
    if last is None:
        return None
    text = _text(last)
    return None if text == "0-0" else text


def _trimmed_past(info: Any, start: str) -> bool:
    """Whether a log (its ``XINFO STREAM``) lost entries this reader has not read: it was
    trimmed, and its first entry is past where the reader goes on."""
    if not isinstance(info, dict):
        return False
    fields = {_text(k): v for k, v in info.items()}
    added, length = int(fields.get("entries-added", 0)), int(fields.get("length", 0))
    first = fields.get("first-entry")
    if added <= length or not first:
        return False
    return stream_id(first[0]) > stream_id(start.lstrip("("))

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
``Limits.consumers`` at a time, and scripts visit at most that many consumers per call,
with a cursor carried from call to call. The index of groups (``P:groups``), and on a
Redis Cluster the protocol that keeps it without losing a live group, is written down with
its proof in ``docs/index-protocol.md``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Iterable, Sequence
from itertools import groupby
from operator import attrgetter, itemgetter
from types import TracebackType
from typing import Any, NamedTuple, TypeVar

from .errors import PresenceReadOnlyError
from .keys import INDEX_MARK_MS, GroupKeys, Keyspace
from .model import DEFAULT_PRESENCE_TTL_MS, ConsumerPresence, PresenceState, gc_paused
from .replies import server_now_ns, stored_columns, stored_heartbeat_ns
from .scripts import Script, script
from .validation import (
    Beat,
    DelayedBeat,
    check_beats,
    check_consumer_key,
    check_delayed_beats,
    check_filter,
    check_lease_count,
    check_now_ns,
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
"""Most groups one command or script call touches (an index page, one prune call)."""

MAX_CONSUMERS_PER_CALL = 1_000
"""Most consumers one command or script call visits: a group read in one ``HGETALL``, one
``HSCAN`` step, the consumers one prune call visits."""

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


# -- requests -------------------------------------------------------------------------


class ScriptCall(NamedTuple):
    """One call of one of the package's scripts, ready to send: `args` is the whole command,
    from ``EVALSHA`` (or ``EVALSHA_RO``, which a replica runs) and the SHA of `script` on.
    After ``NOSCRIPT`` an executor loads ``script.source`` and sends the same call again."""

    script: Script
    args: tuple[Any, ...]

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
"""An operation: yields batches of requests, receives their replies, returns the result."""


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
        return ScriptCall(self.script, self.args)

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


def bulk(value: bytes) -> bytes:
    """One RESP bulk string."""
    return b"$%d\r\n%s\r\n" % (len(value), value)


def _none(reply: Any) -> None:
    return None


def _now_arg(now_ns: int | None) -> str:
    """How scripts receive the instant: decimal nanoseconds, or '' for the server clock."""
    return "" if now_ns is None else str(now_ns)


def _same(value: T) -> T:
    return value


_queue = itemgetter(0)
_BeatArgs = tuple[tuple[Any, ...], tuple[Any, ...], bytes | None]


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
    command in RESP (`Single.packed`). `limits` bounds the work of every request.
    """

    __slots__ = (
        "_beat_calls",
        "_beat_script",
        "_encode",
        "_packed",
        "clustered",
        "keys",
        "limits",
        "read_only",
    )

    def __init__(
        self,
        prefix: str = "presence",
        *,
        clustered: bool = False,
        read_only: bool = False,
        encode: Callable[[Any], Any] | None = None,
        packed: bool = False,
        limits: Limits = Limits(),  # noqa: B008 (an immutable tuple)
    ) -> None:
        if not isinstance(read_only, bool):
            raise TypeError(f"read_only must be a bool, got {type(read_only).__name__}")
        if not isinstance(limits, Limits) or min(limits) < 1:
            raise ValueError(f"limits must be a Limits of positive ints, got {limits!r}")
        self.keys = Keyspace(prefix)
        self.clustered = clustered
        self.read_only = read_only
        self.limits = limits
        self._encode: Callable[[Any], Any] = encode or _same
        self._packed = packed and encode is not None and not clustered
        self._beat_calls: dict[tuple[str, str], _BeatArgs] = {}
        self._beat_script = script("heartbeat")

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
    ) -> Plan[None]:
        """Record or refresh one consumer: one call of ``heartbeat.lua`` (a `Single` plan on a
        standalone server; on a cluster, followed by the index ``ZADD`` of a new group)."""
        if self.read_only:
            self._writable("heartbeat")
        queue, group, consumer = check_consumer_key(queue, group, consumer)
        lease = check_lease_count(lease_count)
        now = "" if now_ns is None else str(check_now_ns(now_ns))
        cached = self._beat_calls.get((queue, group))
        if cached is None:
            cached = self._beat_args(queue, group)
        head, tail, resp = cached
        args = (*head, now, consumer, lease, *tail)
        if self.clustered:
            return self._beat_on_cluster(ScriptCall(self._beat_script, args), queue, group)
        if resp is None:
            return Single(self._beat_script, args, _none)
        packed = b"".join(
            (resp, bulk(now.encode()), bulk(self._encode(consumer)), bulk(b"%d" % lease))
        )
        return Single(self._beat_script, args, _none, packed)

    def _beat_on_cluster(self, call: ScriptCall, queue: str, group: str) -> Plan[None]:
        (listed,) = yield [call]
        if int(listed):  # step 1 of the index protocol: the group had no mark
            yield [Command("ZADD", (self.keys.groups, 0, self.keys.group(queue, group).member))]

    def _beat_args(self, queue: str, group: str) -> _BeatArgs:
        """What every ``heartbeat.lua`` call of one group shares, encoded: the command up to
        its ARGV, what follows the beat (the mark's lifetime on a cluster), and with `packed`
        the command up to the beat in RESP."""
        if len(self._beat_calls) >= MAX_CACHED_GROUPS:
            self._beat_calls.clear()
        keys = self._write_keys([self.keys.group(queue, group)])
        encode = self._encode
        tail = (INDEX_MARK_MS,) if self.clustered else ()
        # The command name stays a str: a cluster client looks it up by name.
        head = ("EVALSHA", self._beat_script.sha, *map(encode, (len(keys), *keys)))
        resp = None
        if self._packed:
            count = len(head) + 3  # now, consumer, lease
            resp = b"*%d\r\n" % count + b"".join(bulk(encode(arg)) for arg in head)
        cached = self._beat_calls[(queue, group)] = (head, tuple(map(encode, tail)), resp)
        return cached

    def heartbeat_many(self, beats: Iterable[Beat], now_ns: int | None = None) -> Plan[int]:
        """Write many ``(queue, group, consumer, lease_count)`` beats, each atomically; returns
        how many. One script call per queue on a cluster, one in all else, and one more per
        `Limits.beats` beats (MAX_BEATS_PER_CALL)."""
        self._writable("heartbeat_many")
        checked = check_beats(beats)
        now = check_now_ns(now_ns)
        return self._heartbeat([(*beat, 0) for beat in checked], now)

    def heartbeat_delayed(self, beats: Sequence[DelayedBeat]) -> Plan[int]:
        """Write beats that happened earlier, as a reporter collects them: each is stamped
        ``server_now - delay_us``; returns how many."""
        self._writable("heartbeat")
        return self._heartbeat(check_delayed_beats(beats), None)

    def _heartbeat(self, beats: Sequence[DelayedBeat], now_ns: int | None) -> Plan[int]:
        if not beats:
            return 0
        now = _now_arg(now_ns)
        calls: list[Request] = []
        called_groups: list[list[GroupKeys]] = []
        per_queue = (
            [list(part) for _, part in groupby(sorted(beats, key=_queue), key=_queue)]
            if self.clustered
            else [beats]
        )
        batches = (
            part[start : start + self.limits.beats]
            for part in per_queue
            for start in range(0, len(part), self.limits.beats)
        )
        for batch in batches:
            numbers: dict[GroupKeys, int] = {}
            tail: list[str | int] = []
            for queue, group, consumer, lease, delay_us in batch:
                gk = self.keys.group(queue, group)
                number = numbers.get(gk)
                if number is None:
                    number = numbers[gk] = len(numbers) + 1
                tail += (number, consumer, lease, delay_us)
            groups = list(numbers)
            args = [now, INDEX_MARK_MS, *tail]
            calls.append(self._call("heartbeat_many", self._write_keys(groups), args))
            called_groups.append(groups)
        replies = yield calls
        unlisted = [
            member
            for groups, reply in zip(called_groups, replies, strict=True)
            for number in reply
            for member in (0, groups[int(number) - 1].member)
        ]
        if unlisted:
            yield [Command("ZADD", (self.keys.groups, *unlisted))]
        return len(beats)

    def deregister(self, queue: str, group: str, consumer: str) -> Plan[bool]:
        """Forget one consumer (graceful shutdown); returns whether it was tracked."""
        self._writable("deregister")
        queue, group, consumer = check_consumer_key(queue, group, consumer)
        return self._deregister(self.keys.group(queue, group), consumer)

    def _deregister(self, gk: GroupKeys, consumer: str) -> Plan[bool]:
        (reply,) = yield [self._call("deregister", self._write_keys([gk]), [consumer])]
        existed, emptied = int(reply[0]), int(reply[1])
        if emptied:
            yield from self._unlist([gk])
        return existed == 1

    def prune_expired(
        self,
        now_ns: int | None = None,
        ttl_ms: int = DEFAULT_PRESENCE_TTL_MS,
        *,
        queue: str | None = None,
        group: str | None = None,
    ) -> Plan[int]:
        """Remove exactly the consumers a snapshot at the same `now_ns`/`ttl_ms` calls
        expired (of one queue, or one group, when given); returns how many. Each call of
        ``prune.lua`` visits at most `Limits.consumers` consumers of `Limits.groups` groups."""
        self._writable("prune_expired")
        ttl = check_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        return self._prune(now, ttl, check_filter("queue", queue), check_filter("group", group))

    def _prune(
        self, now_ns: int | None, ttl_ms: int, queue: str | None, group: str | None
    ) -> Plan[int]:
        now = str((yield from self._now(now_ns)))
        budget = self.limits.consumers
        removed = 0
        after: str | None = None
        while True:
            groups, after = yield from self._listed(queue, group, after)
            # Per queue on a cluster (one slot a call): each part goes on from where the
            # budget of its last call ran out (a group, and an offset among its ties).
            parts = [(part, 0) for part in self._per_queue(groups)]
            emptied: list[GroupKeys] = []
            while parts:
                replies = yield [
                    self._call("prune", self._write_keys(part), [now, ttl_ms, budget, offset])
                    for part, offset in parts
                ]
                going_on = []
                for (part, _), reply in zip(parts, replies, strict=True):
                    removed += int(reply[0])
                    stop, resume = int(reply[1]), int(reply[2])
                    emptied += (part[int(number) - 1] for number in reply[3:])
                    if stop:
                        going_on.append((part[stop - 1 :], resume))
                parts = going_on
            if emptied:
                yield from self._unlist(emptied)
            if after is None:
                return removed

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
        ttl_ms: int = DEFAULT_PRESENCE_TTL_MS,
        *,
        queue: str | None = None,
        group: str | None = None,
    ) -> Plan[list[ConsumerPresence]]:
        """Every tracked consumer (of one queue, or one group, when given), ordered by
        (queue, group, consumer), expired ones too: `iter_snapshot`'s rows, in order."""
        stream = self.iter_snapshot(now_ns, ttl_ms, queue=queue, group=group)
        return self._collect(stream)

    @staticmethod
    def _collect(stream: RowStream) -> Plan[list[ConsumerPresence]]:
        yield from stream.plan
        rows: list[ConsumerPresence] = []
        with gc_paused():
            for _, part in sorted(stream.groups, key=_by_names):
                rows += part
        return rows

    def iter_snapshot(
        self,
        now_ns: int | None = None,
        ttl_ms: int = DEFAULT_PRESENCE_TTL_MS,
        *,
        queue: str | None = None,
        group: str | None = None,
    ) -> RowStream:
        """The rows of `snapshot`, group by group as they are read (`RowStream`).

        Every row is aged against one instant, `now_ns` or the server clock read once first.
        The index is read a page of `Limits.groups` groups at a time; a group of at most
        `Limits.consumers` consumers is read by one ``HGETALL`` (one instant), a larger one by
        ``HSCAN`` steps of that many (each row consistent, the group not one instant); one
        round trip asks for at most `Limits.rows` consumers.
        """
        ttl = check_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        queue, group = check_filter("queue", queue), check_filter("group", group)
        groups: list[tuple[GroupKeys, list[ConsumerPresence]]] = []
        return RowStream(self._stream(now, ttl, queue, group, groups), groups)

    def _stream(
        self,
        now_ns: int | None,
        ttl_ms: int,
        queue: str | None,
        group: str | None,
        out: list[tuple[GroupKeys, list[ConsumerPresence]]],
    ) -> Plan[None]:
        now = yield from self._now(now_ns)
        after: str | None = None
        while True:
            groups, after = yield from self._listed(queue, group, after)
            if groups:
                sizes = yield [Command("HLEN", (gk.data,)) for gk in groups]
                yield from self._read(groups, [int(n) for n in sizes], now, ttl_ms, out)
            if after is None:
                return

    def _read(
        self,
        groups: list[GroupKeys],
        sizes: list[int],
        now_ns: int,
        ttl_ms: int,
        out: list[tuple[GroupKeys, list[ConsumerPresence]]],
    ) -> Plan[None]:
        """Read groups of known sizes in order, a window of them per round trip: each small
        group in one ``HGETALL``, each large one in ``HSCAN`` steps; a group goes to `out`
        once it is complete and every group before it is out."""
        most = self.limits.consumers
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
                while window and window[0].done:
                    done = window.popleft()
                    gk, columns = done.gk, stored_columns(done.gk, done.table)
                    done.table = {}
                    rows = ConsumerPresence.columns(
                        gk.queue, gk.group, *columns, now_ns=now_ns, ttl_ms=ttl_ms
                    )
                    out.append((gk, list(rows)))

    def count_active_by_group(
        self,
        now_ns: int | None = None,
        ttl_ms: int = DEFAULT_PRESENCE_TTL_MS,
        *,
        queue: str | None = None,
        group: str | None = None,
    ) -> Plan[dict[tuple[str, str], int]]:
        """Active consumers per (queue, group) (of one queue, or one group, when given),
        counted server-side in O(log n) a group; groups without one have no key."""
        ttl = check_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        return self._count(now, ttl, check_filter("queue", queue), check_filter("group", group))

    def _count(
        self, now_ns: int | None, ttl_ms: int, queue: str | None, group: str | None
    ) -> Plan[dict[tuple[str, str], int]]:
        now = yield from self._now(now_ns)
        counts: dict[tuple[str, str], int] = {}
        after: str | None = None
        while True:
            groups, after = yield from self._listed(queue, group, after)
            if groups:
                found = yield from self._active(groups, now, ttl_ms)
                counts.update(
                    ((gk.queue, gk.group), n) for gk, n in zip(groups, found, strict=True) if n
                )
            if after is None:
                return counts

    def count_active(
        self,
        queue: str,
        group: str,
        now_ns: int | None = None,
        ttl_ms: int = DEFAULT_PRESENCE_TTL_MS,
    ) -> Plan[int]:
        """Active consumers of one group (0 when it has none, or is not tracked)."""
        queue, group = check_filter("queue", queue) or "", check_filter("group", group) or ""
        ttl = check_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        return self._count_one(self.keys.group(queue, group), now, ttl)

    def _count_one(self, gk: GroupKeys, now_ns: int | None, ttl_ms: int) -> Plan[int]:
        now = yield from self._now(now_ns)
        (found,) = yield from self._active([gk], now, ttl_ms)
        return found

    def _active(self, groups: list[GroupKeys], now_ns: int, ttl_ms: int) -> Plan[list[int]]:
        """Active consumers of each group: ``ZCOUNT`` of the scores above the horizon's
        microsecond, plus those on it whose nanosecond rest is above the horizon's (read
        from their stored values, `Limits.consumers` at a time)."""
        horizon = PresenceState.horizons_ns(now_ns, ttl_ms)[0]
        edge = horizon // 1_000
        most = self.limits.consumers
        replies = yield [
            request
            for gk in groups
            for request in (
                Command("ZCOUNT", (gk.hb, f"({edge}", "+inf")),
                Command("ZRANGEBYSCORE", (gk.hb, edge, edge, "LIMIT", 0, most)),
            )
        ]
        counts = [int(n) for n in replies[0::2]]
        ties = {i: (0, list(names)) for i, names in enumerate(replies[1::2]) if names}
        while ties:  # consumers on the horizon's microsecond: rare, and read a page at a time
            order = list(ties)
            batch: list[Request] = []
            for i in order:
                offset, names = ties[i]
                batch.append(Command("HMGET", (groups[i].data, *names)))
                if len(names) == most:
                    batch.append(
                        Command(
                            "ZRANGEBYSCORE",
                            (groups[i].hb, edge, edge, "LIMIT", offset + most, most),
                        )
                    )
            answers = iter((yield batch))
            going_on: dict[int, tuple[int, list[Any]]] = {}
            for i in order:
                offset, names = ties[i]
                for value in next(answers):
                    if value is not None and stored_heartbeat_ns(groups[i], value) > horizon:
                        counts[i] += 1
                if len(names) == most:
                    more = list(next(answers))
                    if more:
                        going_on[i] = (offset + most, more)
            ties = going_on
        return counts

    def size(self) -> Plan[int]:
        """How many consumers are tracked, in every state."""
        total = 0
        after: str | None = None
        while True:
            groups, after = yield from self._listed(None, None, after)
            if groups:
                cards = yield [Command("ZCARD", (gk.hb,)) for gk in groups]
                total += sum(int(n) for n in cards)
            if after is None:
                return total

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

    def _call(self, name: str, keys: Sequence[str], args: Sequence[str | int]) -> ScriptCall:
        """A call of ``lua/<name>.lua`` (only writes use scripts)."""
        found = script(name)
        return ScriptCall(found, ("EVALSHA", found.sha, len(keys), *keys, *args))

    def _write_keys(self, groups: Sequence[GroupKeys]) -> list[str]:
        """The KEYS of a script: each group's sorted set, hash and index mark
        (``group_keys(g)`` in lua/lib.lua), then, on a standalone server only, the index;
        a script runs on a cluster iff it gets no index (``INDEX`` in lua/lib.lua)."""
        keys = [key for gk in groups for key in (gk.hb, gk.data, gk.mark)]
        if not self.clustered:
            keys.append(self.keys.groups)
        return keys

    def _now(self, now_ns: int | None) -> Plan[int]:
        """`now_ns`, or the server clock (on a cluster, the clock of the index's node)."""
        if now_ns is not None:
            return now_ns
        (reply,) = yield [Command("TIME", node_key=self.keys.groups)]
        return server_now_ns(*reply)

    def _listed(
        self, queue: str | None, group: str | None, after: str | None
    ) -> Plan[tuple[list[GroupKeys], str | None]]:
        """One page of indexed groups (of one queue, or one group) after the member `after`
        (None: from the first), and the member the next page starts after (None: the last
        page). One group named by queue and group is read without the index."""
        if queue is not None and group is not None:
            return [self.keys.group(queue, group)], None
        low, high = self.keys.queue_range(queue) if queue is not None else ("-", "+")
        if after is not None:
            low = f"({after}"
        page = self.limits.groups
        (members,) = yield [Command("ZRANGEBYLEX", (self.keys.groups, low, high, "LIMIT", 0, page))]
        groups = [self.keys.from_member(member) for member in members]
        last = groups[-1].member if len(groups) == page else None
        if group is not None:
            groups = [gk for gk in groups if gk.group == group]
        return groups, last

    def _per_queue(self, groups: list[GroupKeys]) -> list[list[GroupKeys]]:
        """Standalone: one script call for everything; cluster: one per queue (one slot)."""
        if not groups:
            return []
        if not self.clustered:
            return [groups]
        return [list(part) for _, part in groupby(groups, key=attrgetter("queue"))]


def _by_names(item: tuple[GroupKeys, list[ConsumerPresence]]) -> tuple[str, str]:
    return item[0].queue, item[0].group

"""I/O-free plans of every operation: what to send to Redis, and what the replies mean.

A plan (`Plan`) is a generator: it yields a batch of requests (`ScriptCall`, `Command`,
`Transaction`), receives their replies in order, and returns the operation's result. The
`Planner`'s public methods check their arguments at once (`TypeError` / `ValueError`, or
`PresenceReadOnlyError` for a write through a read-only planner) and return the plan, so a
bad call sends nothing. Nothing here imports a driver or does I/O:
`RedisPresenceRegistry.execute` and `AsyncRedisPresenceRegistry.execute` run any plan, and
a test can step one batch at a time.

The index of groups (``P:index``), and on a Redis Cluster the protocol that keeps it
without losing a live group, is written down with its proof in ``docs/index-protocol.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Sequence
from itertools import groupby
from operator import attrgetter, itemgetter
from types import TracebackType
from typing import Any, NamedTuple, TypeVar

from .errors import PresenceReadOnlyError
from .keys import INDEX_MARK_MS, GroupKeys, Keyspace
from .model import DEFAULT_PRESENCE_TTL_MS, ConsumerPresence, gc_paused
from .replies import server_now_ns, stored_columns
from .scripts import Script, script
from .validation import (
    Beat,
    DelayedBeat,
    check_beats,
    check_consumer_key,
    check_delayed_beats,
    check_lease_count,
    check_now_ns,
    check_ttl_ms,
)

T = TypeVar("T")

MAX_BEATS_PER_CALL = 1_000
"""Most beats in one heartbeat script call: bounds how long one call holds the server (a
few ms); a larger batch is split, one more call per thousand beats."""

MAX_CACHED_GROUPS = 4_096
"""Most groups whose single-beat call a planner keeps ready (it starts over when full)."""


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


class Transaction(NamedTuple):
    """Plain commands sent as one ``MULTI``/``EXEC`` (on a cluster, all keys in one slot);
    the reply is the list of their replies."""

    commands: tuple[Command, ...]


Request = ScriptCall | Command | Transaction
Plan = Generator[list[Request], list[Any], T]
"""An operation: yields batches of requests, receives their replies, returns the result."""


class Single(Generator[list[Request], list[Any], T]):
    """A plan of exactly one script call (the single heartbeat): ``ScriptCall(script,
    args)``. It steps like any plan; an executor may instead send `args` itself and take
    `then(reply)` as the result, which saves running a generator (and building the
    `ScriptCall`) on the hottest path of all."""

    __slots__ = ("_sent", "args", "script", "then")

    def __init__(self, script: Script, args: tuple[Any, ...], then: Callable[[Any], T]) -> None:
        self.script = script
        self.args = args
        self.then = then
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


def _none(reply: Any) -> None:
    return None


def _now_arg(now_ns: int | None) -> str:
    """How scripts receive the instant: decimal nanoseconds, or '' for the server clock."""
    return "" if now_ns is None else str(now_ns)


def _same(value: T) -> T:
    return value


_by_queue_group = attrgetter("queue", "group")
_queue = itemgetter(0)
_BeatArgs = tuple[tuple[Any, ...], tuple[Any, ...]]


class Planner:
    """Plans every operation for one key prefix, on a standalone server or a cluster.

    `read_only` refuses writes (`PresenceReadOnlyError`, before anything is planned) and
    sends read scripts with ``EVALSHA_RO``. `encode` is the client's argument encoder
    (``client.get_encoder().encode``), which the single-beat call applies once per group to
    what it keeps ready.
    """

    __slots__ = ("_beat_calls", "_beat_script", "_encode", "clustered", "keys", "read_only")

    def __init__(
        self,
        prefix: str = "presence",
        *,
        clustered: bool = False,
        read_only: bool = False,
        encode: Callable[[Any], Any] | None = None,
    ) -> None:
        if not isinstance(read_only, bool):
            raise TypeError(f"read_only must be a bool, got {type(read_only).__name__}")
        self.keys = Keyspace(prefix)
        self.clustered = clustered
        self.read_only = read_only
        self._encode: Callable[[Any], Any] = encode or _same
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
        standalone server; on a cluster, followed by the index ``SADD`` of a new group)."""
        if self.read_only:
            self._writable("heartbeat")
        queue, group, consumer = check_consumer_key(queue, group, consumer)
        lease = check_lease_count(lease_count)
        now = "" if now_ns is None else str(check_now_ns(now_ns))
        cached = self._beat_calls.get((queue, group))
        if cached is None:
            cached = self._beat_args(queue, group)
        head, tail = cached
        args = (*head, now, consumer, lease, *tail)
        if not self.clustered:
            return Single(self._beat_script, args, _none)
        return self._beat_on_cluster(ScriptCall(self._beat_script, args), queue, group)

    def _beat_on_cluster(self, call: ScriptCall, queue: str, group: str) -> Plan[None]:
        (listed,) = yield [call]
        if int(listed):  # step 1 of the index protocol: the group had no mark
            yield [Command("SADD", (self.keys.index, self.keys.group(queue, group).member))]

    def _beat_args(self, queue: str, group: str) -> _BeatArgs:
        """What every ``heartbeat.lua`` call of one group shares, encoded: the command up to
        its ARGV, and the ARGV after the beat (the index member on a standalone server, the
        mark's lifetime on a cluster)."""
        if len(self._beat_calls) >= MAX_CACHED_GROUPS:
            self._beat_calls.clear()
        gk = self.keys.group(queue, group)
        keys = self._write_keys([gk])
        tail = (INDEX_MARK_MS,) if self.clustered else (gk.member,)
        encode = self._encode
        # The command name stays a str: a cluster client looks it up by name.
        head = ("EVALSHA", self._beat_script.sha, *map(encode, (len(keys), *keys)))
        cached = self._beat_calls[(queue, group)] = (head, tuple(map(encode, tail)))
        return cached

    def heartbeat_many(self, beats: Iterable[Beat], now_ns: int | None = None) -> Plan[int]:
        """Write many ``(queue, group, consumer, lease_count)`` beats, each atomically; returns
        how many. One script call per queue on a cluster, one in all else (and one more per
        MAX_BEATS_PER_CALL beats)."""
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
            part[start : start + MAX_BEATS_PER_CALL]
            for part in per_queue
            for start in range(0, len(part), MAX_BEATS_PER_CALL)
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
            members = [gk.member for gk in groups]
            args = [now, INDEX_MARK_MS, *members, *tail]
            calls.append(self._call("heartbeat_many", self._write_keys(groups), args))
            called_groups.append(groups)
        replies = yield calls
        unlisted = [
            groups[int(number) - 1].member
            for groups, reply in zip(called_groups, replies, strict=True)
            for number in reply
        ]
        if unlisted:
            yield [Command("SADD", (self.keys.index, *unlisted))]
        return len(beats)

    def deregister(self, queue: str, group: str, consumer: str) -> Plan[bool]:
        """Forget one consumer (graceful shutdown); returns whether it was tracked."""
        self._writable("deregister")
        queue, group, consumer = check_consumer_key(queue, group, consumer)
        return self._deregister(self.keys.group(queue, group), consumer)

    def _deregister(self, gk: GroupKeys, consumer: str) -> Plan[bool]:
        (reply,) = yield [self._call("deregister", self._write_keys([gk]), [consumer, gk.member])]
        existed, emptied = int(reply[0]), int(reply[1])
        if emptied:
            yield from self._unlist([gk])
        return existed == 1

    def prune_expired(
        self, now_ns: int | None = None, ttl_ms: int = DEFAULT_PRESENCE_TTL_MS
    ) -> Plan[int]:
        """Remove exactly the consumers a snapshot at the same `now_ns`/`ttl_ms` calls
        expired; returns how many."""
        self._writable("prune_expired")
        ttl = check_ttl_ms(ttl_ms)
        return self._prune(check_now_ns(now_ns), ttl)

    def _prune(self, now_ns: int | None, ttl_ms: int) -> Plan[int]:
        groups = yield from self._indexed_groups()
        if not groups:
            return 0
        now = _now_arg(now_ns)
        parts = self._per_queue(groups)
        replies = yield [
            self._call("prune", self._write_keys(part), [now, ttl_ms, *(gk.member for gk in part)])
            for part in parts
        ]
        removed = 0
        emptied: list[GroupKeys] = []
        for part, reply in zip(parts, replies, strict=True):
            removed += int(reply[0])
            emptied += (part[int(number) - 1] for number in reply[1:])
        if emptied:
            yield from self._unlist(emptied)
        return removed

    def _unlist(self, groups: list[GroupKeys]) -> Plan[None]:
        """Step 2 of the cluster index protocol (docs/index-protocol.md): ``SREM`` the groups
        a script left empty, re-check each (``EXISTS``), ``SADD`` back those a racing
        heartbeat filled again. Without the re-check a live group can be lost."""
        yield [Command("SREM", (self.keys.index, *(gk.member for gk in groups)))]
        alive = yield [Command("EXISTS", (gk.hb,)) for gk in groups]
        back = [gk.member for gk, exists in zip(groups, alive, strict=True) if int(exists)]
        if back:
            yield [Command("SADD", (self.keys.index, *back))]

    # -- reads ------------------------------------------------------------------------

    def snapshot(
        self, now_ns: int | None = None, ttl_ms: int = DEFAULT_PRESENCE_TTL_MS
    ) -> Plan[list[ConsumerPresence]]:
        """Every tracked consumer, ordered by (queue, group, consumer), expired ones too.

        The hashes are read in one ``MULTI``/``EXEC`` (one per queue on a cluster): as atomic
        as a script, but Redis sends them as they are instead of copying every field into
        Lua and back.
        """
        ttl = check_ttl_ms(ttl_ms)
        return self._snapshot(check_now_ns(now_ns), ttl)

    def _snapshot(self, now_ns: int | None, ttl_ms: int) -> Plan[list[ConsumerPresence]]:
        groups = yield from self._indexed_groups()
        if not groups:
            return []
        parts = self._per_queue(groups)
        # Without now_ns, ages are measured on the clock of the node holding the queue, the
        # same clock that stamped its heartbeats: TIME inside the transaction, or, on a
        # cluster (whose transactions take no keyless command), sent to that node after it.
        clock = now_ns is None
        batch: list[Request] = []
        for part in parts:
            reads = tuple(Command("HGETALL", (gk.data,)) for gk in part)
            if clock and not self.clustered:
                reads = (Command("TIME"), *reads)
            batch.append(Transaction(reads))
            if clock and self.clustered:
                batch.append(Command("TIME", node_key=part[0].data))
        replies = iter((yield batch))
        rows: list[ConsumerPresence] = []
        with gc_paused():
            for part in parts:
                hashes = next(replies)
                if now_ns is not None:
                    now = now_ns
                elif self.clustered:
                    now = server_now_ns(*next(replies))
                else:
                    now = server_now_ns(*hashes[0])
                    hashes = hashes[1:]
                for gk, reply in zip(part, hashes, strict=True):
                    rows += ConsumerPresence.columns(
                        gk.queue, gk.group, *stored_columns(gk, reply), now_ns=now, ttl_ms=ttl_ms
                    )
        return rows

    def count_active_by_group(
        self, now_ns: int | None = None, ttl_ms: int = DEFAULT_PRESENCE_TTL_MS
    ) -> Plan[dict[tuple[str, str], int]]:
        """Active consumers per (queue, group), counted server-side in O(log n) a group;
        groups without one have no key."""
        ttl = check_ttl_ms(ttl_ms)
        return self._count(check_now_ns(now_ns), ttl)

    def _count(self, now_ns: int | None, ttl_ms: int) -> Plan[dict[tuple[str, str], int]]:
        groups = yield from self._indexed_groups()
        if not groups:
            return {}
        now = _now_arg(now_ns)
        parts = self._per_queue(groups)
        replies = yield [
            self._call("count", self._group_keys(part), [now, ttl_ms]) for part in parts
        ]
        return {
            (gk.queue, gk.group): int(n)
            for part, reply in zip(parts, replies, strict=True)
            for gk, n in zip(part, reply, strict=True)
            if int(n)
        }

    def size(self) -> Plan[int]:
        """How many consumers are tracked, in every state."""
        groups = yield from self._indexed_groups()
        if not groups:
            return 0
        cards = yield [Command("ZCARD", (gk.hb,)) for gk in groups]
        return sum(int(n) for n in cards)

    # -- shared steps -----------------------------------------------------------------

    def _writable(self, operation: str) -> None:
        if self.read_only:
            raise PresenceReadOnlyError(
                f"{operation} writes, but this registry is read-only (read_only=True); "
                "use a registry on the primary"
            )

    def _call(self, name: str, keys: Sequence[str], args: Sequence[str | int]) -> ScriptCall:
        """A call of ``lua/<name>.lua``: ``EVALSHA``, or ``EVALSHA_RO`` when read-only (only
        reads are ever planned then)."""
        found = script(name)
        command = "EVALSHA_RO" if self.read_only else "EVALSHA"
        return ScriptCall(found, (command, found.sha, len(keys), *keys, *args))

    @staticmethod
    def _group_keys(groups: Sequence[GroupKeys]) -> list[str]:
        """The KEYS of a script for these groups: each group's sorted set, hash and index
        mark (``group_keys(g)`` in lua/lib.lua)."""
        return [key for gk in groups for key in (gk.hb, gk.data, gk.mark)]

    def _write_keys(self, groups: Sequence[GroupKeys]) -> list[str]:
        """The KEYS of a write script: `_group_keys`, then, on a standalone server only, the
        index; a script runs on a cluster iff it gets no index (``INDEX`` in lua/lib.lua)."""
        keys = self._group_keys(groups)
        if not self.clustered:
            keys.append(self.keys.index)
        return keys

    def _indexed_groups(self) -> Plan[list[GroupKeys]]:
        (members,) = yield [Command("SMEMBERS", (self.keys.index,))]
        return sorted((self.keys.from_member(m) for m in members), key=_by_queue_group)

    def _per_queue(self, groups: list[GroupKeys]) -> list[list[GroupKeys]]:
        """Standalone: one script call for everything; cluster: one per queue (one slot)."""
        if not self.clustered:
            return [groups]
        return [list(part) for _, part in groupby(groups, key=attrgetter("queue"))]

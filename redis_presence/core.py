"""I/O-free plans of every Redis operation, shared by the sync and async registries.

A plan is a generator: it yields a batch of requests (script calls, plain commands or
transactions), receives their replies in order, and finally returns the operation's
result. The registries only execute batches (`redis.py`, `aio.py`); validation, key
layout, argument encoding, the cluster index protocol and reply decoding all live here.

Index protocol
--------------
``P:index`` lists every (queue, group) that has a tracked consumer. Readers find the
groups there, then read each queue's keys. On a standalone server the index shares the
node with every queue, so each script updates it atomically with the group (the index
key is passed as the last KEY), and a heartbeat lists its group whenever it is not listed:
no index marks are kept there. On a cluster the index lives in another slot than the
queues, so it is maintained by the following protocol (``clustered=True``):

1. heartbeat: the per-queue script writes the beats, then for every group without an
   index mark it sets the mark (``SET ... PX INDEX_MARK_MS``) and reports the group;
   the caller then ``SADD``\\s those groups to the index.
2. prune / deregister: when the per-queue script leaves a group empty (prune: finds it
   empty, whether or not it removed anyone) it deletes the group's keys and its mark
   (atomically, in the queue's slot) and reports the group; the caller then
   ``SREM``\\s it from the index, *then* re-checks the group (``EXISTS hb``) and
   ``SADD``\\s it back if it is not empty.

Invariant (every script keeps it atomically in the queue's slot): a group with a mark is
not empty. Only a heartbeat sets a mark, and a script that leaves a group empty deletes it.

Why no live consumer is lost: suppose group X is non-empty once the removers and the
heartbeats that touched it have all returned, but X is not in the index. There was an
index write on X (a heartbeat into an empty X finds no mark and lists X), and the last
one was some remover R's ``SREM`` (a later ``SADD`` would have listed it).
R's re-check ran after its ``SREM``; had X been non-empty then, R would have re-added
it, so X was empty at the re-check and, by the invariant, had no mark. X is non-empty
now, so a heartbeat H' wrote it after the re-check; the first such H' found no mark,
set it and reported X, and H' ``SADD``\\s X after its script, i.e. after R's ``SREM``: a
contradiction. A caller that dies between its script and its index write leaves the
group unlisted only until the mark expires (INDEX_MARK_MS); the next heartbeat after
that lists it again.

The converse can fail for a while: a first heartbeat's ``SADD`` may land after a
deregister emptied the group again and finished its re-check, leaving an empty group
listed. Readers find no rows there, and the next ``prune_expired`` unlists it, because
prune reports every empty group it visits. ``tests/test_cluster_protocol.py`` runs every
interleaving of these steps against a real cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from itertools import groupby
from operator import attrgetter, itemgetter
from typing import Any, TypeGuard, TypeVar

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException, RedisError

from .errors import PresenceReadOnlyError
from .keys import INDEX_MARK_MS, GroupKeys, Keyspace
from .model import ConsumerPresence, gc_paused
from .scripts import SCRIPT_NAMES, server_now_ns, source, stored_columns
from .validation import (
    check_beats,
    check_lease_count,
    check_now_ns,
    check_triple,
    check_ttl_ms,
)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Eval:
    """Run one of the package's scripts (``lua/<script>.lua``)."""

    script: str
    keys: Sequence[str]
    args: Sequence[str | int]
    read_only: bool = False


@dataclass(frozen=True, slots=True)
class EvalSha:
    """Send one prebuilt ``EVALSHA`` or ``EVALSHA_RO`` command (`args`, from its name on);
    after ``NOSCRIPT``, load the package's `script` and send it again."""

    script: str
    args: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Command:
    """Send one plain Redis command; a keyless one with `node_key` goes, on a cluster, to
    the node that holds that key."""

    name: str
    args: tuple[str | bytes | int, ...]
    node_key: str | None = None


@dataclass(frozen=True, slots=True)
class Transaction:
    """Send plain commands as one ``MULTI``/``EXEC`` (on a cluster: all keys in one slot);
    the reply is the list of their replies."""

    commands: tuple[Command, ...]


DRIVER_ERRORS = (RedisError, RedisClusterException)
"""What redis-py raises for a Redis-side failure (its cluster errors are not all `RedisError`)."""

Request = Eval | EvalSha | Command | Transaction
Plan = Generator[list[Request], list[Any], T]

DelayedBeat = tuple[str, str, str, int, int]
"""A validated beat: ``(queue, group, consumer, lease_count, delay_us)``."""

_by_queue_group = attrgetter("queue", "group")
_queue = itemgetter(0)

MAX_BEATS_PER_CALL = 1_000
"""Most beats in one heartbeat script call: bounds how long one call holds the server (a
few ms); a larger batch takes one more call per thousand beats."""

MAX_CACHED_GROUPS = 4_096
"""Most groups whose single-beat call a planner keeps ready (it starts over when full)."""


_BeatArgs = tuple[tuple[Any, ...], tuple[Any, ...]]


def _same(value: T) -> T:
    return value


def _now_arg(now_ns: int | None) -> str:
    return "" if now_ns is None else str(now_ns)


def is_cluster_client(client: Any) -> bool:
    """Whether `client` is a redis-py cluster client (sync or asyncio)."""
    return isinstance(client, RedisCluster | AsyncRedisCluster)


def all_scripts(batch: Sequence[Request]) -> TypeGuard[Sequence[Eval | EvalSha]]:
    """Whether every request of a batch is a script call."""
    return all(isinstance(request, Eval | EvalSha) for request in batch)


def pipelinable(batch: Sequence[Request]) -> TypeGuard[Sequence[Command]]:
    """Whether a batch is best sent as one pipeline: several plain commands, no script, no
    transaction, none routed by `node_key`."""
    return len(batch) > 1 and all(
        isinstance(request, Command) and request.node_key is None for request in batch
    )


class Planner:
    """Builds the plans for one key prefix, on a standalone server or a cluster."""

    __slots__ = ("_beat_calls", "_encode", "clustered", "keys")

    def __init__(
        self, keys: Keyspace, *, clustered: bool, encode: Callable[[Any], Any] | None = None
    ) -> None:
        """`encode` is the client's argument encoder (``client.get_encoder().encode``), which
        the single-beat path applies once per group to what it caches."""
        self.keys = keys
        self.clustered = clustered
        self._encode: Callable[[Any], Any] = encode or _same
        self._beat_calls: dict[tuple[str, str], _BeatArgs] = {}

    # -- writes ---------------------------------------------------------------------

    def beat_call(
        self, sha: str, queue: str, group: str, consumer: str, lease: int, now_ns: int | None
    ) -> tuple[Any, ...]:
        """One validated beat as the arguments of one ``EVALSHA`` of ``heartbeat.lua`` (the
        lean single-consumer script `sha` names). What is the same for every beat of a group
        (the KEYS, the index member or the mark's lifetime) is cached, already encoded. A
        reply of 1 asks for `beat_listing`."""
        cached = self._beat_calls.get((queue, group))
        if cached is None:
            cached = self._beat_args(queue, group)
        head, tail = cached
        return ("EVALSHA", sha, *head, _now_arg(now_ns), consumer, lease, *tail)

    def beat_listing(self, queue: str, group: str) -> Command:
        """What follows a `beat_call` that replied 1 (cluster step 1 for a group without a
        mark): the ``SADD`` that lists the group."""
        return Command("SADD", (self.keys.index, self.keys.group(queue, group).member))

    def _beat_args(self, queue: str, group: str) -> _BeatArgs:
        """``(numkeys, *KEYS)`` and the ARGV after the beat of a ``heartbeat.lua`` call for one
        group, encoded. Standalone: KEYS[3] is the index and
        ARGV[4] the member; cluster: KEYS[3] is the group's mark, ARGV[4:5] ``''`` and the
        mark's lifetime."""
        if len(self._beat_calls) >= MAX_CACHED_GROUPS:
            self._beat_calls.clear()
        gk = self.keys.group(queue, group)
        head: tuple[str | int, ...]
        tail: tuple[str | int, ...]
        if self.clustered:
            head, tail = (3, gk.hb, gk.data, gk.mark), ("", INDEX_MARK_MS)
        else:
            head, tail = (3, gk.hb, gk.data, self.keys.index), (gk.member,)
        encode = self._encode
        cached = self._beat_calls[(queue, group)] = (
            tuple(map(encode, head)),
            tuple(map(encode, tail)),
        )
        return cached

    def heartbeat(self, beats: Sequence[DelayedBeat], now_ns: int | None) -> Plan[int]:
        """Write validated beats: one script call per queue on a cluster, one in all else
        (and one more per MAX_BEATS_PER_CALL beats)."""
        if not beats:
            return 0
        now = _now_arg(now_ns)
        calls: list[Eval] = []
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
            keys: list[str] = []
            tail: list[str | int] = []
            for queue, group, consumer, lease, delay_us in batch:
                gk = self.keys.group(queue, group)
                number = numbers.get(gk)
                if number is None:
                    number = numbers[gk] = len(numbers) + 1
                    keys += (gk.hb, gk.data, gk.mark)
                tail += (number, consumer, lease, delay_us)
            if not self.clustered:
                keys.append(self.keys.index)
            members = [gk.member for gk in numbers]
            calls.append(
                Eval("heartbeat_many", keys, [now, len(numbers), INDEX_MARK_MS, *members, *tail])
            )
            called_groups.append(list(numbers))
        replies = yield list(calls)
        unlisted = [
            groups[int(number) - 1].member
            for groups, reply in zip(called_groups, replies, strict=True)
            for number in reply
        ]
        if unlisted:
            yield [Command("SADD", (self.keys.index, *unlisted))]
        return len(beats)

    def prune_expired(self, now_ns: int | None, ttl_ms: int) -> Plan[int]:
        """Remove the expired consumers of every indexed group; returns how many."""
        groups = yield from self._indexed_groups()
        if not groups:
            return 0
        now = _now_arg(now_ns)
        parts = self._per_queue(groups)
        calls: list[Request] = []
        for part in parts:
            keys = [key for gk in part for key in (gk.hb, gk.data, gk.mark)]
            if not self.clustered:
                keys.append(self.keys.index)
            members = [gk.member for gk in part]
            calls.append(Eval("prune", keys, [now, ttl_ms, len(part), *members]))
        replies = yield calls
        removed = 0
        emptied: list[GroupKeys] = []
        for part, reply in zip(parts, replies, strict=True):
            removed += int(reply[0])
            emptied += (part[int(number) - 1] for number in reply[1:])
        if emptied:
            yield from self._unlist(emptied)
        return removed

    def deregister(self, queue: str, group: str, consumer: str) -> Plan[bool]:
        """Forget one consumer; returns whether it was tracked."""
        gk = self.keys.group(queue, group)
        keys = [gk.hb, gk.data, gk.mark]
        if not self.clustered:
            keys.append(self.keys.index)
        (reply,) = yield [Eval("deregister", keys, [consumer, gk.member])]
        existed, emptied = int(reply[0]), int(reply[1])
        if emptied:
            yield from self._unlist([gk])
        return existed == 1

    def _unlist(self, groups: list[GroupKeys]) -> Plan[None]:
        """Cluster step 2 of the index protocol: SREM, re-check, SADD back the non-empty."""
        yield [Command("SREM", (self.keys.index, *(gk.member for gk in groups)))]
        alive = yield [Command("EXISTS", (gk.hb,)) for gk in groups]
        back = [gk.member for gk, exists in zip(groups, alive, strict=True) if int(exists)]
        if back:
            yield [Command("SADD", (self.keys.index, *back))]

    # -- reads ----------------------------------------------------------------------

    def snapshot(self, now_ns: int | None, ttl_ms: int) -> Plan[list[ConsumerPresence]]:
        """Every tracked consumer, ordered by (queue, group, consumer).

        The hashes are read in one ``MULTI``/``EXEC`` (one per queue on a cluster): as atomic
        as a script, but Redis sends them as they are instead of copying every field into
        Lua and back (about a third of the server time, during which it serves no one else).
        """
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
                reads = (Command("TIME", ()), *reads)
            batch.append(Transaction(reads))
            if clock and self.clustered:
                batch.append(Command("TIME", (), node_key=part[0].data))
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
                    columns = stored_columns(gk, reply)
                    rows += ConsumerPresence.columns(
                        gk.queue, gk.group, *columns, now_ns=now, ttl_ms=ttl_ms
                    )
        return rows

    def count_active_by_group(
        self, now_ns: int | None, ttl_ms: int
    ) -> Plan[dict[tuple[str, str], int]]:
        """Active consumers per (queue, group), counted server-side in O(log n) a group."""
        groups = yield from self._indexed_groups()
        if not groups:
            return {}
        now = _now_arg(now_ns)
        parts = self._per_queue(groups)
        replies = yield [
            Eval(
                "count",
                [key for gk in part for key in (gk.hb, gk.data)],
                [now, ttl_ms],
                read_only=True,
            )
            for part in parts
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

    def _indexed_groups(self) -> Plan[list[GroupKeys]]:
        (members,) = yield [Command("SMEMBERS", (self.keys.index,))]
        return sorted((self.keys.from_member(m) for m in members), key=_by_queue_group)

    def _per_queue(self, groups: list[GroupKeys]) -> list[list[GroupKeys]]:
        """Standalone: one script call for everything; cluster: one per queue (one slot)."""
        if not self.clustered:
            return [groups]
        return [list(part) for _, part in groupby(groups, key=attrgetter("queue"))]


class PlannedRegistry:
    """What the sync and async Redis registries share: set-up, validation and plans.

    The ``_plan_*`` methods check their arguments at once (raising `TypeError` /
    `ValueError`, or `PresenceReadOnlyError` for a write through a ``read_only``
    registry, before anything is sent) and return the plan; the subclasses in `redis.py`
    and `aio.py` only execute its batches.
    """

    def __init__(self, client: Any, *, prefix: str = "presence", read_only: bool = False) -> None:
        if not isinstance(read_only, bool):
            raise TypeError(f"read_only must be a bool, got {type(read_only).__name__}")
        self._client = client
        get_encoder = getattr(client, "get_encoder", None)
        self._plans = Planner(
            Keyspace(prefix),
            clustered=is_cluster_client(client),
            encode=get_encoder().encode if get_encoder is not None else None,
        )
        # redis-py wraps each source once per client; a `Script` reloads after NOSCRIPT. The
        # single-beat path and EVALSHA_RO send by SHA themselves (EvalSha) and reload the same.
        self._scripts = {name: client.register_script(source(name)) for name in SCRIPT_NAMES}
        self._beat_sha: str = self._scripts["heartbeat"].sha
        self._read_only = read_only
        self._owns_client = False

    @property
    def prefix(self) -> str:
        """The key prefix; registries with different prefixes never see each other."""
        return self._plans.keys.prefix

    @property
    def client(self) -> Any:
        """The redis-py client this registry talks through."""
        return self._client

    @property
    def read_only(self) -> bool:
        """Whether this registry only reads (snapshot, counts, size) and refuses writes."""
        return self._read_only

    def _writable(self, operation: str) -> None:
        if self._read_only:
            raise PresenceReadOnlyError(
                f"{operation} writes, but this registry is read-only (read_only=True); "
                "use a registry on the primary"
            )

    @property
    def clustered(self) -> bool:
        """Whether the client is a Redis Cluster client (per-queue scripts, index protocol)."""
        return self._plans.clustered

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._client!r}, prefix={self.prefix!r})"

    def _sha_call(self, request: Eval | EvalSha) -> EvalSha:
        """A script call as one prebuilt ``EVALSHA`` (``EVALSHA_RO`` for a read-only
        registry), as `_eval_sha` sends it."""
        if isinstance(request, EvalSha):
            return request
        if self._read_only:
            return self._read_only_call(request)
        sha = self._scripts[request.script].sha
        return EvalSha(
            request.script, ("EVALSHA", sha, len(request.keys), *request.keys, *request.args)
        )

    def _read_only_call(self, request: Eval) -> EvalSha:
        """A read-only registry's script call, as ``EVALSHA_RO`` (runs on a replica)."""
        if not request.read_only:
            raise PresenceReadOnlyError(f"{request.script} writes; this registry is read-only")
        sha = self._scripts[request.script].sha
        return EvalSha(
            request.script, ("EVALSHA_RO", sha, len(request.keys), *request.keys, *request.args)
        )

    def _script_source(self, script: str) -> str:
        """The source to load after ``NOSCRIPT`` for `script`."""
        return str(self._scripts[script].script)

    def _beat_call(
        self, queue: Any, group: Any, consumer: Any, lease_count: Any, now_ns: Any
    ) -> tuple[Any, ...]:
        """Check one heartbeat's arguments; the ``EVALSHA`` that writes it (`Planner.beat_call`).
        A reply of 1 is followed by `Planner.beat_listing`."""
        if self._read_only:
            self._writable("heartbeat")
        queue, group, consumer = check_triple(queue, group, consumer)
        lease = check_lease_count(lease_count)
        now = check_now_ns(now_ns)
        return self._plans.beat_call(self._beat_sha, queue, group, consumer, lease, now)

    def _plan_heartbeat_many(self, beats: Iterable[Any], now_ns: Any) -> Plan[int]:
        self._writable("heartbeat_many")
        checked = check_beats(beats)
        now = check_now_ns(now_ns)
        return self._plans.heartbeat([(*beat, 0) for beat in checked], now)

    def _plan_heartbeat_delayed(self, beats: Sequence[DelayedBeat]) -> Plan[int]:
        """Beats already validated by a reporter, each stamped ``server_now - delay_us``."""
        self._writable("heartbeat")
        return self._plans.heartbeat(beats, None)

    def _plan_snapshot(self, now_ns: Any, ttl_ms: Any) -> Plan[list[ConsumerPresence]]:
        ttl = check_ttl_ms(ttl_ms)
        return self._plans.snapshot(check_now_ns(now_ns), ttl)

    def _plan_count(self, now_ns: Any, ttl_ms: Any) -> Plan[dict[tuple[str, str], int]]:
        ttl = check_ttl_ms(ttl_ms)
        return self._plans.count_active_by_group(check_now_ns(now_ns), ttl)

    def _plan_prune(self, now_ns: Any, ttl_ms: Any) -> Plan[int]:
        self._writable("prune_expired")
        ttl = check_ttl_ms(ttl_ms)
        return self._plans.prune_expired(check_now_ns(now_ns), ttl)

    def _plan_deregister(self, queue: Any, group: Any, consumer: Any) -> Plan[bool]:
        self._writable("deregister")
        return self._plans.deregister(*check_triple(queue, group, consumer))

    def _plan_size(self) -> Plan[int]:
        return self._plans.size()

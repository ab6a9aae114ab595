"""Fleets of consumers, and the baselines written by hand without the package's code.

A fleet of ``n`` consumers is spread evenly over ``GROUPS`` (queue, group) pairs: 10 queues
of 10 groups each. Fleets are written with ``heartbeat_many`` and explicit ``now_ns``, in
chunks, so a 100,000-consumer fleet takes a fraction of a second to set up.

The baselines send their commands themselves, without the package's planner:

* `RawPresence` reads and writes the package's own layout (named by `Keyspace`) with plain
  redis-py calls;
* `ScanDesign` is what most home-grown trackers do: one string key per consumer with a
  TTL, listed with ``SCAN`` + ``MGET``. It is written to be fast: a large ``COUNT``,
  ``MGET`` in chunks, every chunk in one pipeline.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

import redis

from redis_presence import DEFAULT_MAX_FUTURE_MS, ConsumerPresenceRegistry, RedisPresenceRegistry
from redis_presence.keys import Keyspace
from redis_presence.plans import (
    MAX_CONSUMERS_PER_CALL,
    MAX_GROUPS_PER_CALL,
    MAX_ROWS_PER_ROUND_TRIP,
)

QUEUES = 10
GROUPS_PER_QUEUE = 10
GROUPS = QUEUES * GROUPS_PER_QUEUE
WRITE_CHUNK = 5_000
TTL_MS = 30_000
NOW_NS = 1_750_000_000_123_456_000
"""The instant every read of the benchmark uses (explicit, so rounds are comparable)."""

Beat = tuple[str, str, str, int]

PREFIX = "bench"
"""The key prefix the cases write their fleets under."""
HOT: Beat = ("queue-00", "group-00", "broker-00.worker-0000000", 3)
"""The consumer whose heartbeat the latency case refreshes over and over."""


def bench_registry(client: redis.Redis, prefix: str = PREFIX) -> RedisPresenceRegistry:
    """The registry the cases measure: the package's defaults, under `prefix`."""
    return RedisPresenceRegistry(client, prefix=prefix)


def group_names() -> list[tuple[str, str]]:
    """The fleet's (queue, group) pairs."""
    return [
        (f"queue-{q:02d}", f"group-{g:02d}") for q in range(QUEUES) for g in range(GROUPS_PER_QUEUE)
    ]


def fleet(n: int, *, tag: str = "") -> list[Beat]:
    """`n` beats spread evenly over `GROUPS` groups; consumer names look like real ones."""
    pairs = group_names()
    return [
        (*pairs[i % GROUPS], f"broker-{i % 7:02d}.worker{tag}-{i:07d}", i % 17) for i in range(n)
    ]


def chunks(items: Sequence[Beat], size: int = WRITE_CHUNK) -> Iterator[Sequence[Beat]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def write_fleet(registry: RedisPresenceRegistry, beats: Sequence[Beat], now_ns: int) -> None:
    """Write `beats` at `now_ns`, a few thousand per script call."""
    for part in chunks(beats):
        registry.heartbeat_many(part, now_ns=now_ns)


def memory_fleet(beats: Sequence[Beat], now_ns: int) -> ConsumerPresenceRegistry:
    """The in-process registry holding the same fleet."""
    registry = ConsumerPresenceRegistry()
    registry.heartbeat_many(beats, now_ns=now_ns)
    return registry


def _enc(name: str) -> str:
    return quote(name, safe="")


@dataclass(frozen=True)
class RawPresence:
    """The package's key layout (`Keyspace`) and scripts, driven by hand-written redis-py
    calls: the arguments are built here, not by the package's planner."""

    client: redis.Redis
    prefix: str = "presence"

    @property
    def keys(self) -> Keyspace:
        return Keyspace(self.prefix)

    def _tail(self) -> list[str]:
        """The KEYS after the groups' on a standalone server: the indexes, the epoch marker,
        the protocol version and the fleet indexes (``lua/lib.lua``)."""
        space = self.keys
        return [space.groups, space.events, space.epoch, space.protocol, space.newest, space.oldest]

    def beat_args(
        self, queue: str, group: str, consumer: str, lease: int, now_ns: int | None
    ) -> tuple[list[str], list[str | int]]:
        """KEYS and ARGV of ``lua/heartbeat.lua`` (one beat, standalone server)."""
        gk = self.keys.group(queue, group)
        now = "" if now_ns is None else str(now_ns)
        keys = [gk.hb, gk.data, gk.mark, gk.events, gk.meta, *self._tail()]
        # capacity and draining kept (''), no instance token ('-')
        args: list[str | int] = [TTL_MS, 10_000, 86_400_000, DEFAULT_MAX_FUTURE_MS, now]
        return keys, [*args, consumer, lease, "", "", "-"]

    def heartbeat_args(
        self, beats: Sequence[Beat], now_ns: int | None, delay_us: int = 0
    ) -> tuple[list[str], list[str | int]]:
        """KEYS and ARGV of ``lua/heartbeat_many.lua`` for one call carrying every beat (each a
        7-tuple: group number, consumer, lease, delay, and no progress, capacity or
        draining)."""
        space = self.keys
        numbers: dict[tuple[str, str], int] = {}
        keys: list[str] = []
        tail: list[str | int] = []
        for queue, group, consumer, lease in beats:
            number = numbers.get((queue, group))
            if number is None:
                number = numbers[(queue, group)] = len(numbers) + 1
                gk = space.group(queue, group)
                keys += (gk.hb, gk.data, gk.mark, gk.events, gk.meta)
            tail += (number, consumer, lease, delay_us, "", "", "")  # no progress
        keys += self._tail()
        now = "" if now_ns is None else str(now_ns)
        guard = DEFAULT_MAX_FUTURE_MS
        head: list[str | int] = [now, 60_000, 10_000, 86_400_000, guard, "-", ""]
        return keys, [*head, *([TTL_MS] * len(numbers)), *tail]

    def transfer(self, *, transaction: bool = False) -> list[Any]:
        """Every group's hash, fetched with one ZRANGE of the index and pipelined HGETALLs
        (in one MULTI/EXEC with `transaction`): no decoding, no bound on any command."""
        members: list[bytes] = self.client.zrange(self.keys.groups, 0, -1)  # type: ignore[assignment]
        pipe = self.client.pipeline(transaction=transaction)
        for member in members:
            pipe.hgetall(member)
        return pipe.execute()

    def bounded_transfer(self) -> list[dict[Any, Any]]:
        """Every group's hash, read under the bounds `snapshot()` keeps, and nothing decoded:
        the index a page of MAX_GROUPS_PER_CALL at a time, an ``HLEN`` of each group, each
        group of at most MAX_CONSUMERS_PER_CALL in one ``HGETALL`` and a larger one in
        ``HSCAN`` steps of that many, MAX_ROWS_PER_ROUND_TRIP rows a pipeline. What
        `snapshot()` costs without turning a single value into a row."""
        most, per_trip = MAX_CONSUMERS_PER_CALL, MAX_ROWS_PER_ROUND_TRIP
        members: list[bytes] = []
        after = b"-"
        while True:
            page: list[bytes] = self.client.zrangebylex(  # type: ignore[assignment]
                self.keys.groups, after, b"+", 0, MAX_GROUPS_PER_CALL
            )
            members += page
            if len(page) < MAX_GROUPS_PER_CALL:
                break
            after = b"(" + page[-1]
        pipe = self.client.pipeline(transaction=False)
        for member in members:
            pipe.hlen(member)
        sizes: list[int] = pipe.execute()
        tables: list[dict[Any, Any]] = [{} for _ in members]
        pending = list(range(len(members)))
        scanning: dict[int, int] = {}  # group -> its next HSCAN cursor
        while pending or scanning:
            pipe = self.client.pipeline(transaction=False)
            sent: list[int] = []
            budget = per_trip
            for i, cursor in scanning.items():  # the large groups already on their way
                pipe.hscan(members[i], cursor, count=most)
                sent.append(i)
                budget -= most
            while pending:
                cost = min(sizes[pending[0]], most)
                if sent and cost > budget:
                    break
                i = pending.pop(0)
                if sizes[i] > most:
                    pipe.hscan(members[i], 0, count=most)
                else:
                    pipe.hgetall(members[i])
                sent.append(i)
                budget -= cost
            for i, reply in zip(sent, pipe.execute(), strict=True):
                if sizes[i] <= most:
                    tables[i] = reply
                    continue
                cursor, part = reply
                tables[i].update(part)
                if int(cursor):
                    scanning[i] = int(cursor)
                else:
                    scanning.pop(i, None)
        return tables


@dataclass(frozen=True)
class ScanDesign:
    """One key per consumer, ``SET ... PX``; listed with SCAN + pipelined chunked MGET."""

    client: redis.Redis
    prefix: str = "workers"
    scan_count: int = 10_000
    mget_chunk: int = 1_000

    def key(self, queue: str, group: str, consumer: str) -> str:
        return f"{self.prefix}:{_enc(queue)}:{_enc(group)}:{_enc(consumer)}"

    def write(self, beats: Sequence[Beat], now_ns: int, px_ms: int = 3_600_000) -> None:
        """Every beat as ``SET key 'registered heartbeat lease' PX px_ms``, pipelined.

        A real tracker sets ``PX 2*ttl``; the benchmark keeps the keys for an hour so a
        slow run never loses them half-way. The cost and the memory are the same.
        """
        for part in chunks(beats):
            pipe = self.client.pipeline(transaction=False)
            for queue, group, consumer, lease in part:
                value = f"{now_ns} {now_ns} {lease}"
                pipe.set(self.key(queue, group, consumer), value, px=px_ms)
            pipe.execute()

    def snapshot(self, now_ns: int, ttl_ms: int = TTL_MS) -> list[tuple[Any, ...]]:
        """Every consumer, sorted: ``(queue, group, consumer, reg, hb, age_ms, lease, state)``."""
        keys: list[Any] = []
        cursor = 0
        match = f"{self.prefix}:*"
        while True:
            cursor, batch = self.client.scan(cursor, match=match, count=self.scan_count)
            keys += batch
            if cursor == 0:
                break
        pipe = self.client.pipeline(transaction=False)
        for start in range(0, len(keys), self.mget_chunk):
            pipe.mget(keys[start : start + self.mget_chunk])
        values = [v for chunk in pipe.execute() for v in chunk]
        rows = []
        for key, value in zip(keys, values, strict=True):
            if value is None:  # expired between SCAN and MGET
                continue
            _, q, g, c = key.decode().split(":")
            registered, heartbeat, lease = value.split()
            hb = int(heartbeat)
            age = max(0, now_ns - hb) // 1_000_000
            state = "active" if age <= ttl_ms else "stale" if age <= 2 * ttl_ms else "expired"
            rows.append(
                (unquote(q), unquote(g), unquote(c), int(registered), hb, age, int(lease), state)
            )
        rows.sort()
        return rows

"""Reading a Redis Streams consumer group with the consumer's heartbeat in every read:
`StreamReader` and `AsyncStreamReader`, public through `redis_presence.integrations.streams`
(whose docstring says how).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, ClassVar, Generic, TypeVar

from redis_presence.aio import AsyncRedisPresenceRegistry
from redis_presence.errors import DRIVER_ERRORS, translate
from redis_presence.model import DEFAULT_PRESENCE_TTL_MS
from redis_presence.plans import Command, Plan, alongside
from redis_presence.registry import RedisPresenceRegistry
from redis_presence.validation import check_name, check_ttl_ms

DEFAULT_BLOCK_MS = 2_000
"""How long a read waits for new entries by default: well within half the default TTL,
and shorter than redis-py's default socket timeout (5 s)."""

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
        self.held.update(_entry_id(entry_id) for entry_id, _ in found)
        return found

    def acked(self, ids: Sequence[Any], count: int) -> None:
        """`ids` were acknowledged (`count` of them by Redis): none of them is held any
        more, and the next beat records progress if Redis acknowledged any."""
        self.held.difference_update(map(_entry_id, ids))
        if count:
            self.progressed = True


def _entry_id(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


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

# Generated from redis_presence/operations.py by `python -m tools.codegen`:
# edit that file and run the generator, not this one.
"""`PresenceRegistry`: the methods every synchronous registry offers.

Type against it to accept `RedisPresenceRegistry` and `ConsumerPresenceRegistry` alike
(the CLI, the demo brokers and the test suite do); it is `runtime_checkable`, so
`isinstance` checks that the methods exist (not their signatures). Its signatures are
`redis_presence.operations.ContractOperations`', so the two cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol, runtime_checkable

from .beats import BeatReply, Written
from .events import (
    DEFAULT_CHANGES_LIMIT,
    DEFAULT_FOLLOW_INTERVAL_S,
    Changes,
    FollowMessage,
)
from .model import ConsumerPresence, GroupPresence
from .validation import Beat

__all__ = ["PresenceRegistry"]


@runtime_checkable
class PresenceRegistry(Protocol):
    """Heartbeat, snapshot (whole or streamed), counts, prune and deregister, the shared
    TTL and the events, metadata, the progress budget and declared groups, with the
    contract's signatures; `queue` / `group` filter a read to one queue or one group,
    and `ttl_ms` None is the shared TTL."""

    def heartbeat(
        self,
        queue: str,
        group: str,
        consumer: str,
        lease_count: int = 0,
        now_ns: int | None = None,
        *,
        progressed: bool = False,
        capacity: int | None = None,
        draining: bool | None = None,
    ) -> BeatReply:
        """Record or refresh one consumer in one atomic script call (one round trip).
        With `progressed`, also records progress (a finished or acknowledged message) at
        the beat's instant; `capacity` and `draining` (None: keep the stored ones) are
        stored with it. The reply says whether a drain of the consumer was requested."""

    def heartbeat_many(self, beats: Iterable[Beat], now_ns: int | None = None) -> Written:
        """Write many ``(queue, group, consumer, lease_count)`` beats (or `BeatSpec`s), each
        atomically, in one script call (one per queue on a cluster, the asyncio registry's
        sent concurrently); returns how many (`Written`: an int naming the consumers with
        a drain request)."""

    def request_drain(
        self, queue: str, group: str, consumer: str, now_ns: int | None = None
    ) -> bool:
        """Ask one consumer to drain: its next beats' replies say so until one of them says
        it is draining; returns whether it is tracked (protocol mode 2 only)."""

    def clock_ns(self) -> int:
        """The server clock that reads use when ``now_ns`` is None (``TIME``), in ns."""

    def snapshot(
        self,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        queue: str | None = None,
        group: str | None = None,
        stuck_after_ms: int | None = None,
        with_meta: bool = False,
    ) -> list[ConsumerPresence]:
        """Every tracked consumer (of one queue, or one group), ordered by `(queue, group,
        consumer)`, expired ones too."""

    def iter_snapshot(
        self,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        queue: str | None = None,
        group: str | None = None,
        stuck_after_ms: int | None = None,
        with_meta: bool = False,
    ) -> Iterator[ConsumerPresence]:
        """The rows of `snapshot`, group by group as they are read, holding one chunk at a
        time (see `Planner.iter_snapshot`); groups come in the index's order."""

    def count_active_by_group(
        self,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        queue: str | None = None,
        group: str | None = None,
    ) -> dict[tuple[str, str], int]:
        """Active consumers per `(queue, group)`; groups without one have no key."""

    def count_active(
        self,
        queue: str,
        group: str,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
    ) -> int:
        """Active consumers of one group (0 when it has none)."""

    def consumer(
        self,
        queue: str,
        group: str,
        consumer: str,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        stuck_after_ms: int | None = None,
    ) -> ConsumerPresence | None:
        """One consumer's row, or None when it is not tracked (one ``HMGET``: a probe)."""

    def prune_expired(
        self,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        queue: str | None = None,
        group: str | None = None,
        retention_ms: int | None = 0,
    ) -> int:
        """Remove exactly the consumers `snapshot` would call expired for longer than
        `retention_ms` (0: every expired one; None: DEFAULT_RETENTION_TTLS times each group's
        TTL); returns how many."""

    def deregister(self, queue: str, group: str, consumer: str, now_ns: int | None = None) -> bool:
        """Forget one consumer (graceful shutdown); returns whether it was tracked."""

    def describe(self, queue: str, group: str, consumer: str, meta: dict[str, str]) -> bool:
        """Store the consumer's metadata, written only when it changed (an empty mapping
        removes it); returns whether the consumer is tracked (see `Planner.describe`)."""

    def expect(self, queue: str, group: str, min_active: int = 1) -> None:
        """Declare that `group` must have at least `min_active` active readers of `queue`."""

    def unexpect(self, queue: str, group: str) -> bool:
        """Forget a declared group; returns whether it was declared."""

    def expected(self) -> dict[tuple[str, str], int]:
        """Every declared group and its `min_active`, ordered by (queue, group)."""

    def min_active(self, queue: str, group: str) -> int | None:
        """The minimum one group was declared with (None: not declared)."""

    def groups(
        self,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        details: bool = False,
        capacity: bool = False,
        departures: bool = False,
    ) -> list[GroupPresence]:
        """Every tracked or declared group with its consumers by state, its `min_active`
        (None: not declared) and whether it has fewer active consumers (`details`: and its
        oldest heartbeat and leases; `capacity`: and its capacity, free slots, draining
        consumers and conflicts, from its live consumers' values; `departures`: only whether
        its stale consumers said they were draining; see `Planner.groups`)."""

    def group(
        self, queue: str, group: str, now_ns: int | None = None, ttl_ms: int | None = None
    ) -> GroupPresence:
        """One group as a row of `groups()`, with its capacity, free slots, draining
        consumers, conflicts and `verdict` (zeros for a group neither tracked nor declared);
        reads that group's keys alone, and the values of its live consumers only."""

    def set_stuck_after(
        self, stuck_after_ms: int | None, *, queue: str | None = None, group: str | None = None
    ) -> None:
        """Store the progress budget every reader shares, for the prefix or one group (None:
        forget it); reads whose `stuck_after_ms` is None use it."""

    def stuck_after(self, queue: str | None = None, group: str | None = None) -> int:
        """The shared progress budget of one group (or of the prefix)."""

    def stuck_after_source(
        self, queue: str | None = None, group: str | None = None
    ) -> tuple[int, str]:
        """`stuck_after` and where it comes from: ``"group"``, ``"prefix"`` or ``"default"``."""

    def set_ttl(
        self, ttl_ms: int | None, *, queue: str | None = None, group: str | None = None
    ) -> None:
        """Store the TTL every broker and reader shares, for the prefix or one group (None:
        forget it); reads whose `ttl_ms` is None use it."""

    def ttl(self, queue: str | None = None, group: str | None = None) -> int:
        """The shared TTL of one group (or of the prefix), as reads with `ttl_ms` None use it."""

    def ttl_source(self, queue: str | None = None, group: str | None = None) -> tuple[int, str]:
        """`ttl` and where it comes from: ``"group"``, ``"prefix"`` or ``"default"``."""

    def ttl_sources(
        self, groups: Iterable[tuple[str, str]]
    ) -> dict[tuple[str, str], tuple[int, str]]:
        """`ttl_source` of each `(queue, group)`, read in batches."""

    def changes(
        self,
        cursor: str | None = None,
        *,
        now_ns: int | None = None,
        queue: str | None = None,
        group: str | None = None,
        limit: int = DEFAULT_CHANGES_LIMIT,
    ) -> Changes:
        """Every event after `cursor` up to `now_ns`, and the cursor to go on from (see
        `Planner.changes`); `cursor` None starts now."""

    def follow(
        self,
        *,
        cursor: str | None = None,
        interval_s: float = DEFAULT_FOLLOW_INTERVAL_S,
        queue: str | None = None,
        group: str | None = None,
    ) -> Iterator[FollowMessage]:
        """State, then diffs: a `FollowSnapshot` first, then each `PresenceEvent` as it
        happens (asking for changes every `interval_s`) and a `FollowCursor` after each ask,
        and a new `FollowSnapshot` whenever its cursor cannot go on (the log was trimmed
        past it, or Redis lost what it read) or a group it holds consumers of vanished
        without events (`events.HeldGroups`: at most `Limits.groups` groups checked per
        read, in one round trip). With `cursor` (from `changes` or a `FollowCursor`), it
        goes on from there at once, without the first snapshot."""

    def size(self) -> int:
        """How many consumers are tracked, in every state (``len()`` of a sync registry)."""

    def __len__(self) -> int: ...

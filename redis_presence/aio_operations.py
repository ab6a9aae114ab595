# Generated from redis_presence/operations.py by `python -m tools.codegen`:
# edit that file and run the generator, not this one.
"""The registries' operations as coroutines, for `AsyncRedisPresenceRegistry`.

`AsyncContractOperations` and `AsyncOperations` are `redis_presence.operations`'s
`ContractOperations` and `Operations` with coroutine methods: the same plans, run by the
asyncio registry's ``execute``. ``len()`` cannot be awaited: ``await registry.size()``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from typing import TypeVar

from .beats import BeatReply, Written
from .errors import PresenceResyncRequired
from .events import (
    DEFAULT_CHANGES_LIMIT,
    DEFAULT_FOLLOW_INTERVAL_S,
    Changes,
    EventCursor,
    FollowCursor,
    FollowMessage,
    HeldGroups,
    check_interval_s,
)
from .model import ConsumerPresence, GroupPresence, GroupsPage
from .plans import Plan, Planner, RowStream
from .plans.index import Migrated
from .validation import Beat

T = TypeVar("T")

__all__ = ["AsyncContractOperations", "AsyncOperations"]


class AsyncContractOperations:
    """Heartbeat, snapshot (whole or streamed), counts, prune and deregister, the shared TTL
    and the events, metadata, the progress budget and declared groups, with the contract's
    signatures; `queue` / `group` filter a read to one queue or one group, and `ttl_ms`
    None is the shared TTL. Every method is its plan (`plans`) run by `execute`."""

    plans: Planner

    async def execute(self, plan: Plan[T]) -> T:
        """Run `plan` to its result (the registry's transport)."""
        raise NotImplementedError

    def stream(self, stream: RowStream) -> AsyncIterator[ConsumerPresence]:
        """Run a streaming read, handing out each group's rows as they are read."""
        raise NotImplementedError

    async def heartbeat(
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
        return await self.execute(
            self.plans.heartbeat(
                queue,
                group,
                consumer,
                lease_count,
                now_ns,
                progressed=progressed,
                capacity=capacity,
                draining=draining,
            )
        )

    async def heartbeat_many(self, beats: Iterable[Beat], now_ns: int | None = None) -> Written:
        """Write many ``(queue, group, consumer, lease_count)`` beats (or `BeatSpec`s), each
        atomically, in one script call (one per queue on a cluster, the asyncio registry's
        sent concurrently); returns how many (`Written`: an int naming the consumers with
        a drain request)."""
        return await self.execute(self.plans.heartbeat_many(beats, now_ns))

    async def request_drain(
        self, queue: str, group: str, consumer: str, now_ns: int | None = None
    ) -> bool:
        """Ask one consumer to drain: its next beats' replies say so until one of them says
        it is draining; returns whether it is tracked (protocol mode 2 only)."""
        return await self.execute(self.plans.request_drain(queue, group, consumer, now_ns))

    async def clock_ns(self) -> int:
        """The server clock that reads use when ``now_ns`` is None (``TIME``), in ns."""
        return await self.execute(self.plans.clock_ns())

    async def snapshot(
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
        return await self.execute(
            self.plans.snapshot(
                now_ns,
                ttl_ms,
                queue=queue,
                group=group,
                stuck_after_ms=stuck_after_ms,
                with_meta=with_meta,
            )
        )

    def iter_snapshot(
        self,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        queue: str | None = None,
        group: str | None = None,
        stuck_after_ms: int | None = None,
        with_meta: bool = False,
    ) -> AsyncIterator[ConsumerPresence]:
        """The rows of `snapshot`, group by group as they are read, holding one chunk at a
        time (see `Planner.iter_snapshot`); groups come in the index's order."""
        return self.stream(
            self.plans.iter_snapshot(
                now_ns,
                ttl_ms,
                queue=queue,
                group=group,
                stuck_after_ms=stuck_after_ms,
                with_meta=with_meta,
            )
        )

    async def count_active_by_group(
        self,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        queue: str | None = None,
        group: str | None = None,
    ) -> dict[tuple[str, str], int]:
        """Active consumers per `(queue, group)`; groups without one have no key."""
        return await self.execute(
            self.plans.count_active_by_group(now_ns, ttl_ms, queue=queue, group=group)
        )

    async def count_active(
        self,
        queue: str,
        group: str,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
    ) -> int:
        """Active consumers of one group (0 when it has none)."""
        return await self.execute(self.plans.count_active(queue, group, now_ns, ttl_ms))

    async def consumer(
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
        return await self.execute(
            self.plans.consumer(
                queue, group, consumer, now_ns, ttl_ms, stuck_after_ms=stuck_after_ms
            )
        )

    async def prune_expired(
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
        return await self.execute(
            self.plans.prune_expired(
                now_ns, ttl_ms, queue=queue, group=group, retention_ms=retention_ms
            )
        )

    async def deregister(
        self, queue: str, group: str, consumer: str, now_ns: int | None = None
    ) -> bool:
        """Forget one consumer (graceful shutdown); returns whether it was tracked."""
        return await self.execute(self.plans.deregister(queue, group, consumer, now_ns))

    async def describe(self, queue: str, group: str, consumer: str, meta: dict[str, str]) -> bool:
        """Store the consumer's metadata, written only when it changed (an empty mapping
        removes it); returns whether the consumer is tracked (see `Planner.describe`)."""
        return await self.execute(self.plans.describe(queue, group, consumer, meta))

    async def expect(self, queue: str, group: str, min_active: int = 1) -> None:
        """Declare that `group` must have at least `min_active` active readers of `queue`."""
        return await self.execute(self.plans.expect(queue, group, min_active))

    async def unexpect(self, queue: str, group: str) -> bool:
        """Forget a declared group; returns whether it was declared."""
        return await self.execute(self.plans.unexpect(queue, group))

    async def expected(self) -> dict[tuple[str, str], int]:
        """Every declared group and its `min_active`, ordered by (queue, group)."""
        return await self.execute(self.plans.expected())

    async def min_active(self, queue: str, group: str) -> int | None:
        """The minimum one group was declared with (None: not declared)."""
        return await self.execute(self.plans.min_active(queue, group))

    async def groups(
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
        return await self.execute(
            self.plans.groups(
                now_ns, ttl_ms, details=details, capacity=capacity, departures=departures
            )
        )

    async def group(
        self, queue: str, group: str, now_ns: int | None = None, ttl_ms: int | None = None
    ) -> GroupPresence:
        """One group as a row of `groups()`, with its capacity, free slots, draining
        consumers, conflicts and `verdict` (zeros for a group neither tracked nor declared);
        reads that group's keys alone, and the values of its live consumers only."""
        return await self.execute(self.plans.group(queue, group, now_ns, ttl_ms))

    async def set_stuck_after(
        self, stuck_after_ms: int | None, *, queue: str | None = None, group: str | None = None
    ) -> None:
        """Store the progress budget every reader shares, for the prefix or one group (None:
        forget it); reads whose `stuck_after_ms` is None use it."""
        return await self.execute(
            self.plans.set_stuck_after(stuck_after_ms, queue=queue, group=group)
        )

    async def stuck_after(self, queue: str | None = None, group: str | None = None) -> int:
        """The shared progress budget of one group (or of the prefix)."""
        return (await self.execute(self.plans.stuck_after(queue, group)))[0]

    async def stuck_after_source(
        self, queue: str | None = None, group: str | None = None
    ) -> tuple[int, str]:
        """`stuck_after` and where it comes from: ``"group"``, ``"prefix"`` or ``"default"``."""
        return await self.execute(self.plans.stuck_after(queue, group))

    async def set_ttl(
        self, ttl_ms: int | None, *, queue: str | None = None, group: str | None = None
    ) -> None:
        """Store the TTL every broker and reader shares, for the prefix or one group (None:
        forget it); reads whose `ttl_ms` is None use it."""
        return await self.execute(self.plans.set_ttl(ttl_ms, queue=queue, group=group))

    async def ttl(self, queue: str | None = None, group: str | None = None) -> int:
        """The shared TTL of one group (or of the prefix), as reads with `ttl_ms` None use it."""
        return (await self.execute(self.plans.ttl(queue, group)))[0]

    async def ttl_source(
        self, queue: str | None = None, group: str | None = None
    ) -> tuple[int, str]:
        """`ttl` and where it comes from: ``"group"``, ``"prefix"`` or ``"default"``."""
        return await self.execute(self.plans.ttl(queue, group))

    async def ttl_sources(
        self, groups: Iterable[tuple[str, str]]
    ) -> dict[tuple[str, str], tuple[int, str]]:
        """`ttl_source` of each `(queue, group)`, read in batches."""
        return dict(await self.execute(self.plans.ttl_sources(groups)))

    async def changes(
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
        return await self.execute(
            self.plans.changes(cursor, now_ns=now_ns, queue=queue, group=group, limit=limit)
        )

    async def follow(
        self,
        *,
        cursor: str | None = None,
        interval_s: float = DEFAULT_FOLLOW_INTERVAL_S,
        queue: str | None = None,
        group: str | None = None,
    ) -> AsyncIterator[FollowMessage]:
        """State, then diffs: a `FollowSnapshot` first, then each `PresenceEvent` as it
        happens (asking for changes every `interval_s`) and a `FollowCursor` after each ask,
        and a new `FollowSnapshot` whenever its cursor cannot go on (the log was trimmed
        past it, or Redis lost what it read) or a group it holds consumers of vanished
        without events (`events.HeldGroups`: at most `Limits.groups` groups checked per
        read, in one round trip). With `cursor` (from `changes` or a `FollowCursor`), it
        goes on from there at once, without the first snapshot."""
        interval = check_interval_s(interval_s)
        if cursor is not None:
            EventCursor.decode(cursor)
        held = HeldGroups(clustered=self.plans.clustered, indexed=queue is None or group is None)
        while True:
            wait = cursor is None
            if cursor is None:
                message = await self.execute(self.plans.snapshot_cursor(queue=queue, group=group))
                held.start(message.rows)
                yield message
                cursor = message.cursor
            try:
                while True:
                    if wait:
                        await asyncio.sleep(interval)
                    page = await self.changes(cursor, queue=queue, group=group)
                    events, cursor = page
                    wait = not page.more  # a window given in pages goes on at once
                    for event in events:
                        held.apply(event)
                        yield event
                    read = EventCursor.decode(cursor)
                    if wait and held:  # a whole window read: are its groups still there?
                        due = held.due(self.plans.limits.groups)
                        plan = self.plans.vanished_groups(due, indexed=held.indexed)
                        held.check(due, await self.execute(plan), read.server_ms)
                    yield FollowCursor(cursor, read.now_ns)
            except PresenceResyncRequired:
                cursor = None

    async def size(self) -> int:
        """How many consumers are tracked, in every state (``len()`` of a sync registry)."""
        return await self.execute(self.plans.size())


class AsyncOperations(AsyncContractOperations):
    """`AsyncContractOperations` and what only a Redis registry offers: the index read page by
    page and the migration of an older release's keys."""

    async def group_names(self, queue: str | None = None) -> list[tuple[str, str]]:
        """Every indexed (queue, group) (of one `queue`), ordered by name, from the index
        alone (see `Planner.group_names`)."""
        return await self.execute(self.plans.group_names(queue))

    async def group_page(
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
        attention: bool = False,
    ) -> GroupsPage:
        """One page of `groups()` after (or before) a group, in the index's order, read and
        counted from that group on; with `attention`, only the groups nobody reads or below
        their declared minimum, picked from the fleet index (see `Planner.group_page`)."""
        return await self.execute(
            self.plans.group_page(
                after=after,
                before=before,
                limit=limit,
                queue=queue,
                names=names,
                match=match,
                now_ns=now_ns,
                ttl_ms=ttl_ms,
                attention=attention,
            )
        )

    async def migrate(self) -> Migrated:
        """Move the index of release 0.1 into this release's, set the prefix's protocol
        version to 2 and seed the fleet indexes (see `Planner.migrate`)."""
        return await self.execute(self.plans.migrate())

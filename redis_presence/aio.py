"""AsyncRedisPresenceRegistry: the Redis registry for asyncio brokers (``redis.asyncio``).

It shares its planner, scripts, routing, NOSCRIPT reload and error translation with
`RedisPresenceRegistry` (`redis_presence._executor`); only its transport is asynchronous.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from types import TracebackType
from typing import Any, TypeVar

from redis.asyncio.cluster import PipelineCommand

from ._executor import (
    DEFAULT_CLUSTER_RETRY_MS,
    REPLY_ERRORS,
    RESEND,
    SLOT_MOVING,
    Executor,
    Run,
    SlotMoving,
    by_node,
    command_args,
    prebuilt,
    rerouted,
    single,
    slot_moving,
)
from .clients import open_async_client
from .errors import (
    DRIVER_ERRORS,
    PresenceError,
    PresenceMetaError,
    PresenceResyncRequired,
    translate,
)
from .events import (
    DEFAULT_CHANGES_LIMIT,
    DEFAULT_EVENTS_KEPT,
    DEFAULT_FOLLOW_INTERVAL_S,
    Changes,
    Cursor,
    FollowCursor,
    FollowMessage,
    check_interval_s,
)
from .model import DEFAULT_MAX_FUTURE_MS, ConsumerPresence, GroupPresence, GroupsPage
from .plans import Limits, Plan, Request, RowStream, ScriptCall, Single
from .policy import memory_policy
from .validation import Beat

T = TypeVar("T")

__all__ = ["AsyncRedisPresenceRegistry"]


class AsyncRedisPresenceRegistry(Executor):
    """`RedisPresenceRegistry` with coroutine methods, over ``redis.asyncio`` clients.

    `client` is a ``redis.asyncio.Redis`` or a ``redis.asyncio.cluster.RedisCluster``. The
    methods and their answers are those of the sync registry; ``len()`` cannot be awaited,
    so the number of tracked consumers is ``await registry.size()``. On a cluster each
    node's requests go in one pipeline, and the nodes are served concurrently.
    ``read_only=True`` and `max_future_ms` work as in the sync registry.
    """

    packs = True

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        prefix: str = "presence",
        read_only: bool = False,
        limits: Limits = Limits(),  # noqa: B008 (an immutable tuple)
        max_future_ms: int | None = DEFAULT_MAX_FUTURE_MS,
        events_kept: int = DEFAULT_EVENTS_KEPT,
        cluster_retry_ms: int = DEFAULT_CLUSTER_RETRY_MS,
        **redis_kwargs: Any,
    ) -> AsyncRedisPresenceRegistry:
        """A registry on a new asyncio client for `url` (the schemes and options of
        `RedisPresenceRegistry.from_url`); `aclose` closes that client."""
        client = open_async_client(url, **redis_kwargs)
        registry = cls(
            client,
            prefix=prefix,
            read_only=read_only,
            limits=limits,
            max_future_ms=max_future_ms,
            events_kept=events_kept,
            cluster_retry_ms=cluster_retry_ms,
        )
        registry._owns_client = True
        return registry

    # -- the contract ---------------------------------------------------------------

    async def heartbeat(
        self,
        queue: str,
        group: str,
        consumer: str,
        lease_count: int = 0,
        now_ns: int | None = None,
        *,
        progressed: bool = False,
    ) -> None:
        """Record or refresh one consumer in one atomic script call (one round trip).
        With `progressed`, also records progress (a finished or acknowledged message) at
        the beat's instant."""
        return await self.execute(
            self.plans.heartbeat(queue, group, consumer, lease_count, now_ns, progressed=progressed)
        )

    async def heartbeat_many(self, beats: Iterable[Beat], now_ns: int | None = None) -> int:
        """Write many ``(queue, group, consumer, lease_count)`` beats, each atomically, in one
        script call (one per queue on a cluster, sent concurrently); returns how many."""
        return await self.execute(self.plans.heartbeat_many(beats, now_ns))

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
        """The rows of `snapshot` as an async iterator (``async for``), group by group as
        they are read, holding one chunk at a time."""
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
    ) -> int:
        """Remove exactly the consumers `snapshot` would call expired; returns how many."""
        return await self.execute(
            self.plans.prune_expired(now_ns, ttl_ms, queue=queue, group=group)
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
    ) -> GroupsPage:
        """One page of `groups()` after (or before) a group, in the index's order, read and
        counted from that group on (see `Planner.group_page`)."""
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
            )
        )

    async def groups(
        self, now_ns: int | None = None, ttl_ms: int | None = None, *, details: bool = False
    ) -> list[GroupPresence]:
        """Every tracked or declared group with its consumers by state, its `min_active`
        (None: not declared) and whether it has fewer active consumers (`details`: and its
        oldest heartbeat and leases, see `Planner.groups`)."""
        return await self.execute(self.plans.groups(now_ns, ttl_ms, details=details))

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

    async def migrate(self) -> int:
        """Move the index of release 0.1 into this release's (see `Planner.migrate`)."""
        return await self.execute(self.plans.migrate())

    async def follow(
        self,
        *,
        cursor: str | None = None,
        interval_s: float = DEFAULT_FOLLOW_INTERVAL_S,
        queue: str | None = None,
        group: str | None = None,
    ) -> AsyncIterator[FollowMessage]:
        """`RedisPresenceRegistry.follow` for ``async for``."""
        interval = check_interval_s(interval_s)
        if cursor is not None:
            Cursor.decode(cursor)
        while True:
            wait = cursor is None
            if cursor is None:
                message = await self.execute(self.plans.snapshot_cursor(queue=queue, group=group))
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
                        yield event
                    yield FollowCursor(cursor, Cursor.decode(cursor).now_ns)
            except PresenceResyncRequired:
                cursor = None

    async def size(self) -> int:
        """How many consumers are tracked, in every state (the sync registry's ``len()``)."""
        return await self.execute(self.plans.size())

    # -- lifecycle ------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the client if this registry opened it (`from_url`)."""
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> AsyncRedisPresenceRegistry:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- running plans --------------------------------------------------------------

    async def execute(self, plan: Plan[T]) -> T:
        """Run `plan` (from `plans`, or your own composition of them) to its result; the
        asyncio twin of `RedisPresenceRegistry.execute`."""
        if type(plan) is Single:  # one script call, sent directly: no generator to step
            try:
                result: T = plan.then(await self._send_single(plan))
            except DRIVER_ERRORS as exc:
                run = Run(plan, answered=[exc])
            else:
                if self.policy_check.due:
                    await self._check_policy()
                return result
        else:
            run = Run(plan)
        while run.batch is not None:
            run.feed(await self._transport(run.batch))
        if self.policy_check.due:
            await self._check_policy()
        return run.result  # type: ignore[return-value]

    async def _check_policy(self) -> None:
        """The registry's one check of ``maxmemory-policy`` (`Executor.policy_check`)."""
        check = self.policy_check
        if not check.claim():
            return
        try:
            policy = await self.execute(memory_policy(self.plans.keys.groups))
        except PresenceError as error:
            check.failed(error)
        else:
            check.done(policy, self._client, self.plans.keys.groups)

    async def stream(self, stream: RowStream) -> AsyncIterator[ConsumerPresence]:
        """Run a streaming read, handing out each group's rows as soon as they are read."""
        run = Run(stream.plan)
        while run.batch is not None:
            run.feed(await self._transport(run.batch))
            for _, rows in stream.groups:
                for row in rows:
                    yield row
            stream.groups.clear()
        if self.policy_check.due:
            await self._check_policy()
        if stream.unreadable:  # metadata another program wrote, once every row is out
            raise PresenceMetaError(stream.unreadable)

    async def _transport(self, batch: list[Request]) -> list[Any]:
        """`_send`, with a failed connection raised as a `PresenceError`."""
        try:
            return await self._send(batch)
        except DRIVER_ERRORS as exc:
            raise translate(exc) from exc

    async def _send(self, batch: list[Request]) -> list[Any]:
        """Send a batch: one request on its own, several in one pipeline; on a cluster one
        pipeline per node, the nodes concurrently."""
        if self.clustered:
            await self._client.initialize()  # the slot map, before it is first used
        if len(batch) == 1:
            return [await self._one(batch[0])]
        if not self.clustered:
            packed = prebuilt(batch)
            if packed is not None:
                return await self._on_pooled(packed, len(batch))
            return await self._pipeline(batch)
        nodes, alone = by_node(self._client, batch)
        answers = await asyncio.gather(
            *(
                self._node_pipeline(node, [batch[i] for i in positions])
                for node, positions in nodes
            ),
            *(self._one(batch[i]) for i in alone),
        )
        replies: list[Any] = [None] * len(batch)
        for (_, positions), part in zip(nodes, answers, strict=False):
            for i, reply in zip(positions, part, strict=True):
                replies[i] = reply
        for i, reply in zip(alone, answers[len(nodes) :], strict=True):
            replies[i] = reply
        # Not run (the slot moved, the node failed): the cluster client sends them again.
        again = [i for i, reply in enumerate(replies) if isinstance(reply, RESEND)]
        resent = await asyncio.gather(*(self._one(batch[i]) for i in again))
        for i, reply in zip(again, resent, strict=True):
            replies[i] = reply
        return replies

    async def _pipeline(self, batch: Sequence[Request]) -> list[Any]:
        pipe = self._client.pipeline(transaction=False)
        for request in batch:
            pipe.execute_command(*command_args(request))
        return list(await pipe.execute(raise_on_error=False))

    @staticmethod
    async def _node_pipeline(node: Any, batch: list[Request]) -> list[Any]:
        """One plain pipeline on one cluster node (the cluster's own pipeline refuses
        ``EVALSHA``); a failed connection fails every request of it."""
        commands = [PipelineCommand(i, *command_args(request)) for i, request in enumerate(batch)]
        try:
            await node.execute_pipeline(commands)
        except RESEND as exc:
            return [exc] * len(batch)
        return [command.result for command in commands]

    @classmethod
    def sends_prebuilt(cls, client: Any) -> bool:
        """As the sync registry, but not on a ``single_connection_client``: its one
        connection is the client's own to lock, so those calls go through it."""
        single_connection = getattr(client, "single_connection_client", False)
        return super().sends_prebuilt(client) and not single_connection

    async def _send_single(self, plan: Single[Any]) -> Any:
        """A single beat: its prebuilt RESP on a pooled connection and the reply read back
        (an error reply raised, as ``execute_command`` raises it); else through
        ``execute_command``."""
        if plan.packed is None:
            return await self._command(*plan.args)
        (reply,) = await self._on_pooled(plan.packed, 1)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    async def _on_pooled(self, packed: bytes, count: int) -> list[Any]:
        """`count` prebuilt commands (`ScriptCall.packed`) written at once on a connection of
        the client's pool and their replies read back, an error reply in place of its
        command, retried as the connection's `retry` says (a pipeline whose arguments
        redis-py does not pack again)."""
        pool = self._client.connection_pool
        connection = await pool.get_connection()
        try:
            return await _round_trips(connection, packed, count)
        finally:
            await pool.release(connection)

    async def _one(self, request: Request) -> Any:
        if type(request) is ScriptCall and request.packed is not None:
            return (await self._on_pooled(request.packed, 1))[0]
        try:
            return await self._alone(request)
        except RESEND:
            if not rerouted(request, self.clustered):
                raise
        return await self._alone(request)  # once more, to the node the refreshed map names

    async def _alone(self, request: Request) -> Any:
        """`request` through the client's own ``execute_command``, an error reply returned."""
        try:
            args, options = single(self._client, request, self.clustered)
            return await self._command(*args, **options)
        except REPLY_ERRORS as exc:
            return exc

    async def _command(self, *args: Any, **options: Any) -> Any:
        """The client's ``execute_command``; on a cluster, sent again while the slot is on
        the move, for up to `cluster_retry_ms` (`SlotMoving`)."""
        if not self.clustered:
            return await self._client.execute_command(*args, **options)
        moving: SlotMoving | None = None
        while True:
            try:
                return await self._client.execute_command(*args, **options)
            except SLOT_MOVING as exc:
                if not slot_moving(exc):
                    raise
                moving = moving or SlotMoving(self.cluster_retry_ms)
                await asyncio.sleep(moving.pause_s(exc))


async def _round_trips(connection: Any, packed: bytes, count: int) -> list[Any]:
    """Write `count` packed commands at once and read their replies, an error reply in
    place of its command; retried as the connection's `retry` says, a broken connection
    closed before the next attempt (as redis-py does)."""

    async def attempt() -> list[Any]:
        await connection.send_packed_command([packed])
        replies: list[Any] = []
        for _ in range(count):
            try:
                replies.append(await connection.read_response())
            except REPLY_ERRORS as exc:
                # Without its traceback: a frame of this loop would hold the list holding
                # the error, a cycle that keeps the connection (and its socket) for the GC.
                replies.append(exc.with_traceback(None))
        return replies

    async def fail(error: BaseException) -> None:
        await connection.disconnect()

    replies: list[Any] = await connection.retry.call_with_retry(attempt, fail)
    return replies

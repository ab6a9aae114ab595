"""AsyncRedisPresenceRegistry: the Redis registry for asyncio brokers (``redis.asyncio``).

It shares with `RedisPresenceRegistry` its planner, scripts, set-up
(`redis_presence._base`), routing (`redis_presence._routing`), wire format
(`redis_presence._wire`) and how a plan runs: the NOSCRIPT reload and error translation
(`redis_presence._executor`); and its operations are the same plans
(`redis_presence.aio_operations`, generated from `redis_presence.operations`); only its
transport is asynchronous.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import Any, TypeVar

from redis.asyncio.cluster import PipelineCommand

from ._base import RegistryBase
from ._executor import Run
from ._routing import (
    REPLY_ERRORS,
    RESEND,
    SLOT_MOVING,
    SlotMoving,
    by_node,
    command_args,
    rerouted,
    single,
    slot_moving,
)
from .aio_operations import AsyncOperations
from .clients import open_async_client
from .errors import DRIVER_ERRORS, PresenceError, PresenceMetaError, translate
from .model import ConsumerPresence
from .plans import Plan, Request, RowStream, Single
from .policy import memory_policy

T = TypeVar("T")

__all__ = ["AsyncRedisPresenceRegistry"]


class AsyncRedisPresenceRegistry(AsyncOperations, RegistryBase):
    """`RedisPresenceRegistry` with coroutine methods, over ``redis.asyncio`` clients.

    `client` is a ``redis.asyncio.Redis`` or a ``redis.asyncio.cluster.RedisCluster``. The
    methods and their answers are those of the sync registry; ``len()`` cannot be awaited,
    so the number of tracked consumers is ``await registry.size()``. On a cluster each
    node's requests go in one pipeline, and the nodes are served concurrently.
    ``read_only=True`` and `max_future_ms` work as in the sync registry.
    """

    packs = True
    _open = staticmethod(open_async_client)

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
        if type(plan) is Single and not self.functions.refused:  # one call, sent directly
            try:
                result: T = plan.then(await self._send_single(plan))
            except DRIVER_ERRORS as exc:
                run = Run(plan, [exc], self.functions)
            else:
                if self.policy_check.due:
                    await self._check_policy()
                return result
        else:
            run = Run(plan, functions=self.functions)
        while run.batch is not None:
            run.feed(await self._transport(run.batch))
        if self.policy_check.due:
            await self._check_policy()
        return run.result  # type: ignore[return-value]

    async def _check_policy(self) -> None:
        """The registry's one check of ``maxmemory-policy`` (`RegistryBase.policy_check`)."""
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
        run = Run(stream.plan, functions=self.functions)
        while run.batch is not None:
            run.feed(await self._transport(run.batch))
            for rows in stream.handed_out():
                for row in rows:
                    yield row
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
            packed = self._wire.batch(batch)
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
        """A single beat: prebuilt (`Wire.single`) on a pooled connection and the reply read
        back (an error reply raised, as ``execute_command`` raises it); else through
        ``execute_command``."""
        wire = self._wire
        if not wire.prebuilt:
            return await self._command(*plan.args)
        (reply,) = await self._on_pooled(wire.single(plan), 1)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    async def _on_pooled(self, packed: bytes, count: int) -> list[Any]:
        """`count` prebuilt commands (`Wire.batch`) written at once on a connection of
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
        packed = self._wire.call(request)
        if packed is not None:
            return (await self._on_pooled(packed, 1))[0]
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

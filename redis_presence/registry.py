"""RedisPresenceRegistry: presence shared by every broker through Redis (synchronous I/O).

Its operations are `redis_presence.operations.Operations` (each one plan, run by
`execute`); this module is its transport: pipelines, prebuilt RESP on pooled connections,
cluster routing and retries.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from types import TracebackType
from typing import Any, TypeVar

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
from .clients import open_client
from .errors import DRIVER_ERRORS, PresenceError, PresenceMetaError, translate
from .model import ConsumerPresence
from .operations import Operations
from .plans import Plan, Request, RowStream, Single
from .policy import memory_policy

T = TypeVar("T")

__all__ = ["RedisPresenceRegistry"]


class RedisPresenceRegistry(Operations, RegistryBase):
    """Consumer presence in Redis: the same answer for every broker that shares the server.

    `client` is any redis-py client (``redis.Redis``, a fakeredis client, a
    ``redis.cluster.RedisCluster``). With ``now_ns=None`` every operation uses the Redis
    server's clock, so brokers whose own clocks disagree still agree on ages.
    Redis-side failures raise `PresenceError` subclasses; bad arguments raise
    `TypeError` / `ValueError` before anything is written.

    With ``read_only=True`` (e.g. a client of a replica) every write raises
    `PresenceReadOnlyError` before anything is sent; reads use plain read commands, no
    script, so they work on a replica and under the README's reader ACL role either way.

    The clock guard: a beat whose explicit ``now_ns`` is more than `max_future_ms` ahead of
    the server clock is refused with `PresenceClockError` (``None``: no guard).

    Every method builds a plan with `plans` and runs it with `execute`; so can your code,
    to compose operations (the reporters do). `limits` bounds what one command may do.
    """

    packs = True
    _open = staticmethod(open_client)

    # -- lifecycle ------------------------------------------------------------------

    def close(self) -> None:
        """Close the client if this registry opened it (`from_url`), with every connection
        it holds: a cluster client's ``close()`` leaves its nodes' pools connected (each
        node's client was given its pool, so closing it does not disconnect the pool)."""
        if not self._owns_client:
            return
        self._client.close()
        if self.clustered:
            for node in self._client.get_nodes():
                if node.redis_connection is not None:
                    node.redis_connection.connection_pool.disconnect()

    def __enter__(self) -> RedisPresenceRegistry:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- running plans --------------------------------------------------------------

    def execute(self, plan: Plan[T]) -> T:
        """Run `plan` (from `plans`, or your own composition of them) to its result.

        Redis failures raise `PresenceError` subclasses; a script the server has forgotten
        is loaded again and its calls re-sent, transparently.
        """
        if type(plan) is Single and not self.functions.refused:  # one call, sent directly
            try:
                result: T = plan.then(self._send_single(plan))
            except DRIVER_ERRORS as exc:
                run = Run(plan, [exc], self.functions)
            else:
                if self.policy_check.due:
                    self._check_policy()
                return result
        else:
            run = Run(plan, functions=self.functions)
        while run.batch is not None:
            run.feed(self._transport(run.batch))
        if self.policy_check.due:
            self._check_policy()
        return run.result  # type: ignore[return-value]

    def _check_policy(self) -> None:
        """The registry's one check of ``maxmemory-policy`` (`RegistryBase.policy_check`)."""
        check = self.policy_check
        if not check.claim():
            return
        try:
            policy = self.execute(memory_policy(self.plans.keys.groups))
        except PresenceError as error:
            check.failed(error)
        else:
            check.done(policy, self._client, self.plans.keys.groups)

    def stream(self, stream: RowStream) -> Iterator[ConsumerPresence]:
        """Run a streaming read, handing out each group's rows as soon as they are read."""
        run = Run(stream.plan, functions=self.functions)
        while run.batch is not None:
            run.feed(self._transport(run.batch))
            for rows in stream.handed_out():
                yield from rows
        if self.policy_check.due:
            self._check_policy()
        if stream.unreadable:  # metadata another program wrote, once every row is out
            raise PresenceMetaError(stream.unreadable)

    def _transport(self, batch: list[Request]) -> list[Any]:
        """`_send`, with a failed connection raised as a `PresenceError`."""
        try:
            return self._send(batch)
        except DRIVER_ERRORS as exc:
            raise translate(exc) from exc

    def _send(self, batch: list[Request]) -> list[Any]:
        """Send a batch: one request on its own, several in one pipeline, on a cluster one
        pipeline per node; error replies come back in place."""
        if len(batch) == 1:
            return [self._one(batch[0])]
        if not self.clustered:
            packed = self._wire.batch(batch)
            if packed is not None:
                return self._on_connection(_round_trips, packed, len(batch))
            return self._pipeline(self._client, batch)
        replies: list[Any] = [None] * len(batch)
        nodes, alone = by_node(self._client, batch)
        for i in alone:
            replies[i] = self._one(batch[i])
        for node, positions in nodes:
            connection = self._client.get_redis_connection(node)
            part = [batch[i] for i in positions]
            try:
                answers = self._pipeline(connection, part)
            except RESEND as exc:
                answers = [exc] * len(part)
            for i, reply in zip(positions, answers, strict=True):
                # Not run (the slot moved, the node failed): the cluster client sends it again.
                replies[i] = self._one(batch[i]) if isinstance(reply, RESEND) else reply
        return replies

    @staticmethod
    def _pipeline(client: Any, batch: Sequence[Request]) -> list[Any]:
        pipe = client.pipeline(transaction=False)
        for request in batch:
            pipe.execute_command(*command_args(request))
        return list(pipe.execute(raise_on_error=False))

    def _one(self, request: Request) -> Any:
        packed = self._wire.call(request)
        if packed is not None:
            return self._on_connection(_round_trips, packed, 1)[0]
        try:
            return self._alone(request)
        except RESEND:
            if not rerouted(request, self.clustered):
                raise
        return self._alone(request)  # once more, to the node the refreshed map names

    def _alone(self, request: Request) -> Any:
        """`request` through the client's own ``execute_command``, an error reply returned."""
        try:
            args, options = single(self._client, request, self.clustered)
            return self._command(*args, **options)
        except REPLY_ERRORS as exc:
            return exc

    def _command(self, *args: Any, **options: Any) -> Any:
        """The client's ``execute_command``; on a cluster, sent again while the slot is on
        the move, for up to `cluster_retry_ms` (`SlotMoving`)."""
        if not self.clustered:
            return self._client.execute_command(*args, **options)
        moving: SlotMoving | None = None
        while True:
            try:
                return self._client.execute_command(*args, **options)
            except SLOT_MOVING as exc:
                if not slot_moving(exc):
                    raise
                moving = moving or SlotMoving(self.cluster_retry_ms)
                time.sleep(moving.pause_s(exc))

    def _send_single(self, plan: Single[Any]) -> Any:
        """A single beat: prebuilt (`Wire.single`), written to a pooled connection and the
        reply read back, under the client's own retry policy; else through
        ``execute_command``."""
        wire = self._wire
        if not wire.prebuilt:
            return self._command(*plan.args)
        return self._on_connection(_round_trip, wire.single(plan))

    def _on_connection(self, exchange: Callable[..., T], *args: Any) -> T:
        """``exchange(connection, *args)`` on the client's one connection (a
        ``single_connection_client``, under its lock) or one taken from its pool."""
        client = self._client
        connection = client.connection
        if connection is not None:
            with getattr(client, "single_connection_lock", None) or nullcontext():
                return exchange(connection, *args)
        pool = client.connection_pool
        connection = _checkout(pool)
        try:
            return exchange(connection, *args)
        finally:
            pool.release(connection)


def _checkout(pool: Any) -> Any:
    """A connection from `pool` (redis-py before 5.3 names the command to get one)."""
    try:
        return pool.get_connection()
    except TypeError:
        return pool.get_connection("EVALSHA")


def _round_trip(connection: Any, packed: bytes) -> Any:
    """Write one packed command and read its reply, retried as the connection's `retry`
    says (a broken connection is closed before the next attempt, as redis-py does)."""

    def attempt() -> Any:
        connection.send_packed_command([packed])
        return connection.read_response()

    return connection.retry.call_with_retry(attempt, lambda error: connection.disconnect())


def _round_trips(connection: Any, packed: bytes, count: int) -> list[Any]:
    """Write `count` packed commands at once and read their replies, an error reply in
    place of its command (a pipeline of prebuilt RESP), retried as `_round_trip` is."""

    def attempt() -> list[Any]:
        connection.send_packed_command([packed])
        replies: list[Any] = []
        for _ in range(count):
            try:
                replies.append(connection.read_response())
            except REPLY_ERRORS as exc:
                # Without its traceback: a frame of this loop would hold the list holding
                # the error, a cycle that keeps the connection (and its socket) for the GC.
                replies.append(exc.with_traceback(None))
        return replies

    replies: list[Any] = connection.retry.call_with_retry(
        attempt, lambda error: connection.disconnect()
    )
    return replies

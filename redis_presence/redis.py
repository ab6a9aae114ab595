"""RedisPresenceRegistry: presence shared by every broker through Redis (synchronous I/O)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import nullcontext
from types import TracebackType
from typing import Any, TypeVar

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
from .clients import open_client
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

__all__ = ["RedisPresenceRegistry"]


class RedisPresenceRegistry(Executor):
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
    ) -> RedisPresenceRegistry:
        """A registry on a new client for `url`: ``redis://``, ``rediss://``, ``unix://``,
        ``redis+cluster://`` / ``rediss+cluster://`` for a Redis Cluster (several startup
        nodes, comma-separated), or ``redis+sentinel://`` / ``rediss+sentinel://`` for the
        primary that Sentinel names (`redis_presence.urls`); `close` closes that client. A
        malformed URL is a `PresenceConfigError`, its password hidden. The registry's own
        options are those of the constructor; every other keyword goes to redis-py."""
        client = open_client(url, **redis_kwargs)
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

    def heartbeat(
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
        return self.execute(
            self.plans.heartbeat(queue, group, consumer, lease_count, now_ns, progressed=progressed)
        )

    def heartbeat_many(self, beats: Iterable[Beat], now_ns: int | None = None) -> int:
        """Write many ``(queue, group, consumer, lease_count)`` beats, each atomically, in one
        script call (one per queue on a cluster); returns how many."""
        return self.execute(self.plans.heartbeat_many(beats, now_ns))

    def clock_ns(self) -> int:
        """The server clock that reads use when ``now_ns`` is None (``TIME``), in ns."""
        return self.execute(self.plans.clock_ns())

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
        return self.execute(
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
    ) -> Iterator[ConsumerPresence]:
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

    def count_active_by_group(
        self,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        queue: str | None = None,
        group: str | None = None,
    ) -> dict[tuple[str, str], int]:
        """Active consumers per `(queue, group)`; groups without one have no key."""
        return self.execute(
            self.plans.count_active_by_group(now_ns, ttl_ms, queue=queue, group=group)
        )

    def count_active(
        self,
        queue: str,
        group: str,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
    ) -> int:
        """Active consumers of one group (0 when it has none)."""
        return self.execute(self.plans.count_active(queue, group, now_ns, ttl_ms))

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
        return self.execute(
            self.plans.consumer(
                queue, group, consumer, now_ns, ttl_ms, stuck_after_ms=stuck_after_ms
            )
        )

    def prune_expired(
        self,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        queue: str | None = None,
        group: str | None = None,
    ) -> int:
        """Remove exactly the consumers `snapshot` would call expired; returns how many."""
        return self.execute(self.plans.prune_expired(now_ns, ttl_ms, queue=queue, group=group))

    def deregister(self, queue: str, group: str, consumer: str, now_ns: int | None = None) -> bool:
        """Forget one consumer (graceful shutdown); returns whether it was tracked."""
        return self.execute(self.plans.deregister(queue, group, consumer, now_ns))

    def describe(self, queue: str, group: str, consumer: str, meta: dict[str, str]) -> bool:
        """Store the consumer's metadata, written only when it changed (an empty mapping
        removes it); returns whether the consumer is tracked (see `Planner.describe`)."""
        return self.execute(self.plans.describe(queue, group, consumer, meta))

    def expect(self, queue: str, group: str, min_active: int = 1) -> None:
        """Declare that `group` must have at least `min_active` active readers of `queue`."""
        return self.execute(self.plans.expect(queue, group, min_active))

    def unexpect(self, queue: str, group: str) -> bool:
        """Forget a declared group; returns whether it was declared."""
        return self.execute(self.plans.unexpect(queue, group))

    def expected(self) -> dict[tuple[str, str], int]:
        """Every declared group and its `min_active`, ordered by (queue, group)."""
        return self.execute(self.plans.expected())

    def min_active(self, queue: str, group: str) -> int | None:
        """The minimum one group was declared with (None: not declared)."""
        return self.execute(self.plans.min_active(queue, group))

    def group_names(self, queue: str | None = None) -> list[tuple[str, str]]:
        """Every indexed (queue, group) (of one `queue`), ordered by name, from the index
        alone (see `Planner.group_names`)."""
        return self.execute(self.plans.group_names(queue))

    def group_page(
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
        return self.execute(
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

    def groups(
        self, now_ns: int | None = None, ttl_ms: int | None = None, *, details: bool = False
    ) -> list[GroupPresence]:
        """Every tracked or declared group with its consumers by state, its `min_active`
        (None: not declared) and whether it has fewer active consumers (`details`: and its
        oldest heartbeat and leases, see `Planner.groups`)."""
        return self.execute(self.plans.groups(now_ns, ttl_ms, details=details))

    def set_stuck_after(
        self, stuck_after_ms: int | None, *, queue: str | None = None, group: str | None = None
    ) -> None:
        """Store the progress budget every reader shares, for the prefix or one group (None:
        forget it); reads whose `stuck_after_ms` is None use it."""
        return self.execute(self.plans.set_stuck_after(stuck_after_ms, queue=queue, group=group))

    def stuck_after(self, queue: str | None = None, group: str | None = None) -> int:
        """The shared progress budget of one group (or of the prefix)."""
        return (self.execute(self.plans.stuck_after(queue, group)))[0]

    def stuck_after_source(
        self, queue: str | None = None, group: str | None = None
    ) -> tuple[int, str]:
        """`stuck_after` and where it comes from: ``"group"``, ``"prefix"`` or ``"default"``."""
        return self.execute(self.plans.stuck_after(queue, group))

    def set_ttl(
        self, ttl_ms: int | None, *, queue: str | None = None, group: str | None = None
    ) -> None:
        """Store the TTL every broker and reader shares, for the prefix or one group (None:
        forget it); reads whose `ttl_ms` is None use it."""
        return self.execute(self.plans.set_ttl(ttl_ms, queue=queue, group=group))

    def ttl(self, queue: str | None = None, group: str | None = None) -> int:
        """The shared TTL of one group (or of the prefix), as reads with `ttl_ms` None use it."""
        return (self.execute(self.plans.ttl(queue, group)))[0]

    def ttl_source(self, queue: str | None = None, group: str | None = None) -> tuple[int, str]:
        """`ttl` and where it comes from: ``"group"``, ``"prefix"`` or ``"default"``."""
        return self.execute(self.plans.ttl(queue, group))

    def ttl_sources(
        self, groups: Iterable[tuple[str, str]]
    ) -> dict[tuple[str, str], tuple[int, str]]:
        """`ttl_source` of each `(queue, group)`, read in batches."""
        return dict(self.execute(self.plans.ttl_sources(groups)))

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
        return self.execute(
            self.plans.changes(cursor, now_ns=now_ns, queue=queue, group=group, limit=limit)
        )

    def migrate(self) -> int:
        """Move the index of release 0.1 into this release's (see `Planner.migrate`)."""
        return self.execute(self.plans.migrate())

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
        and a new `FollowSnapshot` whenever the log was trimmed past its cursor. With
        `cursor` (from `changes` or a `FollowCursor`), it goes on from there at once,
        without the first snapshot."""
        interval = check_interval_s(interval_s)
        if cursor is not None:
            Cursor.decode(cursor)
        while True:
            wait = cursor is None
            if cursor is None:
                message = self.execute(self.plans.snapshot_cursor(queue=queue, group=group))
                yield message
                cursor = message.cursor
            try:
                while True:
                    if wait:
                        time.sleep(interval)
                    page = self.changes(cursor, queue=queue, group=group)
                    events, cursor = page
                    wait = not page.more  # a window given in pages goes on at once
                    yield from events
                    yield FollowCursor(cursor, Cursor.decode(cursor).now_ns)
            except PresenceResyncRequired:
                cursor = None

    def __len__(self) -> int:
        return self.execute(self.plans.size())

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
        if type(plan) is Single:  # one script call, sent directly: no generator to step
            try:
                result: T = plan.then(self._send_single(plan))
            except DRIVER_ERRORS as exc:
                run = Run(plan, answered=[exc])
            else:
                if self.policy_check.due:
                    self._check_policy()
                return result
        else:
            run = Run(plan)
        while run.batch is not None:
            run.feed(self._transport(run.batch))
        if self.policy_check.due:
            self._check_policy()
        return run.result  # type: ignore[return-value]

    def _check_policy(self) -> None:
        """The registry's one check of ``maxmemory-policy`` (`Executor.policy_check`)."""
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
        run = Run(stream.plan)
        while run.batch is not None:
            run.feed(self._transport(run.batch))
            for _, rows in stream.groups:
                yield from rows
            stream.groups.clear()
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
            packed = prebuilt(batch)
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
        if type(request) is ScriptCall and request.packed is not None:
            return self._on_connection(_round_trips, request.packed, 1)[0]
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
        """A single beat: its prebuilt RESP written to a pooled connection and the reply
        read back, under the client's own retry policy; else through ``execute_command``."""
        if plan.packed is None:
            return self._command(*plan.args)
        return self._on_connection(_round_trip, plan.packed)

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

"""RedisPresenceRegistry: presence shared by every broker through Redis (synchronous I/O)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any, TypeVar

from ._executor import (
    REPLY_ERRORS,
    RESEND,
    Executor,
    Run,
    by_node,
    command_args,
    single,
)
from .errors import DRIVER_ERRORS, translate
from .model import DEFAULT_PRESENCE_TTL_MS, ConsumerPresence
from .plans import Command, Plan, Request, ScriptCall, Single, Transaction
from .urls import open_client
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

    With ``read_only=True`` (e.g. a client of a replica) reads run their scripts with
    ``EVALSHA_RO`` (Redis 7+) and every write raises `PresenceReadOnlyError`.

    Every method builds a plan with `plans` and runs it with `execute`; so can your code,
    to compose operations (the reporters do).
    """

    @classmethod
    def from_url(
        cls, url: str, *, prefix: str = "presence", read_only: bool = False, **redis_kwargs: Any
    ) -> RedisPresenceRegistry:
        """A registry on a new client for `url`: ``redis://``, ``rediss://``, ``unix://``,
        or ``redis+cluster://`` / ``rediss+cluster://`` for a Redis Cluster."""
        registry = cls(open_client(url, **redis_kwargs), prefix=prefix, read_only=read_only)
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
    ) -> None:
        """Record or refresh one consumer in one atomic script call (one round trip)."""
        return self.execute(self.plans.heartbeat(queue, group, consumer, lease_count, now_ns))

    def heartbeat_many(self, beats: Iterable[Beat], now_ns: int | None = None) -> int:
        """Write many ``(queue, group, consumer, lease_count)`` beats, each atomically, in one
        script call (one per queue on a cluster); returns how many."""
        return self.execute(self.plans.heartbeat_many(beats, now_ns))

    def snapshot(
        self, now_ns: int | None = None, ttl_ms: int = DEFAULT_PRESENCE_TTL_MS
    ) -> list[ConsumerPresence]:
        """Every tracked consumer, ordered by `(queue, group, consumer)`, expired ones too."""
        return self.execute(self.plans.snapshot(now_ns, ttl_ms))

    def count_active_by_group(
        self, now_ns: int | None = None, ttl_ms: int = DEFAULT_PRESENCE_TTL_MS
    ) -> dict[tuple[str, str], int]:
        """Active consumers per `(queue, group)`; groups without one have no key."""
        return self.execute(self.plans.count_active_by_group(now_ns, ttl_ms))

    def prune_expired(
        self, now_ns: int | None = None, ttl_ms: int = DEFAULT_PRESENCE_TTL_MS
    ) -> int:
        """Remove exactly the consumers `snapshot` would call expired; returns how many."""
        return self.execute(self.plans.prune_expired(now_ns, ttl_ms))

    def deregister(self, queue: str, group: str, consumer: str) -> bool:
        """Forget one consumer (graceful shutdown); returns whether it was tracked."""
        return self.execute(self.plans.deregister(queue, group, consumer))

    def __len__(self) -> int:
        return self.execute(self.plans.size())

    # -- lifecycle ------------------------------------------------------------------

    def close(self) -> None:
        """Close the client if this registry opened it (`from_url`)."""
        if self._owns_client:
            self._client.close()

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
                return plan.then(self._client.execute_command(*plan.args))  # type: ignore[no-any-return]
            except DRIVER_ERRORS as exc:
                run = Run(plan, answered=[exc])
        else:
            run = Run(plan)
        while run.batch is not None:
            run.feed(self._transport(run.batch))
        return run.result  # type: ignore[return-value]

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
            if any(isinstance(request, Transaction) for request in batch):
                return [self._one(request) for request in batch]
            return self._pipeline(self._client, batch)  # type: ignore[arg-type]
        replies: list[Any] = [None] * len(batch)
        nodes, alone = by_node(self._client, batch)
        for i in alone:
            replies[i] = self._one(batch[i])
        for node, positions in nodes:
            connection = self._client.get_redis_connection(node)
            part = [batch[i] for i in positions]
            try:
                answers = self._pipeline(connection, part)  # type: ignore[arg-type]
            except RESEND as exc:
                answers = [exc] * len(part)
            for i, reply in zip(positions, answers, strict=True):
                # Not run (the slot moved, the node failed): the cluster client sends it again.
                replies[i] = self._one(batch[i]) if isinstance(reply, RESEND) else reply
        return replies

    @staticmethod
    def _pipeline(
        client: Any, batch: Sequence[ScriptCall | Command], *, transaction: bool = False
    ) -> list[Any]:
        pipe = client.pipeline(transaction=transaction)
        for request in batch:
            pipe.execute_command(*command_args(request))
        return list(pipe.execute(raise_on_error=False))

    def _one(self, request: Request) -> Any:
        try:
            if isinstance(request, Transaction):
                return self._pipeline(self._client, request.commands, transaction=True)
            args, options = single(self._client, request, self.clustered)
            return self._client.execute_command(*args, **options)
        except REPLY_ERRORS as exc:
            return exc

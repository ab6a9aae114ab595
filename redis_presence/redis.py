"""RedisPresenceRegistry: presence shared by every broker through Redis (synchronous I/O)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any, TypeVar

from redis.exceptions import NoScriptError

from .core import (
    DRIVER_ERRORS,
    Command,
    Eval,
    EvalSha,
    Plan,
    PlannedRegistry,
    Request,
    Transaction,
    is_cluster_client,
    pipelinable,
)
from .errors import translate
from .model import DEFAULT_PRESENCE_TTL_MS, ConsumerPresence
from .urls import open_client
from .validation import Beat

T = TypeVar("T")

__all__ = ["RedisPresenceRegistry", "is_cluster_client"]


class RedisPresenceRegistry(PlannedRegistry):
    """Consumer presence in Redis: the same answer for every broker that shares the server.

    `client` is any redis-py client (``redis.Redis``, a fakeredis client, a
    ``redis.cluster.RedisCluster``). With ``now_ns=None`` every operation uses the Redis
    server's clock, so brokers whose own clocks disagree still agree on ages.
    Redis-side failures raise `PresenceError` subclasses; bad arguments raise
    `TypeError` / `ValueError` before anything is written.

    With ``read_only=True`` (e.g. a client of a replica) reads run their scripts with
    ``EVALSHA_RO`` (Redis 7+) and every write raises `PresenceReadOnlyError`.
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
        call = self._beat_call(queue, group, consumer, lease_count, now_ns)
        try:
            if self._eval_sha("heartbeat", call):
                self._one(self._plans.beat_listing(queue, group))
        except DRIVER_ERRORS as exc:
            raise translate(exc) from exc

    def heartbeat_many(self, beats: Iterable[Beat], now_ns: int | None = None) -> int:
        """Write many ``(queue, group, consumer, lease_count)`` beats, each atomically, in one
        script call (one per queue on a cluster); returns how many."""
        return self._run(self._plan_heartbeat_many(beats, now_ns))

    def snapshot(
        self, now_ns: int | None = None, ttl_ms: int = DEFAULT_PRESENCE_TTL_MS
    ) -> list[ConsumerPresence]:
        """Every tracked consumer, ordered by `(queue, group, consumer)`, expired ones too."""
        return self._run(self._plan_snapshot(now_ns, ttl_ms))

    def count_active_by_group(
        self, now_ns: int | None = None, ttl_ms: int = DEFAULT_PRESENCE_TTL_MS
    ) -> dict[tuple[str, str], int]:
        """Active consumers per `(queue, group)`; groups without one have no key."""
        return self._run(self._plan_count(now_ns, ttl_ms))

    def prune_expired(
        self, now_ns: int | None = None, ttl_ms: int = DEFAULT_PRESENCE_TTL_MS
    ) -> int:
        """Remove exactly the consumers `snapshot` would call expired; returns how many."""
        return self._run(self._plan_prune(now_ns, ttl_ms))

    def deregister(self, queue: str, group: str, consumer: str) -> bool:
        """Forget one consumer (graceful shutdown); returns whether it was tracked."""
        return self._run(self._plan_deregister(queue, group, consumer))

    def __len__(self) -> int:
        return self._run(self._plan_size())

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

    # -- I/O ------------------------------------------------------------------------

    def _run(self, plan: Plan[T]) -> T:
        try:
            batch = next(plan)
            while True:
                batch = plan.send(self._execute(batch))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        except DRIVER_ERRORS as exc:
            raise translate(exc) from exc

    def _execute(self, batch: list[Request]) -> list[Any]:
        """One batch: plain commands in one pipeline; scripts and transactions one by one (on
        a cluster the pipeline refuses EVALSHA, and each carries a whole queue)."""
        if pipelinable(batch):
            return self._pipeline(batch, transaction=False)
        return [self._one(request) for request in batch]

    def _pipeline(self, commands: Sequence[Command], *, transaction: bool) -> list[Any]:
        pipe = self._client.pipeline(transaction=transaction)
        for command in commands:
            pipe.execute_command(command.name, *command.args)
        return list(pipe.execute())

    def _one(self, request: Request) -> Any:
        if isinstance(request, Eval):
            if not self._read_only:
                return self._scripts[request.script](keys=request.keys, args=request.args)
            request = self._read_only_call(request)
        if isinstance(request, EvalSha):
            return self._eval_sha(request.script, request.args)
        if isinstance(request, Transaction):
            return self._pipeline(request.commands, transaction=True)
        if request.node_key is not None:
            node = self._client.get_node_from_key(request.node_key)
            return self._client.execute_command(request.name, *request.args, target_nodes=node)
        return self._client.execute_command(request.name, *request.args)

    def _eval_sha(self, script: str, args: tuple[Any, ...]) -> Any:
        """A prebuilt ``EVALSHA``/``EVALSHA_RO`` of `script`; after ``NOSCRIPT``, load the
        script and send it again."""
        try:
            return self._client.execute_command(*args)
        except NoScriptError:
            sha = self._client.script_load(self._script_source(script))
            return self._client.execute_command(args[0], sha, *args[2:])

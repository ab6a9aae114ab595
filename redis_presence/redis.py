"""RedisPresenceRegistry: presence shared by every broker through Redis (synchronous I/O)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any, TypeVar

from redis.exceptions import (
    AskError,
    ClusterDownError,
    NoScriptError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .core import (
    DRIVER_ERRORS,
    Command,
    Eval,
    EvalSha,
    Plan,
    PlannedRegistry,
    Request,
    Transaction,
    all_scripts,
    is_cluster_client,
    pipelinable,
)
from .errors import translate
from .model import DEFAULT_PRESENCE_TTL_MS, ConsumerPresence
from .urls import open_client
from .validation import Beat

T = TypeVar("T")

_RESEND = object()
"""A node pipeline's stand-in reply for a call to send again through the cluster client."""
_RESENT_ERRORS = (NoScriptError, AskError, TryAgainError, ClusterDownError)
"""Replies after which a script did not run and the cluster client knows what to do
(``MovedError`` is an ``AskError``)."""

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
        """One batch: plain commands in one pipeline; on a cluster, the per-queue script
        calls in one pipeline per node; anything else (transactions) one by one."""
        if pipelinable(batch):
            return self._pipeline(batch, transaction=False)
        if self.clustered and len(batch) > 1 and all_scripts(batch):
            return self._scripts_by_node([self._sha_call(request) for request in batch])
        return [self._one(request) for request in batch]

    def _scripts_by_node(self, calls: list[EvalSha]) -> list[Any]:
        """Cluster: script calls (one per queue) sent in one plain pipeline per node, since
        redis-py's cluster pipeline refuses EVALSHA: one round trip per node instead of one
        per queue. A call answered ``MOVED``/``ASK``/``TRYAGAIN``/``CLUSTERDOWN`` (its slot
        is moving; the script did not run) or ``NOSCRIPT``, and every call of a node whose
        connection failed, is sent again on its own through the cluster client, which
        follows redirections, refreshes the slot map and loads scripts. Another error is
        raised once every node has answered."""
        nodes: dict[str, tuple[Any, list[int]]] = {}
        for i, call in enumerate(calls):
            node = self._client.get_node_from_key(call.args[3])  # the call's first key
            nodes.setdefault(node.name, (node, []))[1].append(i)
        replies: list[Any] = [None] * len(calls)
        failure: Exception | None = None
        for node, indexes in nodes.values():
            pipe = self._client.get_redis_connection(node).pipeline(transaction=False)
            for i in indexes:
                pipe.execute_command(*calls[i].args)
            try:
                answers = pipe.execute(raise_on_error=False)
            except (RedisConnectionError, RedisTimeoutError):
                answers = [_RESEND] * len(indexes)
            for i, reply in zip(indexes, answers, strict=True):
                if reply is _RESEND or isinstance(reply, _RESENT_ERRORS):
                    replies[i] = self._eval_sha(calls[i].script, calls[i].args)
                    continue
                if isinstance(reply, Exception):
                    failure = failure or reply
                replies[i] = reply
        if failure is not None:
            raise failure
        return replies

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

"""AsyncRedisPresenceRegistry: the Redis registry for asyncio brokers (``redis.asyncio``).

It shares set-up, validation, plans, scripts and row decoding with `RedisPresenceRegistry`
(`core.PlannedRegistry`); only the execution of a plan's batches is asynchronous.
"""

from __future__ import annotations

import asyncio
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
    pipelinable,
)
from .errors import translate
from .model import DEFAULT_PRESENCE_TTL_MS, ConsumerPresence
from .urls import open_async_client
from .validation import Beat

T = TypeVar("T")

__all__ = ["AsyncRedisPresenceRegistry"]


class AsyncRedisPresenceRegistry(PlannedRegistry):
    """`RedisPresenceRegistry` with coroutine methods, over ``redis.asyncio`` clients.

    `client` is a ``redis.asyncio.Redis`` or a ``redis.asyncio.cluster.RedisCluster``. The
    methods and their answers are those of the sync registry; ``len()`` cannot be awaited,
    so the number of tracked consumers is ``await registry.size()``. On a cluster the
    per-queue script calls of one operation run concurrently. ``read_only=True`` works as
    in the sync registry (reads with ``EVALSHA_RO``, writes refused).
    """

    @classmethod
    def from_url(
        cls, url: str, *, prefix: str = "presence", read_only: bool = False, **redis_kwargs: Any
    ) -> AsyncRedisPresenceRegistry:
        """A registry on a new asyncio client for `url` (the schemes of
        `RedisPresenceRegistry.from_url`); `aclose` closes that client."""
        registry = cls(open_async_client(url, **redis_kwargs), prefix=prefix, read_only=read_only)
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
    ) -> None:
        """Record or refresh one consumer in one atomic script call (one round trip)."""
        call = self._beat_call(queue, group, consumer, lease_count, now_ns)
        try:
            if await self._eval_sha("heartbeat", call):
                await self._one(self._plans.beat_listing(queue, group))
        except DRIVER_ERRORS as exc:
            raise translate(exc) from exc

    async def heartbeat_many(self, beats: Iterable[Beat], now_ns: int | None = None) -> int:
        """Write many ``(queue, group, consumer, lease_count)`` beats, each atomically, in one
        script call (one per queue on a cluster, sent concurrently); returns how many."""
        return await self._run(self._plan_heartbeat_many(beats, now_ns))

    async def snapshot(
        self, now_ns: int | None = None, ttl_ms: int = DEFAULT_PRESENCE_TTL_MS
    ) -> list[ConsumerPresence]:
        """Every tracked consumer, ordered by `(queue, group, consumer)`, expired ones too."""
        return await self._run(self._plan_snapshot(now_ns, ttl_ms))

    async def count_active_by_group(
        self, now_ns: int | None = None, ttl_ms: int = DEFAULT_PRESENCE_TTL_MS
    ) -> dict[tuple[str, str], int]:
        """Active consumers per `(queue, group)`; groups without one have no key."""
        return await self._run(self._plan_count(now_ns, ttl_ms))

    async def prune_expired(
        self, now_ns: int | None = None, ttl_ms: int = DEFAULT_PRESENCE_TTL_MS
    ) -> int:
        """Remove exactly the consumers `snapshot` would call expired; returns how many."""
        return await self._run(self._plan_prune(now_ns, ttl_ms))

    async def deregister(self, queue: str, group: str, consumer: str) -> bool:
        """Forget one consumer (graceful shutdown); returns whether it was tracked."""
        return await self._run(self._plan_deregister(queue, group, consumer))

    async def size(self) -> int:
        """How many consumers are tracked, in every state (the sync registry's ``len()``)."""
        return await self._run(self._plan_size())

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

    # -- I/O ------------------------------------------------------------------------

    async def _run(self, plan: Plan[T]) -> T:
        try:
            batch = next(plan)
            while True:
                batch = plan.send(await self._execute(batch))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        except DRIVER_ERRORS as exc:
            raise translate(exc) from exc

    async def _execute(self, batch: list[Request]) -> list[Any]:
        """One batch: plain commands in one pipeline; script calls and transactions (one per
        queue on a cluster) concurrently."""
        if pipelinable(batch):
            return await self._pipeline(batch, transaction=False)
        if self.clustered and len(batch) > 1:
            # Map the slots once before the calls run concurrently: each would otherwise
            # start the mapping itself, redis-py's cluster client then closes connections
            # other calls are using, and it resends calls the server already ran.
            await self._client.initialize()
        return list(await asyncio.gather(*(self._one(request) for request in batch)))

    async def _pipeline(self, commands: Sequence[Command], *, transaction: bool) -> list[Any]:
        pipe = self._client.pipeline(transaction=transaction)
        for command in commands:
            pipe.execute_command(command.name, *command.args)
        return list(await pipe.execute())

    async def _one(self, request: Request) -> Any:
        if isinstance(request, Eval):
            if not self._read_only:
                return await self._scripts[request.script](keys=request.keys, args=request.args)
            request = self._read_only_call(request)
        if isinstance(request, EvalSha):
            return await self._eval_sha(request.script, request.args)
        if isinstance(request, Transaction):
            return await self._pipeline(request.commands, transaction=True)
        if request.node_key is not None:
            await self._client.initialize()  # the slot map, before it is first used
            node = self._client.get_node_from_key(request.node_key)
            return await self._client.execute_command(
                request.name, *request.args, target_nodes=node
            )
        return await self._client.execute_command(request.name, *request.args)

    async def _eval_sha(self, script: str, args: tuple[Any, ...]) -> Any:
        """A prebuilt ``EVALSHA``/``EVALSHA_RO`` of `script`; after ``NOSCRIPT``, load the
        script and send it again."""
        try:
            return await self._client.execute_command(*args)
        except NoScriptError:
            sha = await self._client.script_load(self._script_source(script))
            return await self._client.execute_command(args[0], sha, *args[2:])

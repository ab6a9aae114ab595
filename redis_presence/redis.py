"""RedisPresenceRegistry: presence shared by every broker through Redis (synchronous I/O)."""

from __future__ import annotations

from collections.abc import Iterable
from types import TracebackType
from typing import Any, TypeVar

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.exceptions import RedisError

from .core import Command, Eval, Plan, Planner, Request
from .errors import translate
from .keys import Keyspace
from .model import DEFAULT_PRESENCE_TTL_MS, ConsumerPresence
from .scripts import SCRIPT_NAMES, source
from .urls import open_client
from .validation import (
    Beat,
    check_beats,
    check_lease_count,
    check_now_ns,
    check_triple,
    check_ttl_ms,
)

T = TypeVar("T")


def is_cluster_client(client: Any) -> bool:
    """Whether `client` is a redis-py cluster client (sync or asyncio)."""
    return isinstance(client, RedisCluster | AsyncRedisCluster)


class RedisPresenceRegistry:
    """Consumer presence in Redis: the same answer for every broker that shares the server.

    `client` is any redis-py client (``redis.Redis``, a fakeredis client, a
    ``redis.cluster.RedisCluster``). With ``now_ns=None`` every operation uses the Redis
    server's clock, so brokers whose own clocks disagree still agree on ages.
    Redis-side failures raise `PresenceError` subclasses; bad arguments raise
    `TypeError` / `ValueError` before anything is written.
    """

    def __init__(self, client: Any, *, prefix: str = "presence") -> None:
        self._client = client
        self._plans = Planner(Keyspace(prefix), clustered=is_cluster_client(client))
        self._scripts = {name: client.register_script(source(name)) for name in SCRIPT_NAMES}
        self._owns_client = False

    @classmethod
    def from_url(
        cls, url: str, *, prefix: str = "presence", **redis_kwargs: Any
    ) -> RedisPresenceRegistry:
        """A registry on a new client for `url` (``redis://``, ``rediss://``, ``unix://``)."""
        registry = cls(open_client(url, **redis_kwargs), prefix=prefix)
        registry._owns_client = True
        return registry

    @property
    def prefix(self) -> str:
        """The key prefix; registries with different prefixes never see each other."""
        return self._plans.keys.prefix

    @property
    def client(self) -> Any:
        """The redis-py client this registry talks through."""
        return self._client

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
        queue, group, consumer = check_triple(queue, group, consumer)
        lease = check_lease_count(lease_count)
        now = check_now_ns(now_ns)
        self._run(self._plans.heartbeat([(queue, group, consumer, lease, 0)], now))

    def heartbeat_many(self, beats: Iterable[Beat], now_ns: int | None = None) -> int:
        """Write many ``(queue, group, consumer, lease_count)`` beats in as few calls as
        possible (one script call, or one per queue on a cluster); returns how many."""
        checked = check_beats(beats)
        now = check_now_ns(now_ns)
        if not checked:
            return 0
        return self._run(self._plans.heartbeat([(*b, 0) for b in checked], now))

    def snapshot(
        self, now_ns: int | None = None, ttl_ms: int = DEFAULT_PRESENCE_TTL_MS
    ) -> list[ConsumerPresence]:
        """Every tracked consumer, ordered by `(queue, group, consumer)`, expired ones too."""
        ttl = check_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        return self._run(self._plans.snapshot(now, ttl))

    def count_active_by_group(
        self, now_ns: int | None = None, ttl_ms: int = DEFAULT_PRESENCE_TTL_MS
    ) -> dict[tuple[str, str], int]:
        """Active consumers per `(queue, group)`; groups without one have no key."""
        ttl = check_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        return self._run(self._plans.count_active_by_group(now, ttl))

    def prune_expired(
        self, now_ns: int | None = None, ttl_ms: int = DEFAULT_PRESENCE_TTL_MS
    ) -> int:
        """Remove exactly the consumers `snapshot` would call expired; returns how many."""
        ttl = check_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        return self._run(self._plans.prune_expired(now, ttl))

    def deregister(self, queue: str, group: str, consumer: str) -> bool:
        """Forget one consumer (graceful shutdown); returns whether it was tracked."""
        queue, group, consumer = check_triple(queue, group, consumer)
        return self._run(self._plans.deregister(queue, group, consumer))

    def __len__(self) -> int:
        return self._run(self._plans.size())

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

    def __repr__(self) -> str:
        return f"RedisPresenceRegistry({self._client!r}, prefix={self.prefix!r})"

    # -- I/O ------------------------------------------------------------------------

    def _run(self, plan: Plan[T]) -> T:
        try:
            batch = next(plan)
            while True:
                batch = plan.send(self._execute(batch))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        except RedisError as exc:
            raise translate(exc) from exc

    def _execute(self, batch: list[Request]) -> list[Any]:
        if len(batch) > 1 and all(isinstance(request, Command) for request in batch):
            pipe = self._client.pipeline(transaction=False)
            for request in batch:
                assert isinstance(request, Command)
                pipe.execute_command(request.name, *request.args)
            return list(pipe.execute())
        return [self._one(request) for request in batch]

    def _one(self, request: Request) -> Any:
        if isinstance(request, Eval):
            return self._scripts[request.script](keys=request.keys, args=request.args)
        return self._client.execute_command(request.name, *request.args)

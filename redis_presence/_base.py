"""`RegistryBase`: what the sync and async registries are built on, apart from how they run
plans: set-up from a client or a URL, the planner, the client's `Wire`, the policy check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ._executor import Functions
from ._routing import DEFAULT_CLUSTER_RETRY_MS, check_cluster_retry_ms, is_cluster_client
from ._wire import Wire, hiredis_packer
from .events import DEFAULT_EVENTS_KEPT
from .model import DEFAULT_MAX_FUTURE_MS
from .plans import Limits, Planner
from .policy import PolicyCheck

E = TypeVar("E", bound="RegistryBase")


class RegistryBase:
    """The part of a registry that is neither sync nor async: its client, its planner and
    its client's `Wire`.

    `plans` builds the plans of every operation (`redis_presence.plans.Planner`); the
    subclass's ``execute`` runs them, and its `Wire` says how its transport writes them.
    """

    packs = False
    """Whether this registry can write prebuilt commands on its client's connections itself
    (the heartbeats': `redis_presence._wire`), which it does on a standalone client with a
    connection pool (`sends_prebuilt`)."""

    _open: Callable[..., Any]
    """Opens a client for a URL: `clients.open_client` or `clients.open_async_client`."""

    @classmethod
    def from_url(
        cls: type[E],
        url: str,
        *,
        prefix: str = "presence",
        read_only: bool = False,
        limits: Limits = Limits(),  # noqa: B008 (an immutable tuple)
        max_future_ms: int | None = DEFAULT_MAX_FUTURE_MS,
        events_kept: int = DEFAULT_EVENTS_KEPT,
        cluster_retry_ms: int = DEFAULT_CLUSTER_RETRY_MS,
        instance: str | None = None,
        **redis_kwargs: Any,
    ) -> E:
        """A registry on a new client for `url`: ``redis://``, ``rediss://``, ``unix://``,
        ``redis+cluster://`` / ``rediss+cluster://`` for a Redis Cluster (several startup
        nodes, comma-separated), or ``redis+sentinel://`` / ``rediss+sentinel://`` for the
        primary that Sentinel names (`redis_presence.urls`); closing the registry (``close``,
        ``aclose`` for asyncio) closes that client. A malformed URL is a
        `PresenceConfigError`, its password hidden. The registry's own options are those of
        the constructor; every other keyword goes to redis-py."""
        client = cls._open(url, **redis_kwargs)
        registry = cls(
            client,
            prefix=prefix,
            read_only=read_only,
            limits=limits,
            max_future_ms=max_future_ms,
            events_kept=events_kept,
            cluster_retry_ms=cluster_retry_ms,
            instance=instance,
        )
        registry._owns_client = True
        return registry

    @classmethod
    def sends_prebuilt(cls, client: Any) -> bool:
        """Whether this registry writes prebuilt commands on `client`'s connections itself:
        then, and only then, its `Wire` builds them."""
        return cls.packs and not is_cluster_client(client) and hasattr(client, "connection_pool")

    def __init__(
        self,
        client: Any,
        *,
        prefix: str = "presence",
        read_only: bool = False,
        limits: Limits = Limits(),  # noqa: B008 (an immutable tuple)
        events_kept: int = DEFAULT_EVENTS_KEPT,
        max_future_ms: int | None = DEFAULT_MAX_FUTURE_MS,
        cluster_retry_ms: int = DEFAULT_CLUSTER_RETRY_MS,
        instance: str | None = None,
    ) -> None:
        self.cluster_retry_ms = check_cluster_retry_ms(cluster_retry_ms)
        """On a cluster, how long a request whose slot is on the move (a slot migration) is
        sent again before it fails with `PresenceClusterMigratingError`."""
        get_encoder = getattr(client, "get_encoder", None)
        encoder = get_encoder() if get_encoder is not None else None
        clustered = is_cluster_client(client)
        self.plans = Planner(
            prefix,
            clustered=clustered,
            read_only=read_only,
            limits=limits,
            events_kept=events_kept,
            max_future_ms=max_future_ms,
            instance=instance,
        )
        # How this registry's transport writes commands, and which it sends prebuilt.
        self._wire = Wire(
            (
                getattr(encoder, "encoding", "utf-8"),
                getattr(encoder, "encoding_errors", "strict"),
            ),
            hiredis_packer(client),
            prebuilt=encoder is not None and self.sends_prebuilt(client),
        )
        self._client = client
        self._owns_client = False
        self.functions = Functions()
        """Whether this registry calls the heartbeats by ``FCALL`` or, once the server
        refused functions, by ``EVALSHA`` (`redis_presence._executor.Functions`)."""
        self.policy_check = PolicyCheck()
        """The one check of ``maxmemory-policy`` this registry makes, after its first
        operation Redis answered: it logs one warning on the ``redis_presence`` logger when
        the policy may evict presence keys (``allkeys-*``). A user who may run neither
        ``CONFIG GET`` nor ``INFO`` gets no check and no error. ``policy_check.due = False``
        skips it."""

    @property
    def prefix(self) -> str:
        """The key prefix; registries with different prefixes never see each other."""
        return self.plans.prefix

    @property
    def client(self) -> Any:
        """The redis-py client this registry talks through."""
        return self._client

    @property
    def max_future_ms(self) -> int | None:
        """The clock guard: how far ahead of the server clock an explicit ``now_ns`` of a
        beat may be (None: no guard)."""
        return self.plans.max_future_ms

    @property
    def instance(self) -> str:
        """The instance token this registry's beats carry now (the one given, else this
        process's: `redis_presence.beats.process_instance`)."""
        return self.plans.scope.token()

    @property
    def read_only(self) -> bool:
        """Whether this registry only reads (snapshot, counts, size) and refuses writes."""
        return self.plans.read_only

    @property
    def clustered(self) -> bool:
        """Whether the client is a Redis Cluster client (per-queue scripts, index protocol)."""
        return self.plans.clustered

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._client!r}, prefix={self.prefix!r})"

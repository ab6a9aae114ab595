"""What the sync and async registries share: set-up, routing, NOSCRIPT reload, errors.

Both registries run plans (`redis_presence.plans`) the same way. Each batch goes to Redis
through the registry's own *transport*, which is the only I/O code and the only code the two
do not share: one request on its own, several in one pipeline, and on a cluster one
pipeline per node (concurrently in the async registry); a Redis error reply comes back in
the place of its request instead of being raised. Everything else is decided here, once:

- which node each request of a cluster batch goes to (`by_node`), and which replies mean
  "send it again through the cluster client" (a slot on the move, a failed node pipeline);
- how long a request sent through the cluster client is sent again while its slot is on
  the move (`SlotMoving`: redis-py follows ``TRYAGAIN`` and ``ASK`` for about 0.4 s only);
- stepping a plan (`Run`): after ``NOSCRIPT`` (a restart, ``SCRIPT FLUSH``, a new node),
  load the script and send those calls again (`after_noscript`), the one reload path for
  every script call; the first error reply of a batch is thrown into the plan as a
  `PresenceError` (a `Partial` batch gets each error in its place instead).
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any, Generic, NamedTuple, TypeVar

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.connection import ConnectionPool
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    NoScriptError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.utils import HIREDIS_AVAILABLE

from .errors import (
    PresenceClusterMigratingError,
    PresenceDataError,
    PresenceError,
    translate,
)
from .events import DEFAULT_EVENTS_KEPT
from .model import DEFAULT_MAX_FUTURE_MS
from .plans import Command, Limits, Partial, Plan, Planner, Request, ScriptCall
from .policy import PolicyCheck

T = TypeVar("T")
E = TypeVar("E", bound="Executor")

KEYLESS = frozenset(("TIME", "SCRIPT LOAD"))
"""Commands the plans send that name no key."""

REPLY_ERRORS = (ResponseError,)
"""Error replies (WRONGTYPE, NOSCRIPT, READONLY, MOVED, ACL denials, ...): a transport
returns them in place of their request; anything else it raises (connection, timeout)."""

RESEND = (AskError, TryAgainError, ClusterDownError, RedisConnectionError, RedisTimeoutError)
"""Replies after which a request sent in a node pipeline did not run, and the cluster
client knows what to do: it follows ``MOVED``/``ASK`` (``MovedError`` is an `AskError`),
waits out ``TRYAGAIN``/``CLUSTERDOWN``, and refreshes the slot map after a failed node."""


DEFAULT_CLUSTER_RETRY_MS = 2_000
"""How long a cluster request whose slot is on the move is sent again (``cluster_retry_ms``)."""

SLOT_MOVING = (ClusterError, TryAgainError, AskError)
"""What the cluster client raises while a slot migrates: ``TRYAGAIN`` (a multi-key call whose
keys are split between the two nodes, or missing on the importing one), ``ASK`` / ``MOVED``,
and redis-py's ``ClusterError("TTL exhausted.")`` once it gave up following them (about 16
redirections, 0.4 s). Not `ClusterDownError` (a `ClusterError` too): the cluster lost a
master, which is no migration (see `slot_moving`)."""

SLOT_RETRY_MIN_S = 0.01
SLOT_RETRY_MAX_S = 0.1
"""The pauses between sends while a slot moves: from 10 ms, doubling, up to 100 ms."""


def slot_moving(error: BaseException) -> bool:
    """Whether `error` says a cluster slot is on the move (`SLOT_MOVING`)."""
    return isinstance(error, SLOT_MOVING) and not isinstance(error, ClusterDownError)


def check_cluster_retry_ms(value: Any) -> int:
    """``cluster_retry_ms``: a whole number of milliseconds, 0 or more."""
    if type(value) is not int:
        raise TypeError(f"cluster_retry_ms must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"cluster_retry_ms must be 0 or more, got {value}")
    return value


class SlotMoving:
    """One request sent again while its slot is on the move: `pause_s` says how long to
    wait before the next send, from the first refusal until `bound_ms` later, then raises
    `PresenceClusterMigratingError` (chained to the last refusal)."""

    __slots__ = ("_deadline", "_pause_s", "bound_ms")

    def __init__(self, bound_ms: int) -> None:
        self.bound_ms = bound_ms
        self._deadline = time.monotonic() + bound_ms / 1000
        self._pause_s = SLOT_RETRY_MIN_S

    def pause_s(self, error: BaseException) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise PresenceClusterMigratingError(
                f"a slot of the Redis Cluster stayed on the move (TRYAGAIN, ASK or MOVED: a "
                f"slot migration) for more than {self.bound_ms} ms (cluster_retry_ms), through "
                "which the request was sent again; it did not run, and retrying it is safe"
            ) from error
        pause = min(self._pause_s, left)
        self._pause_s = min(self._pause_s * 2, SLOT_RETRY_MAX_S)
        return pause


def is_cluster_client(client: Any) -> bool:
    """Whether `client` is a redis-py cluster client (sync or asyncio)."""
    return isinstance(client, RedisCluster | AsyncRedisCluster)


def command_args(request: ScriptCall | Command) -> tuple[Any, ...]:
    """The request as ``execute_command`` arguments."""
    if isinstance(request, ScriptCall):
        return request.args
    return (request.name, *request.args)


def single(
    client: Any, request: ScriptCall | Command, clustered: bool
) -> tuple[Any, dict[str, Any]]:
    """``execute_command`` arguments and options for one request sent on its own: on a
    cluster, a command with `node_key` goes to that key's node."""
    if clustered and isinstance(request, Command) and request.node_key is not None:
        return command_args(request), {"target_nodes": client.get_node_from_key(request.node_key)}
    return command_args(request), {}


def rerouted(request: Request, clustered: bool) -> bool:
    """Whether `request`, sent alone, may be sent once more after a connection failure: on
    a cluster, a command given its node by `node_key` (redis-py does not re-route a command
    given its node, but it has refreshed its slot map when it raises, so after a failover
    choosing the node again finds the new primary)."""
    return clustered and isinstance(request, Command) and request.node_key is not None


def routing_key(request: Request) -> Any:
    """The key whose node a cluster request goes to; None for a keyless command, which the
    cluster client routes itself (``SCRIPT LOAD`` to every primary)."""
    if isinstance(request, ScriptCall):
        return request.first_key
    if request.node_key is not None:
        return request.node_key
    return None if request.name in KEYLESS or not request.args else request.args[0]


Routes = tuple[list[tuple[Any, list[int]]], list[int]]
"""A cluster batch's positions per node (each node's requests go in one pipeline), and the
positions sent on their own through the cluster client (keyless commands)."""


def by_node(client: Any, batch: Sequence[Request]) -> Routes:
    """Where each request of a cluster batch goes (`Routes`)."""
    nodes: dict[str, tuple[Any, list[int]]] = {}
    alone: list[int] = []
    for i, request in enumerate(batch):
        key = routing_key(request)
        if key is None:
            alone.append(i)
            continue
        node = client.get_node_from_key(key)
        nodes.setdefault(node.name, (node, []))[1].append(i)
    return list(nodes.values()), alone


class ScriptReload(NamedTuple):
    """What to send after a batch met ``NOSCRIPT``: each missing script's ``SCRIPT LOAD``
    (a cluster client sends it to every primary), then, once they are done, those calls
    again (the requests of one batch may run in any order)."""

    loads: list[Request]
    calls: list[Request]
    positions: list[int]
    """Where each call sent again stood in the first batch."""
    load_of: list[int]
    """Which of `loads` each call needs."""

    def merge(
        self, replies: Sequence[Any], loaded: Sequence[Any], again: Sequence[Any]
    ) -> list[Any]:
        """The first batch's replies with each call sent again in its place (or the error of
        its ``SCRIPT LOAD``, an ACL denial say, when that failed)."""
        merged = list(replies)
        for position, load, reply in zip(self.positions, self.load_of, again, strict=True):
            merged[position] = loaded[load] if isinstance(loaded[load], Exception) else reply
        return merged


def after_noscript(batch: Sequence[Request], replies: Sequence[Any]) -> ScriptReload | None:
    """The `ScriptReload` for the script calls of `batch` answered ``NOSCRIPT``, or None."""
    positions = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
    if not positions:
        return None
    loads: dict[str, int] = {}
    requests: list[Request] = []
    calls: list[Request] = []
    load_of: list[int] = []
    for i in positions:
        call = batch[i]
        if not isinstance(call, ScriptCall):  # only script calls meet NOSCRIPT
            raise TypeError(f"NOSCRIPT for a request that is no script call: {call!r}")
        if call.script.name not in loads:
            loads[call.script.name] = len(requests)
            requests.append(Command("SCRIPT LOAD", (call.script.source,)))
        load_of.append(loads[call.script.name])
        calls.append(call)
    return ScriptReload(requests, calls, positions, load_of)


def reply_error(reply: Exception, request: Request | None) -> PresenceError:
    """The `PresenceError` for the error reply to `request`: a data error of a plain command
    (Redis's WRONGTYPE names no key) says which key it met."""
    error = translate(reply)
    if isinstance(error, PresenceDataError) and isinstance(request, Command):
        key = routing_key(request)
        if key is not None:
            name = key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)
            error = PresenceDataError(f"{error} (key {name}, {request.name})")
    error.__cause__ = reply
    return error


def first_error(batch: Sequence[Request], replies: Sequence[Any]) -> PresenceError | None:
    """The `PresenceError` of the first error reply of a batch, or None."""
    for request, reply in zip(batch, replies, strict=False):
        if isinstance(reply, Exception):
            return reply_error(reply, request)
    return None


class Run(Generic[T]):
    """One plan being executed: `batch` is what to send next (None once the plan is done,
    with `result`), and `feed` takes that batch's replies, error replies in place.

    The plan's own batches go out as it yields them; when one meets ``NOSCRIPT``, the run
    first sends the missing scripts' loads, then those calls again (`after_noscript`),
    before the plan sees any reply; the first error reply left is thrown into the plan as a
    `PresenceError` (which is the operation's error unless the plan catches it), or, for a
    `Partial` batch, every error reply is given to the plan in its place. `answered` starts
    a run whose first batch was already sent (the single-call fast path, whose call met an
    error).
    """

    __slots__ = ("_loaded", "_plan", "_reload", "_replies", "_sent", "batch", "result")

    def __init__(self, plan: Plan[T], answered: list[Any] | None = None) -> None:
        self._plan = plan
        self._reload: ScriptReload | None = None
        self._replies: list[Any] = []
        self._loaded: list[Any] | None = None
        self.batch: list[Request] | None = None
        self.result: T | None = None
        self._advance(None)
        if answered is not None:
            self.feed(answered)

    def _advance(self, replies: list[Any] | None) -> None:
        try:
            self.batch = self._plan.send(replies)  # type: ignore[arg-type]
        except StopIteration as done:
            self.batch, self.result = None, done.value
        self._sent = self.batch

    def _answer(self, replies: list[Any]) -> None:
        """Give the plan the replies to its batch: each error in place for a `Partial`
        batch, else the first error thrown into it (it goes on if it catches it)."""
        sent = self._sent or []
        if isinstance(sent, Partial):
            self._advance(
                [
                    reply_error(reply, request) if isinstance(reply, Exception) else reply
                    for request, reply in zip(sent, replies, strict=True)
                ]
            )
            return
        error = first_error(sent, replies)
        if error is None:
            self._advance(list(replies))
            return
        try:
            self.batch = self._plan.throw(error)
        except StopIteration as done:
            self.batch, self.result = None, done.value
        self._sent = self.batch

    def feed(self, replies: list[Any]) -> None:
        """Take the replies to `batch`; `batch` becomes what to send next."""
        reload = self._reload
        if reload is None:
            reload = after_noscript(self._sent or [], replies)
            if reload is None:
                self._answer(replies)
                return
            self._reload, self._replies, self.batch = reload, replies, reload.loads
        elif self._loaded is None:
            self._loaded, self.batch = replies, reload.calls
        else:
            merged = reload.merge(self._replies, self._loaded, replies)
            self._reload = self._loaded = None
            self._answer(merged)


def bulk(value: bytes) -> bytes:
    """One RESP bulk string."""
    return b"$%d\r\n%s\r\n" % (len(value), value)


def resp(command: Sequence[Any], codec: tuple[str, str]) -> bytes:
    """A whole command in RESP, as redis-py's own packing writes it (`bulks` of its
    arguments after the array's length). A few times faster than the client's packing in
    pure Python, which matters for a script call carrying a thousand beats (five arguments
    each)."""
    return b"*%d\r\n" % len(command) + bulks(command, codec)


def bulks(args: Iterable[Any], codec: tuple[str, str]) -> bytes:
    """Arguments as RESP bulk strings, one after the other: `str` (encoded with `codec`, the
    client's encoding and its error handler), `int` or `bytes`."""
    encoding, errors = codec
    parts = []
    for arg in args:
        kind = type(arg)
        if kind is str:
            data = arg.encode(encoding, errors)
        elif kind is int:
            data = b"%d" % arg
        elif kind is bytes:
            data = arg
        else:
            raise TypeError(f"cannot pack a {kind.__name__} argument: {arg!r:.40}")
        parts.append(b"$%d\r\n%b\r\n" % (len(data), data))
    return b"".join(parts)


class Wire:
    """The wire format of a registry's client, which only the executor knows (the planner's
    `Packing`): its argument encoder, and how its connections write a whole command
    (`pack_command` when given, else `resp` with `codec`: the client's encoding and error
    handler)."""

    __slots__ = ("_codec", "_pack", "encode")

    def __init__(
        self,
        encode: Callable[[Any], Any],
        codec: tuple[str, str] = ("utf-8", "strict"),
        pack_command: Callable[[tuple[Any, ...]], bytes] | None = None,
    ) -> None:
        self.encode = encode
        self._codec = codec
        self._pack: Callable[[tuple[Any, ...]], bytes] = pack_command or partial(resp, codec=codec)

    def command(self, args: tuple[Any, ...]) -> bytes:
        """A whole command, as the client's connections write it."""
        return self._pack(args)

    def head(self, args: tuple[Any, ...], count: int) -> bytes:
        """The start of a command of `count` arguments: `args`, its first ones."""
        return b"*%d\r\n" % count + bulks(args, self._codec)

    def beat(self, head: bytes, now: str, consumer: str, lease: int) -> bytes:
        """A single beat's whole command: its `head`, then the beat."""
        return b"".join(
            (head, bulk(now.encode()), bulk(self.encode(consumer)), bulk(b"%d" % lease))
        )


def prebuilt(batch: Sequence[Request]) -> bytes | None:
    """The batch as one write, when every request of it is a call carrying its prebuilt
    RESP (`ScriptCall.packed`); else None (it goes as a pipeline of redis-py's)."""
    packed = [r.packed for r in batch if type(r) is ScriptCall and r.packed is not None]
    return b"".join(packed) if len(packed) == len(batch) else None


def hiredis_packer(client: Any) -> Callable[[tuple[Any, ...]], bytes] | None:
    """``hiredis.pack_command`` when `client`'s connections write commands with it, else
    None. A sync redis-py client packs with hiredis whenever hiredis is available and its
    pool was given no ``command_packer`` of its own (a ``str`` goes as UTF-8, whatever the
    client's encoder says); a prebuilt call (`ScriptCall.packed`) is then the very bytes
    the client would write, and written in C, about 2.7 times faster than `resp`."""
    pool = getattr(client, "connection_pool", None)
    if not HIREDIS_AVAILABLE or not isinstance(pool, ConnectionPool):
        return None  # (an asyncio client packs in Python with its encoder, always)
    if pool.connection_kwargs.get("command_packer") is not None:
        return None
    pack: Callable[[tuple[Any, ...]], bytes] = importlib.import_module("hiredis").pack_command
    return pack


class Executor:
    """The part of a registry that is neither sync nor async: its client and its planner.

    `plans` builds the plans of every operation (`redis_presence.plans.Planner`); the
    subclass's ``execute`` runs them.
    """

    packs = False
    """Whether this registry sends prebuilt RESP itself: a single beat's (`Single.packed`)
    and the batched heartbeat's calls (`ScriptCall.packed`), on a standalone client with a
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
        )
        registry._owns_client = True
        return registry

    @classmethod
    def sends_prebuilt(cls, client: Any) -> bool:
        """Whether this registry writes prebuilt commands on `client`'s connections itself:
        then, and only then, its planner builds them."""
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
    ) -> None:
        self.cluster_retry_ms = check_cluster_retry_ms(cluster_retry_ms)
        """On a cluster, how long a request whose slot is on the move (a slot migration) is
        sent again before it fails with `PresenceClusterMigratingError`."""
        get_encoder = getattr(client, "get_encoder", None)
        encoder = get_encoder() if get_encoder is not None else None
        clustered = is_cluster_client(client)
        pack_command = hiredis_packer(client)
        codec = (
            ("utf-8", "strict")  # what hiredis writes a str as, whatever the encoder
            if pack_command is not None
            else (
                getattr(encoder, "encoding", "utf-8"),
                getattr(encoder, "encoding_errors", "strict"),
            )
        )
        self.plans = Planner(
            prefix,
            clustered=clustered,
            read_only=read_only,
            wire=Wire(encoder.encode, codec, pack_command) if encoder is not None else None,
            packed=self.sends_prebuilt(client),
            limits=limits,
            events_kept=events_kept,
            max_future_ms=max_future_ms,
        )
        self._client = client
        self._owns_client = False
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
    def read_only(self) -> bool:
        """Whether this registry only reads (snapshot, counts, size) and refuses writes."""
        return self.plans.read_only

    @property
    def clustered(self) -> bool:
        """Whether the client is a Redis Cluster client (per-queue scripts, index protocol)."""
        return self.plans.clustered

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._client!r}, prefix={self.prefix!r})"

"""Where each request of a batch goes, and what is sent again: cluster routing, the
replies a transport returns in place, and the retries while a slot moves.

Both registries' transports use it, and it decides, once:

- which node each request of a cluster batch goes to (`by_node`), and which replies mean
  "send it again through the cluster client" (a slot on the move, a failed node pipeline);
- how long a request sent through the cluster client is sent again while its slot is on
  the move (`SlotMoving`: redis-py follows ``TRYAGAIN`` and ``ASK`` for about 0.4 s only).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .errors import PresenceClusterMigratingError
from .plans import Command, Request, ScriptCall

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

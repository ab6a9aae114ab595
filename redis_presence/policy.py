"""The one check each registry makes by itself: a ``maxmemory-policy`` that may evict presence
keys.

Nothing here does I/O. `memory_policy` is an ordinary plan
(``registry.execute(memory_policy())``) that reads the policy with
`redis_presence.answers.try_command` (the step it shares with `redis_presence.doctor`), and
`PolicyCheck` is the registry's state of its one check.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from .answers import config_value, info_fields, try_command
from .errors import DRIVER_ERRORS, PresenceConnectionError, PresenceError
from .plans import Command, Plan

logger = logging.getLogger("redis_presence")

EVICTING_POLICIES = ("allkeys-lru", "allkeys-lfu", "allkeys-random")
"""Policies that may evict any key, so one of a group's keys and not another: consumers
vanish, and snapshot, counts and len disagree. ``volatile-*`` policies evict only keys with
a TTL, which presence data never has (a cluster's index marks expire, and losing one early
costs one index write)."""


def memory_policy(node_key: str | None = None) -> Plan[str | None]:
    """The server's ``maxmemory-policy``: ``CONFIG GET`` where the user may run it, else
    ``INFO memory``; None when the user may run neither (on a cluster, the policy of the node
    holding `node_key`)."""
    answer = yield from try_command(Command("CONFIG GET", ("maxmemory-policy",), node_key=node_key))
    policy = config_value(answer, "maxmemory-policy")
    if policy is None:
        answer = yield from try_command(Command("INFO", ("memory",), node_key=node_key))
        policy = info_fields(answer).get("maxmemory_policy")
    return policy


def evicts(policy: str | None) -> bool:
    """Whether `policy` may evict presence keys."""
    return policy is not None and policy.lower() in EVICTING_POLICIES


def where(client: Any, node_key: str | None = None) -> str:
    """Which server a client talks to, for messages (never a password): on a cluster, the
    node that holds `node_key`."""
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", None)
    if isinstance(kwargs, dict):
        if kwargs.get("path"):
            return f"unix:{kwargs['path']} (db {kwargs.get('db', 0)})"
        return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}/{kwargs.get('db', 0)}"
    locate = getattr(client, "get_node_from_key", None)
    if locate is not None:
        try:
            return f"the Redis Cluster node {locate(node_key).name}"
        except (*DRIVER_ERRORS, AttributeError, TypeError):
            return "a Redis Cluster"
    return "Redis"


def eviction_warning(policy: str, server: str) -> str:
    """The registry's one warning about an evicting `policy`."""
    return (
        f"Redis at {server} runs with maxmemory-policy {policy}, which may evict presence "
        "keys: consumers then vanish, and snapshot, counts and len disagree. Set "
        "maxmemory-policy to noeviction or a volatile-* policy (redis-presence doctor "
        "checks the whole deployment)"
    )


class PolicyCheck:
    """The one check of ``maxmemory-policy`` a registry makes, after its first operation
    that Redis answered (so never an extra round trip per call, and none while Redis is
    down). `due` is the flag the registry reads on each call; it turns False once the check
    is claimed, and a lost connection makes it due again."""

    __slots__ = ("_lock", "due")

    def __init__(self, enabled: bool = True) -> None:
        self.due = enabled
        self._lock = threading.Lock()

    def claim(self) -> bool:
        """Whether this caller runs the check (exactly one does, across threads)."""
        if not self._lock.acquire(blocking=False):  # never blocks, even after a fork
            return False
        try:
            claimed, self.due = self.due, False
            return claimed
        finally:
            self._lock.release()

    def done(self, policy: str | None, client: Any, node_key: str | None = None) -> None:
        """Log the warning if `policy` (read from the node of `node_key`, on a cluster) may
        evict presence keys."""
        if evicts(policy):
            logger.warning("%s", eviction_warning(str(policy), where(client, node_key)))

    def failed(self, error: PresenceError) -> None:
        """The check could not finish: after a lost connection it is due again; any other
        error (a refused login) ends it, silently (the operations report their own)."""
        if isinstance(error, PresenceConnectionError):
            self.due = True

"""The one check each registry makes by itself: a ``maxmemory-policy`` that may evict presence
keys; and `ask`, the plan step it shares with `redis_presence.doctor`.

Nothing here does I/O. `ask` sends one request as a `Partial` batch and returns its
`Answer`: the reply, or the refusal (an ACL denial) or error that Redis answered instead, so
that a check goes on where the user may not run a command; a lost connection or a refused
login ends the plan with the registry's `PresenceError`. `memory_policy` is an ordinary plan
(``registry.execute(memory_policy())``), and `PolicyCheck` is the registry's state of its one
check.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any, NamedTuple

from .errors import (
    DRIVER_ERRORS,
    PresenceAuthError,
    PresenceConnectionError,
    PresenceError,
    is_login_refusal,
    server_answered,
)
from .plans import Command, Partial, Plan

logger = logging.getLogger("redis_presence")

EVICTING_POLICIES = ("allkeys-lru", "allkeys-lfu", "allkeys-random")
"""Policies that may evict any key, so one of a group's keys and not another: consumers
vanish, and snapshot, counts and len disagree. ``volatile-*`` policies evict only keys with
a TTL, which presence data never has (a cluster's index marks expire, and losing one early
costs one index write)."""


# -- answers ------------------------------------------------------------------------------


class Answer(NamedTuple):
    """What Redis answered one request: its `reply`, or that it `refused` it (an ACL
    denial: the user may not run the command or use the key), or another error it `failed`
    with (a syntax error, an unknown or renamed command, OOM, READONLY); with the round trip's
    `elapsed_ms`."""

    reply: Any = None
    refused: str | None = None
    failed: str | None = None
    elapsed_ms: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether the command ran and answered."""
        return self.refused is None and self.failed is None

    @property
    def permitted(self) -> bool:
        """Whether the ACL let the command through (it may still have failed after that)."""
        return self.refused is None


def ask(request: Command) -> Plan[Answer]:
    """Send `request` on its own and return its `Answer`, with the round trip timed: a
    refusal or an error reply is answered; a lost connection or a refused login is raised
    (no check goes on without)."""
    started = time.perf_counter()
    (reply,) = yield Partial([request])
    elapsed_ms = (time.perf_counter() - started) * 1e3
    if not isinstance(reply, PresenceError):
        return Answer(reply, elapsed_ms=elapsed_ms)
    if not server_answered(reply) or is_login_refusal(reply):
        raise reply
    if isinstance(reply, PresenceAuthError):
        return Answer(refused=str(reply), elapsed_ms=elapsed_ms)
    return Answer(failed=str(reply), elapsed_ms=elapsed_ms)


# -- decoding replies ---------------------------------------------------------------------


def text(value: Any) -> str:
    """A reply value as text (replies are bytes or str, depending on the client)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _pairs(reply: Any) -> dict[str, Any]:
    """A map reply (a dict, or a flat list of names and values) with text names."""
    if isinstance(reply, Mapping):
        return {text(k): v for k, v in reply.items()}
    if isinstance(reply, list | tuple) and len(reply) % 2 == 0:
        return {text(k): v for k, v in zip(reply[0::2], reply[1::2], strict=True)}
    return {}


def config_value(answer: Answer, name: str) -> str | None:
    """The value of one parameter from a ``CONFIG GET name`` answer (None if not read)."""
    if not answer.ok:
        return None
    value = _pairs(answer.reply).get(name)
    return None if value is None else text(value)


def info_fields(answer: Answer) -> dict[str, str]:
    """An ``INFO`` answer as ``{field: text}`` (empty if not read)."""
    if not answer.ok:
        return {}
    reply = answer.reply
    if isinstance(reply, Mapping):
        return {text(k): text(v) for k, v in reply.items()}
    fields = {}
    for line in text(reply).splitlines():
        name, sep, value = line.partition(":")
        if sep and not name.startswith("#"):
            fields[name.strip()] = value.strip()
    return fields


# -- the registry's own check: an evicting policy -----------------------------------------


def memory_policy(node_key: str | None = None) -> Plan[str | None]:
    """The server's ``maxmemory-policy``: ``CONFIG GET`` where the user may run it, else
    ``INFO memory``; None when the user may run neither (on a cluster, the policy of the node
    holding `node_key`)."""
    answer = yield from ask(Command("CONFIG GET", ("maxmemory-policy",), node_key=node_key))
    policy = config_value(answer, "maxmemory-policy")
    if policy is None:
        answer = yield from ask(Command("INFO", ("memory",), node_key=node_key))
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

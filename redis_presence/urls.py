"""Connection URLs: opening redis-py clients and redacting credentials from messages.

``redis://``, ``rediss://`` and ``unix://`` open a ``redis.Redis`` (``redis.asyncio.Redis``).
``redis+cluster://host:port`` and ``rediss+cluster://host:port`` open a Redis Cluster client
(``redis.cluster.RedisCluster``, or its asyncio twin) from that startup node: the URL is
handed to ``RedisCluster.from_url`` with ``+cluster`` removed from the scheme.
"""

from __future__ import annotations

import re
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from .core import DRIVER_ERRORS
from .errors import PresenceConfigError, translate

CLUSTER_SUFFIX = "+cluster"
SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster")
_CREDENTIALS = re.compile(r"(?<=://)([^/@]*)@")


def redact(url: str) -> str:
    """The URL with any password replaced by ``***`` (safe for messages and logs)."""

    def hide(match: re.Match[str]) -> str:
        user, sep, _ = match.group(1).partition(":")
        return f"{user}:***@" if sep else f"{user}@" if user else "***@"

    return _CREDENTIALS.sub(hide, url, count=1)


def scheme_of(url: Any) -> str:
    """The URL's scheme, or a `PresenceConfigError` naming what is wrong."""
    if not isinstance(url, str):
        raise PresenceConfigError(f"url must be a str, got {type(url).__name__}")
    scheme, sep, rest = url.partition("://")
    if not sep or not rest:
        raise PresenceConfigError(
            f"invalid Redis URL {redact(url)!r}: expected scheme://[user:password@]host[:port][/db]"
        )
    scheme = scheme.lower()
    if scheme not in SCHEMES:
        raise PresenceConfigError(
            f"invalid Redis URL {redact(url)!r}: scheme must be one of "
            + ", ".join(f"{s}://" for s in SCHEMES)
        )
    return scheme


def is_cluster_url(url: str) -> bool:
    """Whether `url` names a Redis Cluster (``redis+cluster://``, ``rediss+cluster://``)."""
    return scheme_of(url).endswith(CLUSTER_SUFFIX)


def _open(url: str, kwargs: dict[str, Any], standalone: Any, cluster: Any) -> Any:
    scheme = scheme_of(url)
    try:
        if scheme.endswith(CLUSTER_SUFFIX):
            plain = scheme.removesuffix(CLUSTER_SUFFIX) + url[len(scheme) :]
            return cluster.from_url(plain, **kwargs)
        return standalone.from_url(url, **kwargs)
    except (ValueError, TypeError) as exc:
        raise PresenceConfigError(scrub(f"invalid Redis URL {redact(url)!r}: {exc}", url)) from None
    except DRIVER_ERRORS as exc:  # a sync cluster client connects at once to map the slots
        raise translate(exc) from exc


def open_client(url: str, **kwargs: Any) -> Any:
    """A synchronous redis-py client for `url`; only a cluster client connects at once (to
    learn the slot map), so only it can raise a `PresenceError` here."""
    return _open(url, kwargs, redis.Redis, redis.cluster.RedisCluster)


def open_async_client(url: str, **kwargs: Any) -> Any:
    """An asyncio redis-py client for `url` (no connection is made until first use)."""
    return _open(url, kwargs, redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster)


def scrub(message: str, url: str) -> str:
    """The message with the URL's password, if any, replaced by ``***``."""
    match = _CREDENTIALS.search(url)
    password = match.group(1).partition(":")[2] if match else ""
    return message.replace(password, "***") if password else message

"""Connection URLs: opening redis-py clients and redacting credentials from messages.

``redis://``, ``rediss://`` and ``unix://`` open a ``redis.Redis`` (``redis.asyncio.Redis``).
``redis+cluster://host:port`` and ``rediss+cluster://host:port`` open a Redis Cluster client
(``redis.cluster.RedisCluster``, or its asyncio twin) from that startup node: the URL is
handed to ``RedisCluster.from_url`` with ``+cluster`` removed from the scheme.

redis-py passes query parameters it does not know as strings, so the TLS options
``ssl_ca_certs``, ``ssl_certfile`` and ``ssl_keyfile`` work in the URL as well as keyword
arguments (a URL value wins over a keyword argument of the same name).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from .errors import DRIVER_ERRORS, PresenceConfigError, translate

CLUSTER_SUFFIX = "+cluster"
SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster")
TLS_FILE_OPTIONS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")


def _userinfo(url: str) -> tuple[int, int] | None:
    """Where the userinfo of `url` starts and ends: from ``://`` to the last ``@`` before
    the query, so a password written with a raw ``@``, ``/`` or ``:`` is still all userinfo.
    An ``@`` after a ``?`` counts too (a raw ``?`` in the password), unless it sits in a
    query value (``?client_name=a@b``: an ``=`` comes first)."""
    start = url.find("://")
    if start < 0:
        return None
    start += 3
    query = url.find("?", start)
    at = url.rfind("@", start, query if query >= 0 else len(url))
    if at < 0 and query >= 0:
        at = url.find("@", query)
        if at >= 0 and "=" in url[query:at]:
            at = -1
    return (start, at) if at >= 0 else None


def secrets_of(url: str) -> list[str]:
    """The URL's password as written and percent-decoded, longest first (empty without)."""
    span = _userinfo(url)
    if span is None:
        return []
    password = url[span[0] : span[1]].partition(":")[2]
    return sorted({password, unquote(password)} - {""}, key=len, reverse=True)


def redact(url: str) -> str:
    """The URL with any password replaced by ``***`` (safe for messages and logs)."""
    span = _userinfo(url)
    if span is None:
        return url
    user, sep, _ = url[span[0] : span[1]].partition(":")
    hidden = f"{user}:***" if sep else user or "***"
    return url[: span[0]] + hidden + url[span[1] :]


def scrub(message: str, url: str | None) -> str:
    """The message with the URL's password, if any, replaced by ``***``."""
    for secret in secrets_of(url) if url else ():
        message = message.replace(secret, "***")
    return message


def _check_userinfo(url: str) -> None:
    """Refuse a user name or password holding a raw ``/``, ``?`` or ``#``: the URL parser
    would end the host part there and read the rest of the password as host, port, database
    or query, and redis-py would then show pieces of it in its messages."""
    span = _userinfo(url)
    if span is not None and any(c in url[span[0] : span[1]] for c in "/?#"):
        raise PresenceConfigError(
            f"invalid Redis URL {redact(url)!r}: percent-encode '/', '?' and '#' in the user "
            "name and password (as %2F, %3F and %23)"
        )


def _check_db(url: str, scheme: str) -> None:
    """redis-py reads a non-numeric database path as db 0; refuse it instead."""
    if scheme not in ("redis", "rediss"):
        return
    span = _userinfo(url)
    rest = url[span[1] + 1 :] if span else url.partition("://")[2]
    path = rest.partition("?")[0].partition("/")[2].strip("/")
    if path and not path.isdigit():
        raise PresenceConfigError(
            f"invalid Redis URL {redact(url)!r}: the database must be a number, got {path!r}"
        )


def _check_tls_files(url: str, kwargs: Mapping[str, Any]) -> None:
    """Refuse a TLS file option naming no file: redis-py would read it at each connect and
    report ``Error 2 connecting to host:port. No such file or directory.``, naming no file."""
    try:
        query = parse_qs(urlparse(url).query)  # as redis-py parses it; the URL wins
    except ValueError:
        return  # a malformed URL: redis-py's own parse reports it
    for name in TLS_FILE_OPTIONS:
        path = query[name][0] if name in query else kwargs.get(name)
        if isinstance(path, str | os.PathLike) and not os.path.isfile(path):
            raise PresenceConfigError(scrub(f"{name} {os.fspath(path)!r}: no such file", url))


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
    _check_userinfo(url)
    _check_db(url, scheme)
    _check_tls_files(url, kwargs)
    try:
        if scheme.endswith(CLUSTER_SUFFIX):
            plain = scheme.removesuffix(CLUSTER_SUFFIX) + url[len(scheme) :]
            return cluster.from_url(plain, **kwargs)
        client = standalone.from_url(url, **kwargs)
    except (ValueError, TypeError) as exc:
        raise PresenceConfigError(scrub(f"invalid Redis URL {redact(url)!r}: {exc}", url)) from None
    except DRIVER_ERRORS as exc:  # a sync cluster client connects at once to map the slots
        raise translate(exc) from exc
    _check_options(url, client)
    return client


def _check_options(url: str, client: Any) -> None:
    """Refuse an option the connection does not take (``?ssl_certfle=``, or ``ssl_*`` on a
    plain ``redis://`` URL) now: redis-py passes unknown query parameters on, and the first
    command would fail with a bare `TypeError`. Building a connection object connects
    nothing."""
    pool = client.connection_pool
    try:
        pool.connection_class(**pool.connection_kwargs)
    except TypeError as exc:
        unknown = re.search(r"unexpected keyword argument '(\w+)'", str(exc))
        what = f"option {unknown.group(1)!r}" if unknown else "options"
        raise PresenceConfigError(
            scrub(
                f"invalid Redis URL {redact(url)!r}: a {scheme_of(url)}:// URL takes no {what}", url
            )
        ) from None


def open_client(url: str, **kwargs: Any) -> Any:
    """A synchronous redis-py client for `url`; only a cluster client connects at once (to
    learn the slot map), so only it can raise a `PresenceError` here."""
    return _open(url, kwargs, redis.Redis, redis.cluster.RedisCluster)


def open_async_client(url: str, **kwargs: Any) -> Any:
    """An asyncio redis-py client for `url` (no connection is made until first use)."""
    return _open(url, kwargs, redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster)

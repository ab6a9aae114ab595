"""Connection URLs: checking them, opening redis-py clients, and hiding credentials.

=================================================================  ==========================
``redis://[user:password@]host[:port][/db]``, ``rediss://...``     ``redis.Redis``
``unix://[user:password@]/path/to/redis.sock[?db=N]``               ``redis.Redis``
``redis+cluster://[user:password@]host[:port][,host:port,...]``     ``RedisCluster``
``redis+sentinel://[user:password@]host[:port][,host:port,...]``    the primary of
``/service_name[/db]``                                              ``service_name``
=================================================================  ==========================

``rediss+cluster://`` and ``rediss+sentinel://`` use TLS for every connection (to the
sentinels too). The asyncio openers return the ``redis.asyncio`` twins. Ports default to
6379, and to 26379 for sentinels. A cluster client tries each startup node until one
answers; a Sentinel client asks the sentinels, one after the other, where the primary of
``service_name`` is, before each new connection, so it follows a failover.

Credentials in the URL's userinfo are the data nodes' (``AUTH`` to the primary or to each
cluster node); ``?sentinel_username=`` and ``?sentinel_password=`` (or the keyword
arguments of the same names) authenticate to the sentinels. redis-py passes query
parameters it does not know as strings, so the TLS options ``ssl_ca_certs``,
``ssl_certfile`` and ``ssl_keyfile`` work in the URL as well as keyword arguments (a URL
value wins over a keyword argument of the same name).

Every client gets explicit timeouts, whatever redis-py's own defaults (none before
redis-py 6): `DEFAULT_CONNECT_TIMEOUT_S` to connect, `DEFAULT_SOCKET_TIMEOUT_S` for any
reply; ``socket_connect_timeout`` / ``socket_timeout`` as keyword arguments or URL query
parameters override them (``None`` waits forever). A standalone client's pool holds at most
``max_connections`` connections (`DEFAULT_MAX_CONNECTIONS`) and a call past them waits up
to ``pool_timeout`` seconds (`DEFAULT_POOL_TIMEOUT_S`) for one to come free, then fails
with `PresencePoolExhausted` (not "cannot reach Redis": Redis was not asked); an asyncio
client's pool follows a new event loop (its connections of an ended loop are dropped and
made again). Every malformed URL and every option
value redis-py would only refuse later is a `PresenceConfigError`, and no message carries
a password: a message names the URL only as `redact` writes it (the userinfo's and
``?password=`` / ``?sentinel_password=`` values as ``***``), and the driver's words only
where they cannot hold the URL (`driver_reason`). Nothing is masked after the fact, so no
word of a message is garbled, whatever the password (``a``, ``Redis``, ``%``).
"""

from __future__ import annotations

import asyncio
import codecs
import math
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple
from urllib.parse import parse_qsl, unquote, unquote_plus

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.connection
import redis.asyncio.sentinel
import redis.cluster
import redis.connection
import redis.sentinel
from redis.backoff import NoBackoff
from redis.exceptions import ResponseError
from redis.retry import Retry

from .errors import DRIVER_ERRORS, PresenceConfigError, PresenceError, translate

CLUSTER_SUFFIX = "+cluster"
SENTINEL_SUFFIX = "+sentinel"
SCHEMES = (
    "redis",
    "rediss",
    "unix",
    "redis+cluster",
    "rediss+cluster",
    "redis+sentinel",
    "rediss+sentinel",
)
TLS_FILE_OPTIONS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
SENTINEL_OPTIONS = ("sentinel_username", "sentinel_password")
"""Query parameters (and keyword arguments) of a Sentinel URL for the sentinels' own AUTH."""
DEFAULT_CONNECT_TIMEOUT_S = 5.0
"""How long a client waits for a TCP (or TLS) connection before the call fails."""
DEFAULT_SOCKET_TIMEOUT_S = 5.0
"""How long a client waits for any reply before the call fails (a frozen server)."""
DEFAULT_MAX_CONNECTIONS = 100
"""How many connections a standalone client's pool opens at most (``max_connections``)."""
DEFAULT_POOL_TIMEOUT_S = 5.0
"""How long a call waits for a free connection of a full pool (``pool_timeout``) before it
fails with `PresencePoolExhausted`."""
POOL_OPTIONS = ("pool_timeout",)
"""Query parameters (and keyword arguments) of the package's own pool, not redis-py's."""
MAX_DB = 2**31 - 1
REDIS_PORT = 6379
SENTINEL_PORT = 26379

_TEMPLATES = {
    "redis": "redis://[user:password@]host[:port][/db]",
    "rediss": "rediss://[user:password@]host[:port][/db]",
    "unix": "unix://[user:password@]/path/to/redis.sock[?db=N]",
    "redis+cluster": "redis+cluster://[user:password@]host[:port][,host2[:port2],...]",
    "rediss+cluster": "rediss+cluster://[user:password@]host[:port][,host2[:port2],...]",
    "redis+sentinel": "redis+sentinel://[user:password@]host[:port][,host2[:port2],...]"
    "/service_name[/db]",
    "rediss+sentinel": "rediss+sentinel://[user:password@]host[:port][,host2[:port2],...]"
    "/service_name[/db]",
}
_GENERIC_TEMPLATE = "scheme://[user:password@]host[:port][/db]"
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
_HOST = re.compile(r"\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._~%-]+")
_PLAIN_PATH = re.compile(r"[A-Za-z0-9._~%/-]*")
_SECRET_OPTION = re.compile(r"(?i)(?:^|_)password$")
_TRUE = frozenset(("1", "true", "yes", "on", "y"))
_FALSE = frozenset(("0", "false", "no", "off", "n", "f"))


# --- where the secrets are ----------------------------------------------------------------


def _after_scheme(url: str) -> int:
    """Where the part after a leading ``scheme://`` starts (0 when the URL does not start
    with one: a ``://`` later on may be part of a password)."""
    match = _SCHEME.match(url)
    return match.end() + 3 if match and url.startswith("://", match.end()) else 0


def _plain_authority(text: str) -> bool:
    """Whether `text` reads as ``host[:port][,host[:port]...]`` (or nothing at all)."""
    if not text:
        return True
    for node in text.split(","):
        host, _, port = node.rpartition(":") if not node.endswith("]") else (node, "", "")
        if not host or not _HOST.fullmatch(host) or (port and not port.isdigit()):
            return False
    return True


def _userinfo(url: str) -> tuple[int, int] | None:
    """Where the userinfo of `url` starts and ends: after ``scheme://``, up to the last
    ``@`` that is not inside a query value, so a password written with a raw ``@``, ``/``,
    ``:`` or ``?`` is still all userinfo.

    An ``@`` is a query value's (``?client_name=a@b``) only when what precedes its ``?``
    reads as ``[userinfo@]host[:port][,...][/path]`` and an ``=`` stands between the ``?``
    and the ``@``. When in doubt the longer userinfo is taken: hiding too much is harmless,
    showing a piece of a password is not."""
    start = _after_scheme(url)
    if not start:  # malformed anyway: everything up to the last "@" may be secret
        at = url.rfind("@")
        return (0, at) if at >= 0 else None
    ats = [i for i in range(start, len(url)) if url[i] == "@"]
    for at in reversed(ats):
        if not _in_query_value(url, start, at):
            return start, at
    return None


def _in_query_value(url: str, start: int, at: int) -> bool:
    for query in (i for i in range(start, at) if url[i] == "?"):
        if "=" not in url[query:at]:
            continue
        before = url[start:query]
        plain = before[before.rfind("@") + 1 :]  # without a userinfo
        authority, _, path = plain.partition("/")
        if _plain_authority(authority) and _PLAIN_PATH.fullmatch(path):
            return True
    return False


_QUERY_PAIR = re.compile(r"(?=[?&]([^&=?#]*)=([^&#]*))")
"""Every ``?name=value`` or ``&name=value``, overlapping ones too (a zero-width match)."""


def _query_secrets(url: str) -> list[tuple[int, int]]:
    """Spans of the values of ``password``-like query parameters (``?password=``,
    ``&sentinel_password=``), as written, wherever they stand (a raw ``?``, ``&`` or ``@``
    in a password can move where the query seems to start); overlapping spans merged."""
    start = _after_scheme(url)
    spans: list[tuple[int, int]] = []
    for match in _QUERY_PAIR.finditer(url, start):
        if match.group(2) and _SECRET_OPTION.search(unquote_plus(match.group(1))):
            begin, end = match.span(2)
            if spans and begin <= spans[-1][1]:
                spans[-1] = (spans[-1][0], max(end, spans[-1][1]))
            else:
                spans.append((begin, end))
    return spans


def secrets_of(url: str) -> list[str]:
    """The URL's passwords (userinfo, ``?password=``, ``?sentinel_password=``) as written
    and percent-decoded, longest first (empty without)."""
    found: set[str] = set()
    span = _userinfo(url)
    if span is not None:
        password = url[span[0] : span[1]].partition(":")[2]
        found |= {password, unquote(password)}
    for begin, end in _query_secrets(url):
        value = url[begin:end]
        found |= {value, unquote(value), unquote_plus(value)}
    return sorted(found - {""}, key=len, reverse=True)


def redact(url: str) -> str:
    """The URL with every password replaced by ``***`` (safe for messages and logs)."""
    for begin, end in reversed(_query_secrets(url)):
        url = url[:begin] + "***" + url[end:]
    span = _userinfo(url)
    if span is None:
        return url
    user, sep, _ = url[span[0] : span[1]].partition(":")
    hidden = f"{user}:***" if sep else user or "***"
    return url[: span[0]] + hidden + url[span[1] :]


_URL_TOKEN = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"()<>]+")
"""A URL written in free text (a command line's stray argument, say), up to a blank, a quote
or a bracket (a comma after it is taken as part of it: hiding too much is harmless)."""


def redact_urls(text: str) -> str:
    """`text` with every URL in it written as `redact` writes it: for words that quote what
    a user typed (click's usage errors), where a URL may stand that is no parsed one."""
    return _URL_TOKEN.sub(lambda match: redact(match.group(0)), text)


_KEYWORD = re.compile(r"unexpected keyword argument '(\w+)'")
_URL_VALUE = re.compile(r"Invalid value for '(\w+)' in connection URL")


def driver_reason(exc: BaseException) -> str:
    """Why redis-py refused a URL or an option. Its own errors name hosts, ports and
    options, never the URL, and are shown as they are; anything else (a `TypeError` or
    `ValueError`, of the URL parser say, which may quote a piece of the URL) is rebuilt
    from what it names: an option's name, else the exception's type."""
    text = str(exc)
    if isinstance(exc, DRIVER_ERRORS):
        return text or type(exc).__name__
    keyword = _KEYWORD.search(text)
    if isinstance(exc, TypeError) and keyword:
        return f"no option {keyword.group(1)!r}"
    value = _URL_VALUE.search(text)
    if isinstance(exc, ValueError) and value:
        return f"redis-py refuses the value of option {value.group(1)!r}"
    return f"redis-py refuses it ({type(exc).__name__})"


# --- parsing --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RedisUrl:
    """A checked connection URL, split into what the openers need."""

    url: str
    """As given (never put in a message without `redact`)."""
    scheme: str
    """Lower case, one of `SCHEMES`."""
    userinfo: str
    """As written, without the ``@`` (empty without)."""
    nodes: tuple[tuple[str, int], ...]
    """``(host, port)`` of every host named (none for ``unix://``)."""
    path: str
    """As written, from the first ``/`` after the hosts to the query."""
    query: str
    """As written, without the ``?``."""
    options: tuple[tuple[str, str], ...]
    """The decoded query parameters, in order."""
    db: int
    service_name: str | None
    """Sentinel URLs: the name the sentinels monitor the primary by."""

    @property
    def base(self) -> str:
        """The scheme redis-py knows: ``redis``, ``rediss`` or ``unix``."""
        return self.scheme.removesuffix(CLUSTER_SUFFIX).removesuffix(SENTINEL_SUFFIX)

    @property
    def topology(self) -> str:
        """``standalone``, ``cluster`` or ``sentinel``."""
        if self.scheme.endswith(CLUSTER_SUFFIX):
            return "cluster"
        return "sentinel" if self.scheme.endswith(SENTINEL_SUFFIX) else "standalone"

    def node_url(self, node: tuple[str, int], path: str = "", *, skip: tuple[str, ...] = ()) -> str:
        """A redis-py URL for one node, with this URL's credentials and query parameters
        (but those named in `skip`)."""
        host, port = node
        host = f"[{host}]" if ":" in host else host
        auth = f"{self.userinfo}@" if self.userinfo else ""
        query = "&".join(
            part
            for part in self.query.split("&")
            if unquote_plus(part.partition("=")[0]) not in skip
        )
        return f"{self.base}://{auth}{host}:{port}{path}{'?' if query else ''}{query}"

    def fail(self, reason: str) -> PresenceConfigError:
        """A `PresenceConfigError` naming this URL (password hidden) and `reason`."""
        return PresenceConfigError(f"invalid Redis URL {redact(self.url)!r}: {reason}")


def _malformed(url: str, reason: str) -> PresenceConfigError:
    return PresenceConfigError(f"invalid Redis URL {redact(url)!r}: {reason}")


def scheme_of(url: Any) -> str:
    """The URL's scheme (lower case), or a `PresenceConfigError` naming what is wrong."""
    if not isinstance(url, str):
        raise PresenceConfigError(f"url must be a str, got {type(url).__name__}")
    match = _SCHEME.match(url)
    named = match.group(0).lower() if match else ""
    if match is None or not url.startswith("://", match.end()):
        raise _malformed(url, f"expected {_TEMPLATES.get(named, _GENERIC_TEMPLATE)}")
    if named not in SCHEMES:
        raise _malformed(url, "scheme must be one of " + ", ".join(f"{s}://" for s in SCHEMES))
    if not url[len(named) + 3 :]:
        raise _malformed(url, f"expected {_TEMPLATES[named]}")
    return named


def is_cluster_url(url: str) -> bool:
    """Whether `url` names a Redis Cluster (``redis+cluster://``, ``rediss+cluster://``)."""
    return scheme_of(url).endswith(CLUSTER_SUFFIX)


def is_sentinel_url(url: str) -> bool:
    """Whether `url` names a primary through Sentinel (``redis+sentinel://``, ...)."""
    return scheme_of(url).endswith(SENTINEL_SUFFIX)


def parse_url(url: Any) -> RedisUrl:
    """Check `url` and split it; every malformed URL is a `PresenceConfigError` naming
    what is wrong, with the password hidden."""
    scheme = scheme_of(url)
    start = len(scheme) + 3
    span = _userinfo(url)
    userinfo = url[span[0] : span[1]] if span else ""
    if any(c in userinfo for c in "/?#"):
        raise _malformed(
            url,
            "percent-encode '/', '?' and '#' in the user name and password (as %2F, %3F and %23)",
        )
    if any(c in userinfo for c in "[]"):  # the URL parser would read an IPv6 host there
        raise _malformed(
            url, "percent-encode '[' and ']' in the user name and password (as %5B and %5D)"
        )
    rest = url[span[1] + 1 :] if span else url[start:]
    if "#" in rest:
        raise _malformed(url, "percent-encode '#' (as %23): a Redis URL has no #fragment")
    before_query, _, query = rest.partition("?")
    authority, slash, path = before_query.partition("/")
    path = slash + path
    options = tuple(parse_qsl(query, keep_blank_values=True))
    topology = (
        "cluster"
        if scheme.endswith(CLUSTER_SUFFIX)
        else "sentinel"
        if scheme.endswith(SENTINEL_SUFFIX)
        else "standalone"
    )
    nodes = _nodes(url, scheme, authority)
    if topology == "standalone" and len(nodes) > 1:
        raise _malformed(
            url, "several hosts need redis+cluster:// (startup nodes) or redis+sentinel://"
        )
    db, service_name = _path(url, scheme, path, dict(options))
    parsed = RedisUrl(url, scheme, userinfo, nodes, path, query, options, db, service_name)
    _check_options(parsed)
    return parsed


def _nodes(url: str, scheme: str, authority: str) -> tuple[tuple[str, int], ...]:
    if scheme == "unix":
        if authority:
            raise _malformed(
                url, "the socket path must be absolute: unix:///path/to/redis.sock (three slashes)"
            )
        return ()
    if not authority:
        raise _malformed(url, f"no host: expected {_TEMPLATES[scheme]}")
    default = SENTINEL_PORT if scheme.endswith(SENTINEL_SUFFIX) else REDIS_PORT
    nodes = []
    for node in authority.split(","):
        if node.startswith("[") and "]" in node:
            host, _, port = node.partition("]")
            host += "]"
            if port and not port.startswith(":"):
                raise _malformed(url, f"invalid host {node!r}")
            port = port[1:]
        else:
            host, _, port = node.partition(":")
        if not host or not _HOST.fullmatch(host):
            raise _malformed(url, f"invalid host {host!r}: expected {_TEMPLATES[scheme]}")
        if port == "" and node.endswith(":"):
            raise _malformed(url, f"no port after {host + ':'!r}")
        if port and not (port.isdigit() and 0 < int(port) <= 65535):
            raise _malformed(url, f"the port must be a number from 1 to 65535, got {port!r}")
        nodes.append((unquote(host).strip("[]"), int(port) if port else default))
    return tuple(nodes)


def _path(url: str, scheme: str, path: str, options: Mapping[str, str]) -> tuple[int, str | None]:
    """The database and, for Sentinel, the service name, from the path (and ``?db=``)."""
    service_name: str | None = None
    parts = [unquote(p) for p in path.split("/")[1:]]
    if parts and parts[-1] == "":
        parts.pop()  # a trailing slash
    if scheme == "unix":
        if not path or path == "/":
            raise _malformed(url, f"no socket path: expected {_TEMPLATES[scheme]}")
        parts = []
    elif scheme.endswith(SENTINEL_SUFFIX):
        if not parts or not parts[0]:
            raise _malformed(
                url, f"no service name: expected {_TEMPLATES[scheme]} (e.g. /mymaster)"
            )
        service_name, parts = parts[0], parts[1:]
    if len(parts) > 1:
        raise _malformed(url, f"expected {_TEMPLATES[scheme]}")
    text = options.get("db", parts[0] if parts else "0")
    if not text.isdigit():
        raise _malformed(url, f"the database must be a number, got {text!r}")
    db = int(text)
    if db > MAX_DB:
        raise _malformed(url, f"the database must be a number from 0 to {MAX_DB}, got {db}")
    if scheme.endswith(CLUSTER_SUFFIX) and db != 0:
        raise _malformed(url, f"a Redis Cluster has only database 0, got {db}")
    return db, service_name


# --- option values ---------------------------------------------------------------------------


def _positive_seconds(value: str) -> str | None:
    try:
        seconds = float(value)
    except ValueError:
        return "a number of seconds"
    return None if math.isfinite(seconds) and seconds > 0 else "a positive number of seconds"


def _whole(minimum: int) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        ok = value.strip().isdigit() and int(value) >= minimum
        return None if ok else f"a whole number of at least {minimum}"

    return check


def _boolean(value: str) -> str | None:
    return None if value.lower() in _TRUE | _FALSE else "one of true, false, yes, no, 1, 0"


def _one_of(*choices: str) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        return None if value in choices else "one of " + ", ".join(choices)

    return check


def _codec(value: str) -> str | None:
    try:
        codecs.lookup(value)
    except LookupError:
        return "a text encoding Python knows (e.g. utf-8)"
    return None


def _error_handler(value: str) -> str | None:
    try:
        codecs.lookup_error(value)
    except LookupError:
        return "an encoding error handler (strict, replace, ignore, ...)"
    return None


_OPTION_CHECKS: dict[str, Callable[[str], str | None]] = {
    "socket_timeout": _positive_seconds,
    "socket_connect_timeout": _positive_seconds,
    "timeout": _positive_seconds,
    "protocol": _one_of("2", "3"),
    "encoding": _codec,
    "encoding_errors": _error_handler,
    "max_connections": _whole(1),
    "pool_timeout": _positive_seconds,
    "health_check_interval": _whole(0),
    "socket_read_size": _whole(1),
    "socket_keepalive": _boolean,
    "retry_on_timeout": _boolean,
    "ssl_check_hostname": _boolean,
    "decode_responses": _boolean,
    "ssl_cert_reqs": _one_of("none", "optional", "required"),
}
"""What a query parameter's value must be; redis-py would take most of these as they are and
fail at the first command (``?protocol=4``, ``?encoding=nope``) or quietly misread them
(``?retry_on_timeout=maybe`` is true to it)."""


def _check_options(parsed: RedisUrl) -> None:
    for name, value in parsed.options:
        if name in SENTINEL_OPTIONS and parsed.topology != "sentinel":
            raise parsed.fail(f"a {parsed.scheme}:// URL takes no option {name!r}")
        if name in POOL_OPTIONS and parsed.topology != "standalone":
            raise parsed.fail(
                f"option {name!r} applies to redis://, rediss:// and unix:// URLs only"
            )
        check = _OPTION_CHECKS.get(name)
        wanted = check(value) if check else None
        if wanted is not None:
            shown = "***" if _SECRET_OPTION.search(name) else repr(value)
            raise parsed.fail(f"option {name!r} must be {wanted}, got {shown}")


def _check_kwargs(kwargs: Mapping[str, Any]) -> None:
    """The keyword arguments whose bad values redis-py would only meet at the first
    command: timeouts, protocol and encoding."""
    for name in ("socket_timeout", "socket_connect_timeout"):
        value = kwargs.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise PresenceConfigError(f"{name} must be a number of seconds or None, got {value!r}")
        if not (math.isfinite(value) and value > 0):
            raise PresenceConfigError(f"{name} must be positive, got {value!r}")
    timeout = kwargs.get("pool_timeout")
    if timeout is not None:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            raise PresenceConfigError(
                f"pool_timeout must be a number of seconds or None, got {timeout!r}"
            )
        if not (math.isfinite(timeout) and timeout > 0):
            raise PresenceConfigError(f"pool_timeout must be positive, got {timeout!r}")
    size = kwargs.get("max_connections")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
        raise PresenceConfigError(
            f"max_connections must be a whole number of at least 1, got {size!r}"
        )
    protocol = kwargs.get("protocol")
    if protocol is not None and protocol not in (2, 3, "2", "3"):
        raise PresenceConfigError(f"protocol must be 2 or 3, got {protocol!r}")
    encoding = kwargs.get("encoding")
    if encoding is not None and (not isinstance(encoding, str) or _codec(encoding)):
        raise PresenceConfigError(
            f"encoding must be a text encoding Python knows, got {encoding!r}"
        )


def _check_tls_files(parsed: RedisUrl, kwargs: Mapping[str, Any]) -> None:
    """Refuse a TLS file option naming no file: redis-py would read it at each connect and
    report ``Error 2 connecting to host:port. No such file or directory.``, naming no file."""
    query = dict(parsed.options)  # the URL wins, as in redis-py
    for name in TLS_FILE_OPTIONS:
        path = query[name] if name in query else kwargs.get(name)
        if isinstance(path, str | os.PathLike) and not os.path.isfile(path):
            raise PresenceConfigError(f"{name} {os.fspath(path)!r}: no such file")


# --- opening clients ---------------------------------------------------------------------------


class _Driver(NamedTuple):
    """The redis-py classes of one flavour (sync or asyncio)."""

    redis: Any
    cluster: Any
    cluster_node: Any
    sentinel: Any
    sentinel_primary: Any
    parse_url: Callable[[str], Mapping[str, Any]]
    connection: Any
    ssl_connection: Any
    pool: Any
    asynchronous: bool


def _no_primary(service_name: str, found: list[tuple[str, BaseException | None]]) -> Exception:
    """The error for a service no sentinel named a primary of: refused credentials when a
    sentinel refused them, else what each sentinel answered (redis-py's own message
    repeats every sentinel client's full repr)."""
    if any(isinstance(error, redis.exceptions.AuthenticationError) for _, error in found):
        return redis.exceptions.AuthenticationError(
            f"a sentinel refused the credentials (sentinel_username, sentinel_password) while "
            f"looking up the primary of {service_name!r}"
        )
    answers = "; ".join(
        f"{where}: {'answers, but names no primary of it that is up' if error is None else error}"
        for where, error in found
    )
    return redis.sentinel.MasterNotFoundError(
        f"no sentinel names a primary for {service_name!r} ({answers})"
    )


def _where(sentinel: Any) -> str:
    kwargs = sentinel.connection_pool.connection_kwargs
    return f"{kwargs.get('host')}:{kwargs.get('port')}"


class _Sentinel(redis.sentinel.Sentinel):
    """redis-py's Sentinel with a clear error when no sentinel names a primary."""

    def discover_master(self, service_name: str) -> Any:
        try:
            return super().discover_master(service_name)  # type: ignore[no-untyped-call]
        except redis.sentinel.MasterNotFoundError:
            found: list[tuple[str, BaseException | None]] = []
            for sentinel in self.sentinels:
                try:
                    sentinel.ping()
                except redis.exceptions.RedisError as error:
                    found.append((_where(sentinel), error))
                else:
                    found.append((_where(sentinel), None))
            raise _no_primary(service_name, found) from None


class _AsyncSentinel(redis.asyncio.sentinel.Sentinel):
    """redis-py's asyncio Sentinel with a clear error when no sentinel names a primary."""

    async def discover_master(self, service_name: str) -> Any:
        try:
            return await super().discover_master(service_name)
        except redis.sentinel.MasterNotFoundError:
            found: list[tuple[str, BaseException | None]] = []
            for sentinel in self.sentinels:
                try:
                    await sentinel.ping()
                except redis.exceptions.RedisError as error:
                    found.append((_where(sentinel), error))
                else:
                    found.append((_where(sentinel), None))
            raise _no_primary(service_name, found) from None


class _SentinelPrimary(redis.Redis):
    """The primary of a Sentinel service; closing it also closes the sentinel clients."""

    def close(self) -> None:
        try:
            super().close()
            self.connection_pool.disconnect()
        finally:
            manager: Any = getattr(self.connection_pool, "sentinel_manager", None)
            for sentinel in manager.sentinels if manager is not None else ():
                sentinel.close()


class _AsyncSentinelPrimary(redis.asyncio.Redis):
    """The asyncio primary of a Sentinel service; `aclose` closes the sentinel clients too."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        try:
            await super().aclose(close_connection_pool)
            await self.connection_pool.disconnect()
        finally:
            manager: Any = getattr(self.connection_pool, "sentinel_manager", None)
            for sentinel in manager.sentinels if manager is not None else ():
                await sentinel.aclose()


class PoolTimeoutError(redis.exceptions.MaxConnectionsError):
    """No connection of a full pool came free within its ``pool_timeout`` (a
    ``MaxConnectionsError``: `translate` makes it a `PresencePoolExhausted`)."""


def _pool_full(pool: Any) -> PoolTimeoutError:
    waited = "ever" if pool.timeout is None else f"{pool.timeout:g} s (pool_timeout)"
    return PoolTimeoutError(
        f"all {pool.max_connections} connections of the pool (max_connections) stayed in use "
        f"for {waited}"
    )


class _Pool(redis.connection.ConnectionPool):
    """redis-py's pool, but a call past `max_connections` waits up to `timeout` seconds
    (None: forever) for a connection to come free, and then is a `PoolTimeoutError`. A call
    that finds a connection free costs what it costs in redis-py's pool (its blocking pool
    takes a queue's locks on every call)."""

    def __init__(self, *, timeout: float | None = DEFAULT_POOL_TIMEOUT_S, **kwargs: Any):
        super().__init__(**kwargs)
        self.timeout = timeout
        self._freed = threading.Condition(threading.Lock())
        self._releases = 0
        self._waiting = 0

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while True:
            releases = self._releases
            try:
                return super().get_connection(*args, **kwargs)
            except redis.exceptions.MaxConnectionsError:
                pass
            with self._freed:
                self._waiting += 1  # before reading _releases: `release` writes them the other way
                try:
                    while releases == self._releases:  # none came free since the try
                        left = None if deadline is None else deadline - time.monotonic()
                        if left is not None and left <= 0:
                            raise _pool_full(self) from None
                        self._freed.wait(left)
                finally:
                    self._waiting -= 1

    def release(self, connection: Any) -> None:
        super().release(connection)
        self._releases += 1
        if self._waiting:  # a waiter counted itself before reading _releases: it is woken
            with self._freed:
                self._freed.notify()


class _AsyncPool(redis.asyncio.ConnectionPool):
    """`_Pool` for asyncio, which also follows the event loop it is used in: in a new loop
    (a second ``asyncio.run``) the connections of the old one, whose loop has ended, are
    dropped (their sockets closed) and new ones made as calls need them."""

    def __init__(self, *, timeout: float | None = DEFAULT_POOL_TIMEOUT_S, **kwargs: Any):
        super().__init__(**kwargs)
        self.timeout = timeout
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None

    def _follow_loop(self) -> None:
        loop = asyncio.get_running_loop()
        old, self._loop = self._loop, loop
        if old is None or old is loop:
            return
        self._lock = asyncio.Lock()
        self._waiters.clear()
        for connection in (*self._available_connections, *self._in_use_connections):
            _drop(connection, old)
        self._available_connections.clear()
        self._in_use_connections.clear()

    async def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        self._follow_loop()
        if not self._waiters:  # else the callers already waiting go first
            try:
                return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
            except redis.exceptions.MaxConnectionsError:
                pass
        loop = asyncio.get_running_loop()
        deadline = None if self.timeout is None else loop.time() + self.timeout
        first = False
        while True:
            waiter: asyncio.Future[None] = loop.create_future()
            if first:
                self._waiters.appendleft(waiter)  # woken, and beaten to it: next again
            else:
                self._waiters.append(waiter)
            try:
                left = None if deadline is None else max(0.0, deadline - loop.time())
                await asyncio.wait_for(waiter, left)
            except BaseException as exc:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
                elif waiter.done() and not waiter.cancelled():
                    self._wake()  # woken, but leaving: the connection is the next one's
                if isinstance(exc, asyncio.TimeoutError | TimeoutError):
                    raise _pool_full(self) from None
                raise
            try:
                return await super().get_connection(*args, **kwargs)  # type: ignore[no-untyped-call]
            except redis.exceptions.MaxConnectionsError:
                first = True

    async def release(self, connection: Any) -> None:
        if connection not in self._in_use_connections:
            return  # made in an ended loop, and dropped with it
        await super().release(connection)
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def disconnect(self, inuse_connections: bool = True) -> None:
        self._follow_loop()
        await super().disconnect(inuse_connections)


def _drop(connection: Any, loop: asyncio.AbstractEventLoop) -> None:
    """Forget `connection`, made in `loop`, which is no longer the running loop: its socket
    is closed now when that loop has ended (it can run no callback any more), else by the
    loop itself."""
    writer = connection._writer
    connection._parser.on_disconnect()
    connection._reader = connection._writer = None
    if writer is None:
        return
    transport = writer.transport
    if not loop.is_closed():
        loop.call_soon_threadsafe(transport.abort)
        return
    layers = [transport]
    inner = getattr(getattr(transport, "_ssl_protocol", None), "_transport", None)
    if inner is not None:
        layers.append(inner)  # TLS: the socket's own transport under the TLS one
    for layer in layers:
        sock = getattr(layer, "_sock", None)
        if sock is not None:
            sock.close()
            layer._sock = None
        for flag in ("_closing", "_closed"):  # what is_closing() reads, per transport
            if getattr(layer, flag, None) is False:
                setattr(layer, flag, True)


_SYNC = _Driver(
    redis.Redis,
    redis.cluster.RedisCluster,
    redis.cluster.ClusterNode,
    _Sentinel,
    _SentinelPrimary,
    redis.connection.parse_url,
    redis.connection.Connection,
    redis.connection.SSLConnection,
    _Pool,
    False,
)
_ASYNC = _Driver(
    redis.asyncio.Redis,
    redis.asyncio.cluster.RedisCluster,
    redis.asyncio.cluster.ClusterNode,
    _AsyncSentinel,
    _AsyncSentinelPrimary,
    redis.asyncio.connection.parse_url,
    redis.asyncio.connection.Connection,
    redis.asyncio.connection.SSLConnection,
    _AsyncPool,
    True,
)


def open_client(url: str, **kwargs: Any) -> Any:
    """A synchronous redis-py client for `url`; only a cluster client connects at once (to
    learn the slot map), so only it can raise a `PresenceError` other than
    `PresenceConfigError` here."""
    return _open(url, kwargs, _SYNC)


def open_async_client(url: str, **kwargs: Any) -> Any:
    """An asyncio redis-py client for `url` (no connection is made until first use)."""
    return _open(url, kwargs, _ASYNC)


def _open(url: str, kwargs: dict[str, Any], driver: _Driver) -> Any:
    parsed = parse_url(url)
    _check_kwargs(kwargs)
    _check_tls_files(parsed, kwargs)
    kwargs.setdefault("socket_connect_timeout", DEFAULT_CONNECT_TIMEOUT_S)
    kwargs.setdefault("socket_timeout", DEFAULT_SOCKET_TIMEOUT_S)
    try:
        if parsed.topology == "cluster":
            return _open_cluster(parsed, kwargs, driver)
        if parsed.topology == "sentinel":
            return _open_sentinel(parsed, kwargs, driver)
        return _open_standalone(parsed, kwargs, driver)
    except PresenceConfigError:
        raise
    except DRIVER_ERRORS as exc:  # a sync cluster client connects at once to map the slots
        error = translate(exc)
        if type(error) is PresenceError:  # not unreachable, refused, ...: the URL is wrong
            raise parsed.fail(driver_reason(exc)) from None
        raise error from exc
    except Exception as exc:  # redis-py refused an option or a value: never let it escape
        raise parsed.fail(driver_reason(exc)) from None


def _open_standalone(parsed: RedisUrl, kwargs: dict[str, Any], driver: _Driver) -> Any:
    if parsed.db != 0:
        kwargs.setdefault("redis_connect_func", _db_guard(parsed, driver.asynchronous))
    plain = parsed.scheme + parsed.url[len(parsed.scheme) :]  # redis-py wants it lower case
    query = dict(parsed.options)
    given = set(kwargs)
    timeout = kwargs.pop("pool_timeout", DEFAULT_POOL_TIMEOUT_S)
    kwargs["timeout"] = float(query["pool_timeout"]) if "pool_timeout" in query else timeout
    kwargs.setdefault("max_connections", DEFAULT_MAX_CONNECTIONS)
    single = kwargs.pop("single_connection_client", False)
    # What redis.Redis.from_url does, with the package's pool (the URL's options win).
    pool = driver.pool.from_url(_without_options(plain, parsed, POOL_OPTIONS), **kwargs)
    _try_connection(parsed, pool.connection_class, pool.connection_kwargs, given)
    client = driver.redis(connection_pool=pool, single_connection_client=single)
    client.auto_close_connection_pool = True
    return client


def _without_options(url: str, parsed: RedisUrl, names: tuple[str, ...]) -> str:
    """`url` without the query parameters named in `names` (redis-py would pass them on to
    every connection)."""
    if not parsed.query:
        return url
    head = url[: len(url) - len(parsed.query)]  # up to and with the "?"
    kept = "&".join(
        part
        for part in parsed.query.split("&")
        if unquote_plus(part.partition("=")[0]) not in names
    )
    return head + kept if kept else head[:-1]


def _try_connection(
    parsed: RedisUrl,
    connection_class: Any,
    connection_kwargs: Mapping[str, Any],
    given: set[str] | frozenset[str] = frozenset(),
) -> None:
    """Refuse an option the connection does not take (``?ssl_certfle=``, or ``ssl_*`` on a
    plain ``redis://`` URL) now: redis-py passes unknown query parameters on, and the first
    command would fail with a bare `TypeError`. Building a connection object connects
    nothing. A name among the keyword arguments `given` (and not in the URL's query) is
    refused as a keyword argument: the URL is not what is wrong then."""
    try:
        connection_class(**connection_kwargs)
    except TypeError as exc:
        unknown = _KEYWORD.search(str(exc))
        name = unknown.group(1) if unknown else None
        if name is not None and name in given and name not in dict(parsed.options):
            raise PresenceConfigError(
                f"unknown keyword argument {name!r}: neither the registry nor a redis-py "
                "connection takes it"
            ) from None
        what = f"option {name!r}" if name else "options"
        raise parsed.fail(f"a {parsed.scheme}:// URL takes no {what}") from None


def _url_connection(parsed: RedisUrl, driver: _Driver, path: str = "") -> dict[str, Any]:
    """The connection options redis-py reads from the URL (credentials, database, query),
    checked against the connection class, without host and port."""
    options = dict(driver.parse_url(parsed.node_url(parsed.nodes[0], path, skip=SENTINEL_OPTIONS)))
    connection_class = options.pop("connection_class", None) or driver.connection
    options.pop("host", None)
    options.pop("port", None)
    _try_connection(parsed, connection_class, options)
    if connection_class is driver.ssl_connection:
        options["ssl"] = True
    return options


def _no_pool_options(parsed: RedisUrl, kwargs: dict[str, Any]) -> None:
    for name in POOL_OPTIONS:
        if name in kwargs:
            raise PresenceConfigError(
                f"{name} applies to redis://, rediss:// and unix:// URLs only, not "
                f"{parsed.scheme}://"
            )


def _open_cluster(parsed: RedisUrl, kwargs: dict[str, Any], driver: _Driver) -> Any:
    _no_pool_options(parsed, kwargs)
    _url_connection(parsed, driver)  # checks the query's options
    first, *others = parsed.nodes
    startup = [driver.cluster_node(host, port) for host, port in others]
    return driver.cluster.from_url(parsed.node_url(first), startup_nodes=startup, **kwargs)


def _open_sentinel(parsed: RedisUrl, kwargs: dict[str, Any], driver: _Driver) -> Any:
    _no_pool_options(parsed, kwargs)
    data = {name: value for name, value in kwargs.items() if name not in SENTINEL_OPTIONS}
    data.update(_url_connection(parsed, driver, f"/{parsed.db}"))  # the URL wins
    if parsed.db != 0:
        data.setdefault("redis_connect_func", _db_guard(parsed, driver.asynchronous))
    query = dict(parsed.options)
    shared = ("socket_connect_timeout", "socket_timeout", "ssl", *TLS_FILE_OPTIONS)
    to_sentinels = {name: data[name] for name in shared if name in data}
    # Each sentinel is asked once per lookup: the next sentinel is the retry, and redis-py's
    # retries of the data connection repeat the lookup.
    to_sentinels["retry"] = Retry(NoBackoff(), 0)
    for option in SENTINEL_OPTIONS:
        value = query.get(option, kwargs.get(option))
        if value is not None:
            to_sentinels[option.removeprefix("sentinel_")] = value
    sentinel = driver.sentinel(list(parsed.nodes), sentinel_kwargs=to_sentinels)
    assert parsed.service_name is not None  # parse_url refuses a Sentinel URL without one
    return sentinel.master_for(parsed.service_name, redis_class=driver.sentinel_primary, **data)


def _db_guard(parsed: RedisUrl, asynchronous: bool) -> Callable[[Any], Any]:
    """A ``redis_connect_func`` that turns the server's refusal of the URL's database
    (``SELECT``: ``DB index is out of range``) into a `PresenceConfigError` naming the URL,
    after closing the half-set-up connection so that it is never used on database 0."""

    def refused(exc: ResponseError) -> PresenceConfigError:
        return parsed.fail(f"the server has no database {parsed.db} ({exc})")

    def on_connect(connection: Any) -> None:
        try:
            connection.on_connect()
        except ResponseError as exc:
            if "DB index" not in str(exc):
                raise
            connection.disconnect()
            raise refused(exc) from None

    async def on_connect_async(connection: Any) -> None:
        try:
            await connection.on_connect()
        except ResponseError as exc:
            if "DB index" not in str(exc):
                raise
            await connection.disconnect()
            raise refused(exc) from None

    return on_connect_async if asynchronous else on_connect

"""Checking connection URLs and splitting them into what the openers need (`parse_url`,
`RedisUrl`), and the checks of option values (in the URL's query or as keyword arguments).

Every malformed URL, and every option value redis-py would take as it is and refuse only
later (``?protocol=4``, ``?encoding=nope``), is a `PresenceConfigError` naming what is
wrong, with every password hidden (`redaction.redact`). The URL forms are documented in
`redis_presence.urls`; `clients` opens redis-py clients for the checked URLs.
"""

from __future__ import annotations

import codecs
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, unquote, unquote_plus

from .errors import PresenceConfigError
from .redaction import _HOST, _SCHEME, _SECRET_OPTION, _userinfo, redact

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
_TRUE = frozenset(("1", "true", "yes", "on", "y"))
_FALSE = frozenset(("0", "false", "no", "off", "n", "f"))


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

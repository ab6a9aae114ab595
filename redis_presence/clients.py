"""Opening redis-py clients for checked connection URLs (`open_client`,
`open_async_client`): standalone, Redis Cluster and Sentinel, sync and asyncio.

Every client gets explicit timeouts, whatever redis-py's own defaults (none before
redis-py 6): `DEFAULT_CONNECT_TIMEOUT_S` to connect, `DEFAULT_SOCKET_TIMEOUT_S` for any
reply; ``socket_connect_timeout`` / ``socket_timeout`` as keyword arguments or URL query
parameters override them (``None`` waits forever). A standalone client's pool holds at most
``max_connections`` connections (`DEFAULT_MAX_CONNECTIONS`) and a call past them waits up
to ``pool_timeout`` seconds (`DEFAULT_POOL_TIMEOUT_S`) for one to come free, then fails
with `PresencePoolExhausted` (not "cannot reach Redis": Redis was not asked); an asyncio
client's pool follows a new event loop (its connections of an ended loop are dropped and
made again). Whatever redis-py refuses while a client is opened is a `PresenceConfigError`
naming the URL with its passwords hidden (`redaction.driver_reason`). The URL forms are
documented in `redis_presence.urls`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple
from urllib.parse import unquote_plus

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.connection
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.cluster
import redis.connection
import redis.retry
import redis.sentinel
from redis.backoff import NoBackoff
from redis.exceptions import ResponseError

from .errors import DRIVER_ERRORS, PresenceConfigError, PresenceError, translate
from .redaction import _KEYWORD, driver_reason
from .url_parsing import (
    POOL_OPTIONS,
    SENTINEL_OPTIONS,
    TLS_FILE_OPTIONS,
    RedisUrl,
    _check_kwargs,
    _check_tls_files,
    parse_url,
)

DEFAULT_CONNECT_TIMEOUT_S = 5.0
"""How long a client waits for a TCP (or TLS) connection before the call fails."""
DEFAULT_SOCKET_TIMEOUT_S = 5.0
"""How long a client waits for any reply before the call fails (a frozen server)."""
DEFAULT_MAX_CONNECTIONS = 100
"""How many connections a standalone client's pool opens at most (``max_connections``)."""
DEFAULT_POOL_TIMEOUT_S = 5.0
"""How long a call waits for a free connection of a full pool (``pool_timeout``) before it
fails with `PresencePoolExhausted`."""


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
    retry: Any
    """redis-py's retry policy of this flavour: an asyncio client takes
    ``redis.asyncio.retry.Retry`` (its ``call_with_retry`` is a coroutine)."""


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
            return super().discover_master(service_name)  # type: ignore[no-untyped-call,unused-ignore]
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
    redis.retry.Retry,
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
    redis.asyncio.retry.Retry,
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
    _check_retry(kwargs.get("retry"), driver)
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


def _check_retry(retry: Any, driver: _Driver) -> None:
    """Refuse a ``retry`` of the other flavour: a sync ``redis.retry.Retry`` handed to an
    asyncio client would block its event loop between attempts (redis-py 8.2 converts it
    with a warning and drops a custom ``call_with_retry``), and an asyncio one cannot run
    in a sync client."""
    if retry is None or isinstance(retry, driver.retry):
        return
    wanted = "redis.asyncio.retry.Retry" if driver.asynchronous else "redis.retry.Retry"
    kind = f"{type(retry).__module__}.{type(retry).__qualname__}"
    client = "an asyncio" if driver.asynchronous else "a sync"
    raise PresenceConfigError(f"retry must be a {wanted} for {client} client, got {kind}")


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
    to_sentinels["retry"] = driver.retry(NoBackoff(), 0)
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

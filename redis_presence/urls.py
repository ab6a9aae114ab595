"""Connection URLs: the forms the package takes, and the public names to check them, open
redis-py clients for them and hide their credentials.

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

Every client gets explicit timeouts (`DEFAULT_CONNECT_TIMEOUT_S`,
`DEFAULT_SOCKET_TIMEOUT_S`) and a standalone client a bounded pool (`DEFAULT_MAX_CONNECTIONS`,
waiting up to `DEFAULT_POOL_TIMEOUT_S` for a free connection). Every malformed URL and every
option value redis-py would only refuse later is a `PresenceConfigError`, and no message
carries a password: a message names the URL only as `redact` writes it.

This module only gathers the names; the work is done, one job per module, in
`url_parsing` (checking and splitting a URL, `parse_url`), `redaction` (where the passwords
are, `redact`) and `clients` (opening clients, `open_client`, the pools and the Sentinel
classes). Modules of the package import from those directly.
"""

from __future__ import annotations

from .clients import (
    DEFAULT_CONNECT_TIMEOUT_S,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_POOL_TIMEOUT_S,
    DEFAULT_SOCKET_TIMEOUT_S,
    PoolTimeoutError,
    open_async_client,
    open_client,
)
from .redaction import driver_reason, redact, redact_urls, secrets_of
from .url_parsing import (
    CLUSTER_SUFFIX,
    MAX_DB,
    POOL_OPTIONS,
    REDIS_PORT,
    SCHEMES,
    SENTINEL_OPTIONS,
    SENTINEL_PORT,
    SENTINEL_SUFFIX,
    TLS_FILE_OPTIONS,
    RedisUrl,
    is_cluster_url,
    is_sentinel_url,
    parse_url,
    scheme_of,
)

__all__ = [
    "CLUSTER_SUFFIX",
    "DEFAULT_CONNECT_TIMEOUT_S",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_POOL_TIMEOUT_S",
    "DEFAULT_SOCKET_TIMEOUT_S",
    "MAX_DB",
    "POOL_OPTIONS",
    "REDIS_PORT",
    "SCHEMES",
    "SENTINEL_OPTIONS",
    "SENTINEL_PORT",
    "SENTINEL_SUFFIX",
    "TLS_FILE_OPTIONS",
    "PoolTimeoutError",
    "RedisUrl",
    "driver_reason",
    "is_cluster_url",
    "is_sentinel_url",
    "open_async_client",
    "open_client",
    "parse_url",
    "redact",
    "redact_urls",
    "scheme_of",
    "secrets_of",
]

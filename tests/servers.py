"""One real server process for the tests: standalone, with TLS, a password, or a replica.

Every process is started by the package's one launcher (`redis_presence.localserver`): in
the foreground as our own child process, on a free loopback port, in its own directory,
with its output in ``<dir>/redis.log``. Readiness is polled with a deadline, never slept
for, and every process is stopped by the fixtures (and, as a last resort, killed when the
interpreter exits). This module adds what only the tests need: TLS, replicas and
passwords; `clusters` joins servers into a Redis Cluster, `sentinels` watches them with
Sentinel, `tls_files` makes the certificates and `binaries` finds the binaries (and skips,
or fails in CI, when one is missing).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote, urlencode

import redis
import redis.asyncio.cluster
import redis.cluster
from binaries import need_binary
from redis.backoff import NoBackoff
from redis.retry import Retry
from tls_files import TlsFiles
from waiting import wait_until

from redis_presence.localserver import (
    HOST,
    START_TIMEOUT_S,
    STOP_TIMEOUT_S,
    LocalServer,
    LocalServerError,
    free_port,
)

CLUSTER_TIMEOUT_S = 30.0
CLUSTER_SLOTS = 16384
CLUSTER_BUS_OFFSET = 10000
LOG_NAME = "redis.log"
POLL_S, MAX_POLL_S = 0.005, 0.1
"""Polling a server's state: pauses from 5 ms, doubling up to 100 ms (as the launcher's)."""

ServerError = LocalServerError
"""A test server could not be started, joined or reached in time."""

__all__ = ["HOST", "START_TIMEOUT_S", "STOP_TIMEOUT_S", "free_port"]


# --- ports ------------------------------------------------------------------------------


def free_cluster_port() -> int:
    """A free port ``p`` whose cluster bus port ``p + 10000`` is free too (Redis 6 and later)."""
    return free_port(also_free=(CLUSTER_BUS_OFFSET,))


def listens_on(pid: int, port: int) -> bool | None:
    """Whether process `pid` holds the TCP socket listening on loopback port `port`, as
    Linux's /proc says (no command reaches the server); None where /proc cannot tell."""
    try:
        rows = [line.split() for line in Path("/proc/net/tcp").read_text().splitlines()[1:]]
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return None
    listening = {
        f"socket:[{row[9]}]" for row in rows if row[1].endswith(f":{port:04X}") and row[3] == "0A"
    }
    held: set[str] = set()
    for fd in fds:
        with contextlib.suppress(OSError):  # closed meanwhile
            held.add(os.readlink(fd))
    return bool(listening & held)


def no_retry() -> Retry:
    """No retry: a poll's own deadline decides, not redis-py's retries."""
    return Retry(NoBackoff(), 0)


# --- one server -------------------------------------------------------------------------


class RedisServer(LocalServer):
    """One ``redis-server`` (or ``valkey-server``: `binary`) child process on a loopback port,
    with its files in ``dir``, started by the package's launcher.

    Defaults: ``--bind 127.0.0.1 --save "" --protected-mode no`` and no diskless-sync delay;
    ``extra_args`` come last on the command line, so they override any of these. With ``tls``,
    ``tls_auth_clients=True`` runs ``--tls-auth-clients yes``: every client must then present
    a certificate signed by the CA (``client()`` and ``url`` present ``tls.client_cert``).
    """

    def __init__(
        self,
        *,
        dir: Path,
        port: int | None = None,
        appendonly: bool = False,
        tls: TlsFiles | None = None,
        tls_auth_clients: bool = False,
        replicaof: RedisServer | None = None,
        requirepass: str | None = None,
        extra_args: Sequence[str] = (),
        cluster: bool = False,
        binary: str | None = None,
    ) -> None:
        if replicaof is not None and replicaof.tls is not None and tls is None:
            raise ValueError("a replica of a TLS primary needs tls= files too")
        if tls_auth_clients and tls is None:
            raise ValueError("tls_auth_clients=True needs tls= files")
        self.appendonly: bool = appendonly
        self.tls: TlsFiles | None = tls
        self.tls_auth_clients: bool = tls_auth_clients
        self.replicaof: RedisServer | None = replicaof
        self.requirepass: str | None = requirepass
        self.cluster: bool = cluster
        super().__init__(
            binary or need_binary("redis-server"),
            dir=dir,
            port=port,
            extra_args=extra_args,
            tls_port=tls is not None,
            log_file=dir / LOG_NAME,
            pick_port=free_cluster_port if cluster else free_port,
        )

    # properties

    @property
    def log_path(self) -> Path:
        return self.dir / LOG_NAME

    @property
    def url(self) -> str:
        """A URL that ``redis.Redis.from_url`` connects with as is.

        ``redis://`` or ``rediss://``; it carries the password when ``requirepass`` is set,
        ``?ssl_ca_certs=<ca file>`` for TLS, and ``&ssl_certfile=...&ssl_keyfile=...`` when
        the server authenticates clients.
        """
        scheme = "rediss" if self.tls is not None else "redis"
        auth = f":{quote(self.requirepass, safe='')}@" if self.requirepass is not None else ""
        query = urlencode(self._tls_params(), safe="/", quote_via=quote)
        return f"{scheme}://{auth}{HOST}:{self.port}{'?' if query else ''}{query}"

    def _tls_params(self) -> dict[str, str]:
        """The redis-py TLS options a client of this server needs (empty without TLS)."""
        if self.tls is None:
            return {}
        params = {"ssl_ca_certs": str(self.tls.ca_cert)}
        if self.tls_auth_clients:
            params.update(
                ssl_certfile=str(self.tls.client_cert), ssl_keyfile=str(self.tls.client_key)
            )
        return params

    def command_line(self) -> list[str]:
        """The ``redis-server`` argv this server runs with."""
        self.options = self._options()
        return super().command_line()

    def _options(self) -> dict[str, object]:
        options: dict[str, object] = {
            "--protected-mode": "no",
            "--logfile": "",  # stdout, which goes to the log file
            "--save": "",
            "--appendonly": "yes" if self.appendonly else "no",
            # Redis 7 delays a full sync by 5 s waiting for more replicas; we never want that.
            "--repl-diskless-sync-delay": 0,
        }
        if self.appendonly:
            options["--appendfsync"] = "everysec"
        if self.tls is not None:
            options.update(
                {
                    "--tls-cert-file": self.tls.cert,
                    "--tls-key-file": self.tls.key,
                    "--tls-ca-cert-file": self.tls.ca_cert,
                    "--tls-auth-clients": "yes" if self.tls_auth_clients else "no",
                }
            )
        if self.requirepass is not None:
            options["--requirepass"] = self.requirepass
        primary = self.replicaof
        if primary is not None:
            if primary.requirepass is not None:
                options["--masterauth"] = primary.requirepass
            if primary.tls is not None:
                options["--tls-replication"] = "yes"
        if self.cluster:
            options["--cluster-enabled"] = "yes"
            options["--cluster-config-file"] = "nodes.conf"
            options["--cluster-node-timeout"] = 2000
        if primary is not None:
            options["--replicaof"] = (primary.host, primary.port)
        return options

    # life cycle

    def start(self, timeout_s: float = START_TIMEOUT_S) -> RedisServer:
        """Start the process and wait until it answers PING; return self."""
        super().start(timeout_s)
        return self

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Wait until the server answers PING, and make sure that it is this process that
        answers: another process (another pytest-xdist worker, another test run) may have
        bound the port between `free_port` and this server. This one then exits (it could
        not bind), and `start` tries another port."""
        super().wait_ready(timeout_s)
        if self.pid is not None and listens_on(self.pid, self.port) is False:
            if self.process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.process.wait(timeout_s)
            raise ServerError(f"port {self.port} is another process's")

    def restart(self, timeout_s: float = START_TIMEOUT_S) -> RedisServer:
        """Stop if running, then start again on the same port with the same dir and data files."""
        super().restart(timeout_s)
        return self

    def __enter__(self) -> RedisServer:
        super().__enter__()
        return self

    # clients and readiness

    def client(self, **kwargs: Any) -> redis.Redis:
        """A new ``redis.Redis`` for this server (bytes replies unless told otherwise).

        Keyword arguments override the defaults (host, port, password, TLS CA, ...). The
        caller closes it.
        """
        params: dict[str, Any] = {"host": HOST, "port": self.port, "decode_responses": False}
        if self.requirepass is not None:
            params["password"] = self.requirepass
        if self.tls is not None:
            params.update(ssl=True, **self._tls_params())
        params.update(kwargs)
        return redis.Redis(**params)

    def role(self) -> str:
        """``master`` or ``slave``, as the server itself says now."""
        with self.client(socket_timeout=2, retry=no_retry()) as c:
            return str(c.info("replication")["role"])

    def has_role(self, role: str) -> bool:
        """Whether the server says it is `role` now; false while it cannot be asked.

        For polling a server that Sentinel or the cluster is reconfiguring: it closes
        every client connection as it switches role, so one INFO may meet a reset.
        """
        try:
            return self.role() == role
        except redis.ConnectionError:
            return False

    def wait_replica_synced(self, timeout: float = START_TIMEOUT_S) -> None:
        """Poll ``INFO replication`` on this replica until ``master_link_status:up``."""
        with self.client(socket_timeout=2, retry=no_retry()) as c:

            def synced() -> bool:
                try:
                    info = c.info("replication")
                except redis.ConnectionError:
                    return False
                return bool(info.get("master_link_status") == "up")

            wait_until(
                synced,
                timeout_s=timeout,
                what=f"replica on port {self.port} to sync",
                alive=self.check_alive,
                interval_s=POLL_S,
                max_interval_s=MAX_POLL_S,
            )

    def wait_for_replicas(self, count: int = 1, timeout: float = START_TIMEOUT_S) -> None:
        """On a primary: ``WAIT`` until ``count`` replicas acknowledged every write so far."""
        with self.client(socket_timeout=timeout + 5) as c:
            acked = int(c.wait(count, int(timeout * 1000)))
        if acked < count:
            raise ServerError(f"only {acked} of {count} replicas acknowledged within {timeout:g} s")

    def __repr__(self) -> str:
        state = "running" if self.is_running else "stopped"
        return f"<RedisServer {self.url} {state} dir={self.dir}>"


class MakeRedisServer(Protocol):
    """Type of the ``make_redis_server`` fixture: start a fresh server with these options."""

    def __call__(
        self,
        *,
        dir: Path = ...,
        port: int | None = ...,
        appendonly: bool = ...,
        tls: TlsFiles | None = ...,
        tls_auth_clients: bool = ...,
        replicaof: RedisServer | None = ...,
        requirepass: str | None = ...,
        extra_args: Sequence[str] = ...,
        cluster: bool = ...,
    ) -> RedisServer: ...

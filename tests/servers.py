"""Real ``redis-server`` processes for the tests: standalone, TLS, replica and cluster.

Every server runs in the foreground as our own child process (never daemonized), on a free
loopback port, in its own directory, with its output in ``<dir>/redis.log``. Readiness is
polled with a deadline, never slept for, and every process is stopped by the fixtures (and,
as a last resort, killed when the interpreter exits).

Locally a missing binary skips the test; with ``REDIS_PRESENCE_REQUIRE_SERVERS=1`` (set by
``.ci/run``) it fails it, so CI can never go green by skipping the real-server tests.
"""

from __future__ import annotations

import atexit
import functools
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol
from urllib.parse import quote, urlencode

import pytest
import redis
import redis.asyncio.cluster
import redis.cluster
from redis.backoff import NoBackoff
from redis.retry import Retry

HOST = "127.0.0.1"
REQUIRE_SERVERS_ENV = "REDIS_PRESENCE_REQUIRE_SERVERS"
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 15.0
CLUSTER_TIMEOUT_S = 30.0
CLUSTER_SLOTS = 16384
LOG_NAME = "redis.log"

# Ports handed out by this process; never handed out twice, even if nothing bound them yet.
_handed_out: set[int] = set()
# Processes still running, killed at interpreter exit if a fixture could not stop them.
_live: set[subprocess.Popen[bytes]] = set()


@atexit.register
def _kill_leftovers() -> None:
    for proc in list(_live):
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    _live.clear()


class ServerError(RuntimeError):
    """A test server could not be started, joined or reached in time."""


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


def need_binary(name: str) -> str:
    """Path of ``name`` on PATH; otherwise skip the test, or fail it when servers are required."""
    path = shutil.which(name)
    if path is not None:
        return path
    message = f"{name!r} is not on PATH"
    if require_servers():
        pytest.fail(f"{message}, and {REQUIRE_SERVERS_ENV}=1 forbids skipping", pytrace=False)
    pytest.skip(f"{message} (install Debian's redis-server package to run this test)")


# --- ports ------------------------------------------------------------------------------


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback TCP port that nothing listens on now and that this process has not handed out."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((HOST, 0))
            port: int = sock.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise ServerError("no free loopback port found")


def free_cluster_port() -> int:
    """A free port ``p`` whose cluster bus port ``p + 10000`` is free too (Redis 6 and 7)."""
    for _ in range(100):
        port = free_port()
        bus = port + 10000
        if bus <= 65535 and bus not in _handed_out and _bindable(bus):
            _handed_out.add(bus)
            return port
    raise ServerError("no free loopback port pair (p, p + 10000) found")


def _no_retry() -> Retry:
    return Retry(NoBackoff(), 0)


def _poll(
    check: Callable[[], bool], *, timeout: float, what: str, alive: Callable[[], None]
) -> None:
    """Call ``check`` with a short, growing pause until it is true; raise after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    pause = 0.005
    while True:
        alive()
        if check():
            return
        if time.monotonic() >= deadline:
            raise ServerError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


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


def _argv(options: Mapping[str, object]) -> list[str]:
    """Flatten ``{"--flag": value}`` into ``["--flag", "value"]``, in insertion order."""
    return [part for flag, value in options.items() for part in (flag, str(value))]


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
    _openssl("req", "-x509", "-new", *_EC_KEY, *_argv(options))
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
    _openssl("req", "-new", *_EC_KEY, *_argv({"-config": config, "-keyout": key, "-out": csr}))
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
    _openssl("x509", "-req", *_argv(signing))
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


class RedisServer:
    """One ``redis-server`` child process on a loopback port, with its files in ``dir``.

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
    ) -> None:
        if replicaof is not None and replicaof.tls is not None and tls is None:
            raise ValueError("a replica of a TLS primary needs tls= files too")
        if tls_auth_clients and tls is None:
            raise ValueError("tls_auth_clients=True needs tls= files")
        self.dir: Path = dir
        self.appendonly: bool = appendonly
        self.tls: TlsFiles | None = tls
        self.tls_auth_clients: bool = tls_auth_clients
        self.replicaof: RedisServer | None = replicaof
        self.requirepass: str | None = requirepass
        self.extra_args: tuple[str, ...] = tuple(extra_args)
        self.cluster: bool = cluster
        self._port_given = port is not None
        self._port = port if port is not None else self._pick_port()
        self._proc: subprocess.Popen[bytes] | None = None

    def _pick_port(self) -> int:
        return free_cluster_port() if self.cluster else free_port()

    # properties

    @property
    def host(self) -> str:
        return HOST

    @property
    def port(self) -> int:
        return self._port

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

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
        return f"{scheme}://{auth}{HOST}:{self._port}{'?' if query else ''}{query}"

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
        options: dict[str, object] = {
            "--bind": HOST,
            "--port": self._port,
            "--daemonize": "no",
            "--protected-mode": "no",
            "--dir": self.dir,
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
                    "--port": 0,
                    "--tls-port": self._port,
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
        argv = [need_binary("redis-server"), *_argv(options)]
        if primary is not None:
            argv += ["--replicaof", primary.host, str(primary.port)]
        return [*argv, *self.extra_args]

    # life cycle

    def start(self, timeout: float = START_TIMEOUT_S) -> RedisServer:
        """Start the process and wait until it answers PING; return self."""
        if self.is_running:
            raise ServerError(f"redis-server on port {self._port} is already running")
        # A port picked for us may be taken between the probe and the bind: pick another.
        attempts = 1 if self._port_given else 3
        for attempt in range(attempts):
            self._spawn()
            try:
                self.wait_ready(timeout)
                return self
            except ServerError:
                in_use = "Address already in use" in self.log_tail()
                self.kill()
                if not in_use or attempt == attempts - 1:
                    raise
                self._port = self._pick_port()
        raise AssertionError("unreachable")

    def _spawn(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        args = self.command_line()
        with self.log_path.open("ab") as log:
            log.write(f"### {' '.join(args)}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                args, cwd=self.dir, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )
        _live.add(self._proc)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Stop gracefully (SIGTERM, which flushes the AOF); SIGKILL if it takes over ``timeout`` s.

        SIGTERM rather than SHUTDOWN NOSAVE: it works whatever ACL, password or TLS state a
        test left behind, and with ``--save ""`` neither writes an RDB file.
        """
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        _live.discard(proc)

    def kill(self) -> None:
        """SIGKILL the process (a crash: nothing is flushed) and reap it."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        _live.discard(proc)

    def restart(self, timeout: float = START_TIMEOUT_S) -> RedisServer:
        """Stop if running, then start again on the same port with the same dir and data files."""
        self.stop()
        self._port_given = True  # clients and replicas know this port: never move it
        return self.start(timeout)

    def __enter__(self) -> RedisServer:
        if not self.is_running:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # clients and readiness

    def client(self, **kwargs: Any) -> redis.Redis:
        """A new ``redis.Redis`` for this server (bytes replies unless told otherwise).

        Keyword arguments override the defaults (host, port, password, TLS CA, ...). The
        caller closes it.
        """
        params: dict[str, Any] = {"host": HOST, "port": self._port, "decode_responses": False}
        if self.requirepass is not None:
            params["password"] = self.requirepass
        if self.tls is not None:
            params.update(ssl=True, **self._tls_params())
        params.update(kwargs)
        return redis.Redis(**params)

    def check_alive(self) -> None:
        """Raise ServerError, with the log tail, if the process is not running."""
        proc = self._proc
        if proc is None:
            raise ServerError(f"redis-server on port {self._port} was never started")
        code = proc.poll()
        if code is not None:
            _live.discard(proc)
            raise ServerError(
                f"redis-server on port {self._port} exited with status {code}; "
                f"log tail:\n{self.log_tail()}"
            )

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        """Poll PING until the server answers (not LOADING); raise ServerError with the log tail."""
        with self.client(socket_timeout=1, socket_connect_timeout=1, retry=_no_retry()) as c:

            def answers() -> bool:
                try:
                    return bool(c.ping())
                except redis.ConnectionError:  # BusyLoadingError is a ConnectionError
                    return False

            try:
                _poll(
                    answers,
                    timeout=timeout,
                    what=f"PING on port {self._port}",
                    alive=self.check_alive,
                )
            except ServerError as exc:
                if self.is_running:
                    raise ServerError(f"{exc}; log tail:\n{self.log_tail()}") from None
                raise

    def wait_replica_synced(self, timeout: float = START_TIMEOUT_S) -> None:
        """Poll ``INFO replication`` on this replica until ``master_link_status:up``."""
        with self.client(socket_timeout=2, retry=_no_retry()) as c:

            def synced() -> bool:
                try:
                    info = c.info("replication")
                except redis.ConnectionError:
                    return False
                return bool(info.get("master_link_status") == "up")

            _poll(
                synced,
                timeout=timeout,
                what=f"replica on port {self._port} to sync",
                alive=self.check_alive,
            )

    def wait_for_replicas(self, count: int = 1, timeout: float = START_TIMEOUT_S) -> None:
        """On a primary: ``WAIT`` until ``count`` replicas acknowledged every write so far."""
        with self.client(socket_timeout=timeout + 5) as c:
            acked = int(c.wait(count, int(timeout * 1000)))
        if acked < count:
            raise ServerError(f"only {acked} of {count} replicas acknowledged within {timeout:g} s")

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the server's log (for error messages)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

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
    """Three (by default) ``redis-server --cluster-enabled yes`` masters joined into one cluster."""

    def __init__(self, dir: Path, *, masters: int = 3) -> None:
        self.dir = dir
        self.nodes = [RedisServer(dir=dir / f"node{i}", cluster=True) for i in range(masters)]

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
            argv += ["--cluster-replicas", "0", "--cluster-yes"]
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
        """Poll ``CLUSTER INFO`` on every node: state ok, all slots assigned, all nodes known."""
        for node in self.nodes:
            with node.client(socket_timeout=2, retry=_no_retry()) as c:
                _poll(
                    functools.partial(self._node_ok, c),
                    timeout=timeout,
                    what=f"cluster state ok on port {node.port}",
                    alive=node.check_alive,
                )

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

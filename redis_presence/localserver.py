"""Local server processes: ``redis-server``, ``redis-sentinel``, ``valkey-server``, ...

The one launcher of the package: the demo, the benchmarks and the tests start every server
through `LocalServer`. A server is a child process of this one (never daemonized) on a
loopback port, with its files in its own directory; readiness is a ``PING`` polled against
a deadline, and stopping is SIGTERM, then SIGKILL after a grace period, then reaping. A
port this module picked is never handed out twice by the same process, and when a server
cannot bind it (another process took it first) the start is tried again on another port.
Processes still running when the interpreter exits are killed.

Which options a server runs with (persistence, TLS files, replication, cluster mode,
sentinel directives) is the caller's business: `LocalServer` adds only where it listens,
``--daemonize no`` and its directory.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

HOST = "127.0.0.1"
"""Every server started here listens on the loopback interface only."""
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 15.0
START_ATTEMPTS = 3
"""How many ports a server whose port was picked for it tries before giving up."""
NO_PERSISTENCE: Mapping[str, object] = {"--save": "", "--appendonly": "no"}
"""Options of a throwaway data server: no RDB snapshots, no append-only file."""

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_handed_out: set[int] = set()
"""Ports `free_port` returned in this process; never returned twice."""
_live: set[subprocess.Popen[bytes]] = set()
"""Server processes still running, killed at interpreter exit if nobody stopped them."""


class LocalServerError(RuntimeError):
    """A local server could not be started or did not become ready in time."""


@atexit.register
def _kill_leftovers() -> None:
    for process in list(_live):
        if process.poll() is None:
            process.kill()
            process.wait()
    _live.clear()


# --- ports and processes ------------------------------------------------------------------


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port(*, also_free: Sequence[int] = ()) -> int:
    """A loopback TCP port that nothing listens on now and that this process has not handed
    out; with `also_free`, ``port + k`` is free and unused too for each ``k`` (a Redis
    Cluster node also listens on ``port + 10000``)."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((HOST, 0))
            port: int = probe.getsockname()[1]
        extra = [port + k for k in also_free]
        if port in _handed_out or any(
            p > 65535 or p in _handed_out or not _bindable(p) for p in extra
        ):
            continue
        _handed_out.update((port, *extra))
        return port
    raise LocalServerError("no free loopback port found")


def die_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` that has Linux send SIGTERM to the child when this process dies, even
    by SIGKILL (`prctl(PR_SET_PDEATHSIG)`); None on other platforms or without libc.

    The signal follows the *thread* that starts the child: start it from a thread that
    lives as long as the child should (the demo uses its main thread).
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    parent = os.getpid()

    def preexec() -> None:  # in the child, between fork and exec
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def stop_process(process: subprocess.Popen[Any], timeout_s: float) -> None:
    """SIGTERM, wait up to `timeout_s`, then SIGKILL and reap: never leaves a zombie."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            process.wait()
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


def options_argv(options: Mapping[str, object]) -> list[str]:
    """Flatten ``{"--flag": value}`` into ``["--flag", "value"]``, in insertion order; a
    sequence value repeats the flag's arguments (``{"--replicaof": (host, port)}``)."""
    argv: list[str] = []
    for flag, value in options.items():
        values = value if isinstance(value, tuple | list) else (value,)
        argv += [flag, *(str(v) for v in values)]
    return argv


# --- one server ---------------------------------------------------------------------------


class LocalServer:
    """One server process of `binary` on a loopback port, with its files in `dir`.

    The command line is ``binary [config_file] --bind 127.0.0.1 --port P --daemonize no
    --dir DIR``, then `options` (which can override any of these), then `extra_args`. With
    ``tls_port=True`` the port is the TLS port (``--port 0 --tls-port P``; the certificate
    options are the caller's). Output goes to `log_file` (appended, after a ``### argv``
    line) or nowhere.
    `ping_kwargs` are the redis-py connection options the readiness ``PING`` needs
    (``password``, ``ssl=True`` and its files). ``detach=True`` starts the server in its own
    session, so a Ctrl-C at the terminal reaches only this process, which stops it in
    order; ``stop_with_parent=True`` has Linux SIGTERM it if this process dies.
    """

    def __init__(
        self,
        binary: str,
        *,
        dir: Path,
        port: int | None = None,
        options: Mapping[str, object] | None = None,
        extra_args: Sequence[str] = (),
        config_file: Path | None = None,
        tls_port: bool = False,
        log_file: Path | None = None,
        ping_kwargs: Mapping[str, Any] | None = None,
        pick_port: Callable[[], int] = free_port,
        detach: bool = False,
        stop_with_parent: bool = False,
    ) -> None:
        self.binary = binary
        self.dir = dir
        self.options: dict[str, object] = dict(options or {})
        self.extra_args: tuple[str, ...] = tuple(extra_args)
        self.config_file = config_file
        self.tls_port = tls_port
        self.log_file = log_file
        self.ping_kwargs: dict[str, Any] = dict(ping_kwargs or {})
        self.detach = detach
        self.stop_with_parent = stop_with_parent
        self._pick_port = pick_port
        self._port_given = port is not None
        self._port = port if port is not None else pick_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return HOST

    @property
    def port(self) -> int:
        return self._port

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        return self._process

    @property
    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def command_line(self) -> list[str]:
        """The argv this server runs with."""
        base: dict[str, object] = {"--bind": HOST, "--port": self._port}
        if self.tls_port:
            base.update({"--port": 0, "--tls-port": self._port})
        base.update({"--daemonize": "no", "--dir": self.dir})
        head = [self.binary] + ([str(self.config_file)] if self.config_file else [])
        return [*head, *options_argv({**base, **self.options}), *self.extra_args]

    # life cycle

    def start(self, timeout_s: float = START_TIMEOUT_S) -> LocalServer:
        """Start the process and wait until it answers ``PING``; return self. A server whose
        port was picked for it tries another port when the process exits early."""
        if self.is_running:
            raise LocalServerError(f"{self.name} is already running")
        attempts = 1 if self._port_given else START_ATTEMPTS
        for attempt in range(attempts):
            self._spawn()
            try:
                self.wait_ready(timeout_s)
                return self
            except LocalServerError:
                exited = not self.is_running
                self.kill()
                if not exited or attempt == attempts - 1:
                    raise
                self._port = self._pick_port()
        raise AssertionError("unreachable")

    def _spawn(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        argv = self.command_line()
        log: IO[bytes] | None = None
        if self.log_file is not None:
            log = self.log_file.open("ab")
            log.write(f"### {' '.join(argv)}\n".encode())
            log.flush()
        try:
            self._process = subprocess.Popen(
                argv,
                cwd=self.dir,
                stdin=subprocess.DEVNULL,
                stdout=log if log is not None else subprocess.DEVNULL,
                stderr=subprocess.STDOUT if log is not None else subprocess.DEVNULL,
                start_new_session=self.detach,
                # The hook only calls prctl, getppid and kill (safe between fork and exec).
                preexec_fn=die_with_parent() if self.stop_with_parent else None,  # noqa: PLW1509
            )
        finally:
            if log is not None:
                log.close()
        _live.add(self._process)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM (a server flushes its append-only file on it), SIGKILL after `timeout_s`,
        reap; safe to call twice."""
        if self._process is not None:
            stop_process(self._process, timeout_s)
            _live.discard(self._process)

    def kill(self) -> None:
        """SIGKILL the process (a crash: nothing is flushed) and reap it."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.kill()
        process.wait()
        _live.discard(process)

    def restart(self, timeout_s: float = START_TIMEOUT_S) -> LocalServer:
        """Stop if running, then start again on the same port, with the same directory."""
        self.stop()
        self._port_given = True  # clients, replicas and sentinels know this port
        return self.start(timeout_s)

    def __enter__(self) -> LocalServer:
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

    # readiness

    @property
    def name(self) -> str:
        return f"{Path(self.binary).name} on port {self._port}"

    def client(self, **kwargs: Any) -> redis.Redis:
        """A new ``redis.Redis`` for this server, with `ping_kwargs` and then `kwargs`."""
        return redis.Redis(host=HOST, port=self._port, **{**self.ping_kwargs, **kwargs})

    def check_alive(self) -> None:
        """Raise `LocalServerError` (with the log tail) if the process is not running."""
        process = self._process
        if process is None:
            raise LocalServerError(f"{self.name} was never started")
        code = process.poll()
        if code is not None:
            _live.discard(process)
            raise LocalServerError(
                f"{self.name} exited with status {code}; log tail:\n{self.log_tail()}"
            )

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Poll ``PING`` until the server answers (not ``LOADING``); raise `LocalServerError`
        with the log tail after `timeout_s`."""
        with self.client(
            socket_timeout=1, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0)
        ) as c:

            def answers() -> bool:
                try:
                    return bool(c.ping())
                except redis.ConnectionError:  # BusyLoadingError is a ConnectionError
                    return False

            try:
                poll(
                    answers,
                    timeout_s=timeout_s,
                    what=f"PING on port {self._port}",
                    alive=self.check_alive,
                )
            except LocalServerError as exc:
                if self.is_running:
                    raise LocalServerError(f"{exc}; log tail:\n{self.log_tail()}") from None
                raise

    def log_tail(self, lines: int = 40) -> str:
        """The last `lines` lines of the server's log (for error messages)."""
        if self.log_file is None:
            return "(output discarded)"
        try:
            text = self.log_file.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def __repr__(self) -> str:
        state = "running" if self.is_running else "stopped"
        return f"<LocalServer {self.name} {state} dir={self.dir}>"


def poll(
    check: Callable[[], bool],
    *,
    timeout_s: float,
    what: str,
    alive: Callable[[], None] = lambda: None,
) -> None:
    """Call `check` with a short, growing pause until it is true; `alive` raises if what is
    awaited has died. Raise `LocalServerError` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    pause = 0.005
    while True:
        alive()
        if check():
            return
        if time.monotonic() >= deadline:
            raise LocalServerError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(pause)
        pause = min(pause * 2, 0.1)

"""A throw-away local Redis for the demo (and the benchmarks): `redis-server` from PATH, else
fakeredis over TCP."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from redis_presence.errors import PresenceConfigError, PresenceConnectionError

ServerChoice = Literal["auto", "redis-server", "embedded"]
SERVER_CHOICES: tuple[ServerChoice, ...] = ("auto", "redis-server", "embedded")

_HOST = "127.0.0.1"
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


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


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((_HOST, 0))
        port: int = probe.getsockname()[1]
        return port


def _pings(port: int) -> bool:
    """Whether a Redis answers PING on the loopback `port` (raw RESP, no client library)."""
    try:
        with socket.create_connection((_HOST, port), timeout=0.5) as conn:
            conn.sendall(b"*1\r\n$4\r\nPING\r\n")
            return conn.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@dataclass
class LocalRedis:
    """A running local server: where it listens, what it is, and how to stop it."""

    url: str
    port: int
    kind: str
    pid: int | None = None
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _fake: Any = field(default=None, repr=False)
    _tmpdir: tempfile.TemporaryDirectory[str] | None = field(default=None, repr=False)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the server: terminate, then kill after `timeout_s`; safe to call twice."""
        if self._process is not None:
            stop_process(self._process, timeout_s)
            self._process = None
        if self._fake is not None:
            self._fake.shutdown()
            self._fake.server_close()
            self._fake = None
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None

    def __enter__(self) -> LocalRedis:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


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


def start_redis_server(binary: str, *, ready_timeout_s: float = 10.0) -> LocalRedis:
    """Start `binary` on a free loopback port with no persistence and wait for PING; on
    Linux the server gets SIGTERM when this process dies, however it dies."""
    for _attempt in range(3):  # another process may grab the free port first
        port = free_port()
        tmpdir = tempfile.TemporaryDirectory(prefix="redis-presence-demo-")
        process = subprocess.Popen(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                _HOST,
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                tmpdir.name,
                "--loglevel",
                "warning",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C reaches the demo, which stops us in order
            # A SIGKILLed demo cannot stop us, so the kernel does. The demo starts its server
            # before any thread, and the hook only calls prctl, getppid and kill.
            preexec_fn=die_with_parent(),  # noqa: PLW1509
        )
        server = LocalRedis(
            f"redis://{_HOST}:{port}/0", port, "redis-server", process.pid, process, None, tmpdir
        )
        deadline = time.monotonic() + ready_timeout_s
        while time.monotonic() < deadline and process.poll() is None:
            if _pings(port):
                return server
            time.sleep(0.02)
        server.stop()
    raise PresenceConnectionError(f"could not start {binary} on a free loopback port")


def start_fake_server() -> LocalRedis:
    """Serve an in-process fakeredis (with Lua) on a free loopback port, in a thread."""
    try:
        # fakeredis is the optional `embedded` extra: imported only when it is needed.
        from fakeredis import TcpFakeServer
    except ImportError:
        raise PresenceConfigError(
            "the embedded server needs fakeredis: install it with "
            "`pip install 'redis-presence[embedded]'`, or install redis-server "
            "(e.g. `apt-get install redis-server`) and use --server redis-server"
        ) from None
    fake = TcpFakeServer((_HOST, 0), server_type="redis")
    fake.daemon_threads = True  # a stuck client connection must not block exit
    fake.block_on_close = False
    port = int(fake.server_address[1])
    threading.Thread(target=fake.serve_forever, name="fakeredis", daemon=True).start()
    return LocalRedis(f"redis://{_HOST}:{port}/0", port, "embedded fakeredis", None, None, fake)


def start_local_redis(choice: ServerChoice = "auto") -> LocalRedis:
    """A local server: `redis-server` from PATH when there is one (or when asked)."""
    binary = shutil.which("redis-server")
    if choice == "redis-server" or (choice == "auto" and binary is not None):
        if binary is None:
            raise PresenceConfigError(
                "redis-server is not on PATH: install it (e.g. `apt-get install "
                "redis-server`), or use --server embedded (`pip install "
                "'redis-presence[embedded]'`)"
            )
        return start_redis_server(binary)
    try:
        return start_fake_server()
    except PresenceConfigError:
        if choice == "auto":
            raise PresenceConfigError(
                "no redis-server on PATH and no fakeredis for the embedded server: install "
                "either (`apt-get install redis-server`, or `pip install "
                "'redis-presence[embedded]'`)"
            ) from None
        raise

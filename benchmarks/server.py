"""The benchmark's own ``redis-server``: a child process on a free loopback port.

It never touches another server: the port is picked by the kernel, persistence is off
(``--save '' --appendonly no``), and the process is stopped on exit, on an exception and
on Ctrl-C. On Linux the child also gets SIGTERM if this process dies without cleaning up.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import redis

HOST = "127.0.0.1"
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 10.0


class ServerError(RuntimeError):
    """The benchmark's redis-server could not be found, started or reached."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
    return port


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM when the benchmark process dies (Linux)."""
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return
    pr_set_pdeathsig = 1
    ctypes.CDLL(libc_name, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


class BenchServer:
    """A throwaway ``redis-server`` for one benchmark run; use it as a context manager."""

    def __init__(self, binary: str | None = None) -> None:
        found = binary or shutil.which("redis-server")
        if found is None:
            raise ServerError("redis-server is not on PATH (Debian: apt-get install redis-server)")
        self.binary = found
        self.port = 0
        self._dir: tempfile.TemporaryDirectory[str] | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def version(self) -> str:
        """``redis_version`` as the running server reports it."""
        with self.client() as client:
            return str(client.info("server")["redis_version"])

    def start(self) -> BenchServer:
        """Start the server and wait until it answers PING."""
        self._dir = tempfile.TemporaryDirectory(prefix="redis-presence-bench-")
        self.port = _free_port()
        log = Path(self._dir.name) / "redis.log"
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", HOST,
            "--save", "",
            "--appendonly", "no",
            "--protected-mode", "yes",
            "--dir", self._dir.name,
            "--logfile", str(log),
            "--daemonize", "no",
        ]  # fmt: skip
        self._proc = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            # Ctrl-C reaches us, not the server: we stop it ourselves, after the cleanup.
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,  # noqa: PLW1509
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        with self.client(socket_timeout=1, socket_connect_timeout=1) as client:
            while True:
                if self._proc.poll() is not None:
                    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                    self.stop()
                    raise ServerError(f"redis-server exited with {self._proc.returncode}:\n{tail}")
                try:
                    if client.ping():
                        return self
                except redis.ConnectionError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise ServerError(f"redis-server on port {self.port} did not answer in time")
                time.sleep(0.02)

    def client(self, **kwargs: Any) -> redis.Redis:
        """A new client of this server (bytes replies); the caller closes it."""
        params: dict[str, Any] = {"host": HOST, "port": self.port}
        params.update(kwargs)
        return redis.Redis(**params)

    def stop(self) -> None:
        """SIGTERM the server (SIGKILL after a timeout) and remove its directory."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    def __enter__(self) -> BenchServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

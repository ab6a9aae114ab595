"""The benchmark's own ``redis-server``: a child process on a free loopback port.

It never touches another server: the port is picked by the kernel, persistence is off
(``--save '' --appendonly no``), and the process is stopped on exit, on an exception and
on Ctrl-C; on Linux it also gets SIGTERM if this process dies without cleaning up. The
process is started by the package's one launcher (`redis_presence.localserver`), as the
demo's and the tests' servers are.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

import redis

from redis_presence.localserver import NO_PERSISTENCE, LocalServer, LocalServerError

HOST = "127.0.0.1"
START_TIMEOUT_S = 20.0


class ServerError(RuntimeError):
    """The benchmark's redis-server could not be found, started or reached."""


class BenchServer:
    """A throwaway ``redis-server`` for one benchmark run; use it as a context manager."""

    def __init__(self, binary: str | None = None) -> None:
        found = binary or shutil.which("redis-server")
        if found is None:
            raise ServerError("redis-server is not on PATH (Debian: apt-get install redis-server)")
        self.binary = found
        self.port = 0
        self._local: LocalServer | None = None
        self._tmpdir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def version(self) -> str:
        """``redis_version`` as the running server reports it."""
        with self.client() as client:
            return str(client.info("server")["redis_version"])

    def start(self) -> BenchServer:
        """Start the server and wait until it answers PING."""
        self._tmpdir = tempfile.TemporaryDirectory(prefix="redis-presence-bench-")
        self._local = LocalServer(
            self.binary,
            dir=Path(self._tmpdir.name),
            options={**NO_PERSISTENCE, "--loglevel": "warning"},
            detach=True,  # Ctrl-C reaches the benchmark, which stops the server in order
            stop_with_parent=True,
        )
        try:
            self._local.start(START_TIMEOUT_S)
        except LocalServerError as exc:
            self.stop()
            raise ServerError(f"could not start {self.binary}: {exc}") from exc
        self.port = self._local.port
        return self

    def client(self, **kwargs: Any) -> redis.Redis:
        """A new client of this server (bytes replies); the caller closes it."""
        params: dict[str, Any] = {"host": HOST, "port": self.port}
        params.update(kwargs)
        return redis.Redis(**params)

    def stop(self) -> None:
        """SIGTERM the server (SIGKILL after a timeout) and remove its directory."""
        local, self._local = self._local, None
        if local is not None:
            local.stop(timeout_s=10.0)
        tmpdir, self._tmpdir = self._tmpdir, None
        if tmpdir is not None:
            tmpdir.cleanup()

    def __enter__(self) -> BenchServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

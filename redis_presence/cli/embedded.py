"""A throw-away local Redis for the demo (and the benchmarks): `redis-server` from PATH, else
fakeredis over TCP.

The process itself is started by the package's one launcher, `redis_presence.localserver`;
`die_with_parent`, `free_port` and `stop_process` are re-exported from there.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from redis_presence.errors import PresenceConfigError, PresenceConnectionError
from redis_presence.localserver import (
    HOST,
    NO_PERSISTENCE,
    LocalServer,
    LocalServerError,
    die_with_parent,
    free_port,
    stop_process,
)

__all__ = [
    "SERVER_CHOICES",
    "LocalRedis",
    "ServerChoice",
    "die_with_parent",
    "free_port",
    "start_fake_server",
    "start_local_redis",
    "start_redis_server",
    "stop_process",
]

ServerChoice = Literal["auto", "redis-server", "embedded"]
SERVER_CHOICES: tuple[ServerChoice, ...] = ("auto", "redis-server", "embedded")


@dataclass
class LocalRedis:
    """A running local server: where it listens, what it is, and how to stop it."""

    url: str
    port: int
    kind: str
    pid: int | None = None
    _server: LocalServer | None = field(default=None, repr=False)
    _fake: Any = field(default=None, repr=False)
    _tmpdir: tempfile.TemporaryDirectory[str] | None = field(default=None, repr=False)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the server: terminate, then kill after `timeout_s`; safe to call twice."""
        if self._server is not None:
            self._server.stop(timeout_s)
            self._server = None
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


def start_redis_server(binary: str, *, ready_timeout_s: float = 10.0) -> LocalRedis:
    """Start `binary` on a free loopback port with no persistence and wait for PING; on
    Linux the server gets SIGTERM when this process dies, however it dies."""
    tmpdir = tempfile.TemporaryDirectory(prefix="redis-presence-demo-")
    server = LocalServer(
        binary,
        dir=Path(tmpdir.name),
        options={**NO_PERSISTENCE, "--loglevel": "warning"},
        detach=True,  # Ctrl-C reaches the demo, which stops us in order
        # A SIGKILLed demo cannot stop us, so the kernel does. The demo starts its server
        # before any thread.
        stop_with_parent=True,
    )
    try:
        server.start(ready_timeout_s)
    except LocalServerError:
        tmpdir.cleanup()
        raise PresenceConnectionError(f"could not start {binary} on a free loopback port") from None
    return LocalRedis(
        f"redis://{HOST}:{server.port}/0",
        server.port,
        "redis-server",
        server.pid,
        server,
        None,
        tmpdir,
    )


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
    fake = TcpFakeServer((HOST, 0), server_type="redis")
    fake.daemon_threads = True  # a stuck client connection must not block exit
    fake.block_on_close = False
    port = int(fake.server_address[1])
    threading.Thread(target=fake.serve_forever, name="fakeredis", daemon=True).start()
    return LocalRedis(f"redis://{HOST}:{port}/0", port, "embedded fakeredis", None, None, fake)


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

"""Running the app: a listening socket bound before uvicorn starts, and logging."""

from __future__ import annotations

import copy
import signal
import socket
from types import FrameType
from typing import Any

import uvicorn
from uvicorn.config import LOGGING_CONFIG

from .app import create_app
from .service import WebConfig

SHUTDOWN_GRACE_S = 5
"""How long a stop (Ctrl-C, SIGTERM) waits for open requests and event streams."""
LISTEN_BACKLOG = 2048
"""Connections the kernel queues before the service accepts them (hundreds of dashboards
reconnecting at once after a restart must not wait out SYN retries)."""


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on `host:port` (port 0 picks a free one); `OSError` if the
    address cannot be used."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
        sock.listen(LISTEN_BACKLOG)
        sock.set_inheritable(True)
    except OSError:
        sock.close()
        raise
    return sock


def url_of(sock: socket.socket) -> str:
    """``http://host:port`` of a bound socket (IPv6 hosts in brackets)."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def logging_config(level: str) -> dict[str, Any]:
    """uvicorn's logging, plus the service's own logger (one access line per request)."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["redis_presence"] = {
        "handlers": ["default"],
        "level": level.upper(),
        "propagate": False,
    }
    config["loggers"]["uvicorn.error"]["level"] = level.upper()
    return config


def run(config: WebConfig, sock: socket.socket, *, log_level: str = "info") -> None:
    """Serve `config` on `sock` until Ctrl-C or SIGTERM."""
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(config),
            log_config=logging_config(log_level),
            log_level=log_level,
            access_log=False,  # the app logs each request itself, with the raw path
            proxy_headers=False,
            server_header=False,
            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
            lifespan="on",
        )
    )
    # uvicorn stops on SIGINT/SIGTERM, then raises the signal again to whatever handler
    # was there before it: a no-op here, so a stop is a clean exit (status 0).
    stopping = (signal.SIGINT, signal.SIGTERM)
    previous = {number: signal.signal(number, _already_stopped) for number in stopping}
    try:
        server.run(sockets=[sock])
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _already_stopped(signum: int, frame: FrameType | None) -> None:
    """The handler uvicorn hands a stop signal back to once it has shut down."""

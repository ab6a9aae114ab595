"""A TCP proxy in front of a test server: it delays replies, or cuts the connection right
after the server answered a chosen command (a reply lost once the change was applied).

Clients connect to ``proxy.port``; every connection gets its own upstream connection and
two pump threads. Only loopback addresses are used.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from types import TracebackType

HOST = "127.0.0.1"
CHUNK = 65536


class _Pair:
    """One client connection and its upstream connection."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.cut_next_reply = False
        self.closed = False
        self.lock = threading.Lock()

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class Proxy:
    """Forwards loopback connections to ``upstream_port``.

    `delay_s` delays each chunk of replies. `cut_after(marker)` arms the proxy: the next
    command whose bytes contain `marker` reaches the server, and the server's reply to it
    is dropped and the connection closed (`cuts` counts the replies lost that way).
    """

    def __init__(self, upstream_port: int, *, delay_s: float = 0.0) -> None:
        self.upstream_port = upstream_port
        self.delay_s = delay_s
        self.cuts = 0
        self._marker: bytes | None = None
        self._pairs: list[_Pair] = []
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server((HOST, 0))
        self.port: int = self._listener.getsockname()[1]
        self._closing = False
        self._spawn(self._accept)

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    def cut_after(self, marker: bytes) -> None:
        """Lose the reply to the next command that contains `marker`."""
        with self._lock:
            self._marker = marker

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection((HOST, self.upstream_port))
            pair = _Pair(client, upstream)
            with self._lock:
                self._pairs.append(pair)
            self._spawn(self._requests, pair)
            self._spawn(self._replies, pair)

    def _requests(self, pair: _Pair) -> None:
        """Client to server; arms the pair before the marked command leaves."""
        try:
            while data := pair.client.recv(CHUNK):
                with self._lock:
                    if self._marker is not None and self._marker in data:
                        self._marker = None
                        pair.cut_next_reply = True
                pair.upstream.sendall(data)
        except OSError:
            pass
        pair.close()

    def _replies(self, pair: _Pair) -> None:
        """Server to client; drops the reply of an armed pair and closes it."""
        try:
            while data := pair.upstream.recv(CHUNK):
                if pair.cut_next_reply:
                    with self._lock:
                        self.cuts += 1
                    break
                if self.delay_s:
                    time.sleep(self.delay_s)
                pair.client.sendall(data)
        except OSError:
            pass
        pair.close()

    def close(self) -> None:
        self._closing = True
        with contextlib.suppress(OSError):  # wakes the accepting thread (Linux)
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            pairs = list(self._pairs)
        for pair in pairs:
            pair.close()
        for thread in list(self._threads):
            thread.join(5)

    def __enter__(self) -> Proxy:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

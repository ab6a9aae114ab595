"""The ASGI pieces under the routes: `PrefixRoute` (every path under a prefix, whatever
names decode to) and `AccessLog` (one line per request, with the raw path)."""

from __future__ import annotations

import logging
import time

from starlette.routing import Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("redis_presence.web")


class PrefixRoute(Route):
    """A route for every path under `path` (which ends with ``/``), whatever the decoded
    path holds: names may decode to newlines, which Starlette's path patterns refuse."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        path, root = scope["path"], scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        if scope["type"] != "http" or not path.startswith(self.path):
            return Match.NONE, {}
        child_scope = {"endpoint": self.endpoint, "path_params": {}}
        if self.methods and scope["method"] not in self.methods:
            return Match.PARTIAL, child_scope
        return Match.FULL, child_scope


class AccessLog:
    """One log line per request with the raw (percent-encoded) path, so a name holding a
    newline cannot forge a log line; no header (and so no token) is logged."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            raw = scope.get("raw_path") or scope["path"].encode()
            query = scope.get("query_string", b"")
            target = raw + (b"?" + query if query else b"")
            client = scope.get("client") or ("-", 0)
            log.info(
                "%s %s %s %d %.1f ms",
                client[0],
                scope["method"],
                target.decode("ascii", "backslashreplace"),
                status,
                (time.perf_counter() - started) * 1000,
            )

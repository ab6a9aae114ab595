"""The service's last line: an exception no route or handler expected is one JSON 500
(``{"error": "internal"}``), logged once on one line (any URL's password redacted, with
where it was raised), never a traceback page nor a traceback in the log."""

from __future__ import annotations

import logging
import traceback

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from redis_presence.redaction import redact_urls

from .security import send_json_error

log = logging.getLogger("redis_presence.web")

INTERNAL_MESSAGE = "internal error (see the service log)"


def _where(exc: BaseException) -> str:
    """``file:line in function`` of the innermost frame that raised `exc`."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return "?"
    last = frames[-1]
    return f"{last.filename}:{last.lineno} in {last.name}"


class CatchAll:
    """ASGI middleware: any exception of the app below becomes a JSON 500 (or, once the
    response has started, the end of it), logged once."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as exc:
            raw = scope.get("raw_path") or scope.get("path", "").encode()
            log.error(
                "%s %s failed: %s (at %s)",
                scope.get("method", "?"),
                raw[:200].decode("ascii", "backslashreplace"),
                redact_urls(f"{type(exc).__name__}: {exc}")[:500],
                _where(exc),
            )
            if started:
                return  # the client sees its response cut short
            await send_json_error(send, 500, "internal", INTERNAL_MESSAGE)

"""`--auth-token`: one shared secret for API clients, scrapers and browsers.

API clients and Prometheus send ``Authorization: Bearer <token>``; a browser sends the
token as the password of HTTP Basic authentication (any user name), which it asks for by
itself when a page answers 401 with a ``Basic`` challenge. Every route but `/healthz`
needs it. Tokens are compared in constant time and never logged.
"""

from __future__ import annotations

import base64
import binascii
import hmac

from starlette.types import ASGIApp, Receive, Scope, Send

from .security import send_json_error

REALM = "redis-presence"
OPEN_PATHS = frozenset({"/healthz"})
"""Paths that answer without the token (liveness probes)."""

CHALLENGES = (
    (b"www-authenticate", f'Basic realm="{REALM}", charset="UTF-8"'.encode()),
    (b"www-authenticate", f'Bearer realm="{REALM}"'.encode()),
)


def presented_token(authorization: str) -> str | None:
    """The token in an ``Authorization`` header value (Bearer, or a Basic password)."""
    scheme, _, credentials = authorization.strip().partition(" ")
    credentials = credentials.strip()
    if scheme.lower() == "bearer" and credentials:
        return credentials
    if scheme.lower() == "basic" and credentials:
        try:
            decoded = base64.b64decode(credentials, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        _, sep, password = decoded.partition(":")
        return password if sep else None
    return None


class TokenAuth:
    """ASGI middleware: refuse every HTTP request without the token with a 401."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        if not token:
            raise ValueError("auth token must not be empty")
        self.app = app
        self._token = token.encode("utf-8")

    def allows(self, scope: Scope) -> bool:
        if scope["path"] in OPEN_PATHS:
            return True
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                token = presented_token(value.decode("latin-1"))
                return token is not None and hmac.compare_digest(token.encode("utf-8"), self._token)
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.allows(scope):
            await self.app(scope, receive, send)
            return
        await send_json_error(
            send, 401, "unauthorized", "this service needs its auth token", CHALLENGES
        )

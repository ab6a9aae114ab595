"""`--auth-token`: one shared secret for API clients, scrapers and browsers.

API clients and Prometheus send ``Authorization: Bearer <token>``; a browser sends the
token as the password of HTTP Basic authentication (any user name), which it asks for by
itself when a page answers 401 with a ``Basic`` challenge. Every route but `/healthz`
needs it. Both schemes compare the token's UTF-8 bytes (a non-ASCII token works over
either), in constant time; a token Bearer could not carry as it is (whitespace at an
end, a control character) is refused at startup. Tokens are never logged.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import unicodedata

from starlette.types import ASGIApp, Receive, Scope, Send

from .security import send_json_error

REALM = "redis-presence"
OPEN_PATHS = frozenset({"/healthz"})
"""Paths that answer without the token (liveness probes)."""

CHALLENGES = (
    (b"www-authenticate", f'Basic realm="{REALM}", charset="UTF-8"'.encode()),
    (b"www-authenticate", f'Bearer realm="{REALM}"'.encode()),
)


def check_token(token: str) -> bytes:
    """The token's UTF-8 bytes, what both schemes must present; `ValueError` (naming no part
    of it) for a token that Bearer could not carry as it is: empty, with whitespace at
    either end (HTTP strips it from a header value), or with a control character."""
    if not token:
        raise ValueError("the auth token must not be empty")
    if token != token.strip():
        raise ValueError(
            "the auth token begins or ends with whitespace (a newline from a file or a "
            "secret, say), which an Authorization: Bearer header cannot carry: remove it"
        )
    if any(unicodedata.category(c) == "Cc" for c in token):
        raise ValueError(
            "the auth token holds a control character, which an Authorization: Bearer "
            "header cannot carry: remove it"
        )
    return token.encode("utf-8")


def presented_token(authorization: bytes | str) -> bytes | None:
    """The token an ``Authorization`` header value presents, as bytes (a Bearer token as
    sent: UTF-8 for a non-ASCII one; a Basic password as decoded from base64), so both
    schemes compare the same bytes; a str is taken as its UTF-8."""
    if isinstance(authorization, str):
        authorization = authorization.encode("utf-8")
    scheme, _, credentials = authorization.strip().partition(b" ")
    credentials = credentials.strip()
    if scheme.lower() == b"bearer" and credentials:
        return credentials
    if scheme.lower() == b"basic" and credentials:
        try:
            decoded = base64.b64decode(credentials, validate=True)
        except binascii.Error:
            return None
        _, sep, password = decoded.partition(b":")
        return password if sep else None
    return None


class TokenAuth:
    """ASGI middleware: refuse every HTTP request without the token with a 401."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._token = check_token(token)

    def allows(self, scope: Scope) -> bool:
        if scope["path"] in OPEN_PATHS:
            return True
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                token = presented_token(value)
                return token is not None and hmac.compare_digest(token, self._token)
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.allows(scope):
            await self.app(scope, receive, send)
            return
        await send_json_error(
            send, 401, "unauthorized", "this service needs its auth token", CHALLENGES
        )

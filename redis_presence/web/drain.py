"""Drain requests from the dashboard (``serve --drain-token``): off by default.

``POST /api/v1/drain`` with a JSON body ``{"queue": Q, "group": G, "consumer": C}`` asks that
consumer to drain (`request_drain`: the writer's role; the script logs the
``drain_requested`` event itself, and the consumer's next beat's reply tells it). It is
answered only when the service was started with a drain token, a second secret besides
``--auth-token`` (which lets a person read, not write), and a writable registry (not
``--read-only``); without one it is a 403 ``drain_disabled`` and the pages offer no drain.

Cross-site request forgery cannot reach it: the token travels in a header
(``X-Presence-Drain-Token``), which a page of another origin cannot add to a request
without a CORS preflight that this service never grants; the body must be
``application/json`` (likewise); a request that says it comes from another origin
(``Origin``, ``Sec-Fetch-Site``) is refused before the token is looked at. The token is
never logged, never rendered into a page: the person types it into the consumer page's
form. Every answer is JSON (errors as ``{"error", "message"}``).
"""

from __future__ import annotations

import hmac
import json
import logging
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .auth import check_token
from .security import host_of

log = logging.getLogger("redis_presence.web")

DRAIN_PATH = "/api/v1/drain"
TOKEN_HEADER = "x-presence-drain-token"
MAX_BODY_BYTES = 4_096
"""A drain request's body at most (three names)."""
FIELDS = ("queue", "group", "consumer")


def check_drain_token(token: str, *, auth_token: str | None, read_only: bool) -> bytes:
    """The drain token's bytes; `ValueError` (naming no part of it) for one that cannot be
    sent in a header, that equals the read token (then every reader could drain), or a
    service that cannot write (``--read-only``)."""
    if read_only:
        raise ValueError("a drain token needs a service that writes: drop --read-only")
    raw = check_token(token)
    if auth_token is not None and hmac.compare_digest(raw, auth_token.encode("utf-8")):
        raise ValueError("the drain token must differ from the auth token")
    return raw


def _error(status: int, code: str, message: str) -> Response:
    return JSONResponse(
        {"error": code, "message": message},
        status_code=status,
        headers={"Cache-Control": "no-store"},
    )


def _port(netloc: str) -> int | None:
    """The explicit port of a ``host[:port]`` (None: none, or not a port)."""
    try:
        return urlsplit("//" + netloc).port
    except ValueError:
        return None


def same_origin(request: Request) -> bool:
    """Whether nothing the browser says puts the request on another origin: no
    ``Sec-Fetch-Site`` other than ``same-origin`` (or ``none``: typed by the person), and an
    ``Origin``, when sent, naming this host and port (the scheme is not compared: a proxy
    may end TLS in front of the service, and browsers leave a default port out of both)."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None:
        return True
    parts = urlsplit(origin)
    host = request.headers.get("host")
    if host is None or not parts.netloc or parts.scheme not in ("http", "https"):
        return False
    if host_of(parts.netloc) is None or host_of(parts.netloc) != host_of(host):
        return False
    # The same explicit port, or none on either (browsers leave a default port out).
    return _port(parts.netloc) == _port(host)


async def _names(request: Request) -> tuple[str, str, str] | Response:
    """The body's three names, or the 4xx that says what is wrong with it."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        return _error(415, "unsupported_media_type", "a drain request's body is application/json")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            return _error(
                413, "too_large", f"a drain request's body is {MAX_BODY_BYTES} bytes at most"
            )
    try:
        found: Any = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return _error(400, "bad_request", "a drain request's body is a JSON object")
    if not isinstance(found, dict) or any(not isinstance(found.get(f), str) for f in FIELDS):
        return _error(
            400,
            "bad_request",
            'a drain request names {"queue": ..., "group": ..., "consumer": ...}',
        )
    return found["queue"], found["group"], found["consumer"]


async def drain(request: Request, registry: Any, token: bytes | None) -> Response:
    """``POST /api/v1/drain``: the checks above, then one `request_drain`."""
    if token is None:
        return _error(
            403,
            "drain_disabled",
            "drain requests are off: start serve with --drain-token (REDIS_PRESENCE_DRAIN_TOKEN)",
        )
    if not same_origin(request):
        return _error(403, "cross_origin", "a drain request must come from this service's pages")
    given = request.headers.get(TOKEN_HEADER, "").encode("utf-8")
    if not given or not hmac.compare_digest(given, token):
        return _error(
            403, "drain_forbidden", f"a drain request needs the drain token ({TOKEN_HEADER})"
        )
    names = await _names(request)
    if isinstance(names, Response):
        return names
    queue, group, consumer = names
    try:
        tracked = await registry.request_drain(queue, group, consumer)
    except (ValueError, TypeError) as exc:  # a name the package refuses
        return _error(400, "bad_request", str(exc))
    fields = {"queue": queue, "group": group, "consumer": consumer}
    if not tracked:
        message = f"queue {queue!r} group {group!r} has no tracked consumer {consumer!r}"
        return _error(404, "not_tracked", message)
    log.info("drain requested: queue %r group %r consumer %r", queue, group, consumer)
    return JSONResponse(fields | {"drain_requested": True}, headers={"Cache-Control": "no-store"})

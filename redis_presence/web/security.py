"""What every response of the service carries, and which ``Host`` it answers to.

`HostCheck` answers 421 (JSON) to a request whose ``Host`` the service does not know: a
page on another site that rebinds its own name to a loopback address (DNS rebinding) sends
its own name as the ``Host``, so it cannot read a service that answers only to its own
names. Allowed by default: the loopback names (``localhost``, ``127.0.0.1``, ``[::1]``),
the address the service was bound to (``--host``), and the IP address a request arrived
at (a service bound to ``0.0.0.0`` answers to each address of the machine); more with
``--allowed-host`` / ``REDIS_PRESENCE_ALLOWED_HOSTS`` (``*.example.com`` for its
subdomains, ``*`` for any ``Host``, behind a proxy that checks it).

`SecurityHeaders` adds to every response the headers that keep the page's own content
from being run, framed or leaked: a Content-Security-Policy without inline script or
style (the templates load one script and one stylesheet, both from ``/static``),
``X-Content-Type-Options: nosniff``, ``X-Frame-Options: DENY`` and ``Referrer-Policy:
no-referrer``.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
ALLOWED_HOSTS_ENV = "REDIS_PRESENCE_ALLOWED_HOSTS"
MAX_SHOWN_HOST = 100
"""A refused ``Host`` is named in the 421's message up to this many characters."""

CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
HEADERS = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-resource-policy", b"same-origin"),
)


def normalize_host(name: str) -> str:
    """A host name as `HostCheck` compares it: lower case, without a trailing dot, an IPv6
    address without brackets and in its short form."""
    name = name.strip().lower().rstrip(".")
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return name


def host_of(value: str) -> str | None:
    """The host name of a ``Host`` header value (its port dropped), normalized; None when it
    is not one."""
    value = value.strip()
    if not value or any(c.isspace() or c in "/\\@?#" for c in value):
        return None
    if value.startswith("["):  # [v6] or [v6]:port
        end = value.find("]")
        host, rest = value[: end + 1], value[end + 1 :]
        if end < 0 or (rest and not rest.startswith(":")):
            return None
        port = rest[1:]
    elif value.count(":") == 1:
        host, port = value.split(":")
    elif ":" in value:
        return None  # an IPv6 address needs brackets in a Host header
    else:
        host, port = value, ""
    if port and not port.isdigit():
        return None
    return normalize_host(host) or None


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def parse_allowed_hosts(text: str) -> list[str]:
    """The host names of ``REDIS_PRESENCE_ALLOWED_HOSTS`` (separated by commas or spaces)."""
    return [part for part in text.replace(",", " ").split() if part]


class HostCheck:
    """ASGI middleware: a 421 JSON error for every HTTP request whose ``Host`` is not one
    of `allowed` (the loopback names are always in), nor the IP address it arrived at."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str] = ()) -> None:
        self.app = app
        names = {normalize_host(name) for name in (*LOOPBACK_NAMES, *allowed) if name.strip()}
        self.any = "*" in names
        self.suffixes = tuple(name[1:] for name in names if name.startswith("*."))
        self.names = frozenset(name for name in names if not name.startswith("*"))

    def allows(self, host: str | None, scope: Scope) -> bool:
        if self.any:
            return True
        if host is None:
            return False
        if host in self.names or host.endswith(self.suffixes):
            return True
        server = scope.get("server")  # the address this connection arrived at
        return server is not None and _is_ip(host) and host == normalize_host(str(server[0]))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw = [value for name, value in scope.get("headers", ()) if name == b"host"]
        given = raw[0].decode("latin-1") if len(raw) == 1 else None
        if self.allows(host_of(given) if given is not None else None, scope):
            await self.app(scope, receive, send)
            return
        shown = "no Host header" if given is None else f"Host {given[:MAX_SHOWN_HOST]!r}"
        if len(raw) > 1:
            shown = "more than one Host header"
        message = (
            f"this service does not answer to {shown}: allow it with --allowed-host or "
            f"{ALLOWED_HOSTS_ENV}"
        )
        await send_json_error(send, 421, "misdirected_request", message)


async def send_json_error(
    send: Send,
    status: int,
    code: str,
    message: str,
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    """Answer with ``{"error": code, "message": message}`` (what a middleware refuses)."""
    body = json.dumps({"error": code, "message": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class SecurityHeaders:
    """ASGI middleware: `HEADERS` on every HTTP response (errors, 401s and 421s too)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", ())}
                extra = [(name, value) for name, value in HEADERS if name not in present]
                message = {**message, "headers": [*message.get("headers", ()), *extra]}
            await send(message)

        await self.app(scope, receive, sending)


__all__ = [
    "ALLOWED_HOSTS_ENV",
    "CONTENT_SECURITY_POLICY",
    "HostCheck",
    "SecurityHeaders",
    "host_of",
    "normalize_host",
    "parse_allowed_hosts",
    "send_json_error",
]

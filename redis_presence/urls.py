"""Connection URLs: opening redis-py clients and redacting credentials from messages."""

from __future__ import annotations

import re
from typing import Any

import redis

from .errors import PresenceConfigError

SCHEMES = ("redis", "rediss", "unix")
_CREDENTIALS = re.compile(r"(?<=://)([^/@]*)@")


def redact(url: str) -> str:
    """The URL with any password replaced by ``***`` (safe for messages and logs)."""

    def hide(match: re.Match[str]) -> str:
        user, sep, _ = match.group(1).partition(":")
        return f"{user}:***@" if sep else f"{user}@" if user else "***@"

    return _CREDENTIALS.sub(hide, url, count=1)


def scheme_of(url: Any) -> str:
    """The URL's scheme, or a `PresenceConfigError` naming what is wrong."""
    if not isinstance(url, str):
        raise PresenceConfigError(f"url must be a str, got {type(url).__name__}")
    scheme, sep, rest = url.partition("://")
    if not sep or not rest:
        raise PresenceConfigError(
            f"invalid Redis URL {redact(url)!r}: expected scheme://[user:password@]host[:port][/db]"
        )
    scheme = scheme.lower()
    if scheme not in SCHEMES:
        raise PresenceConfigError(
            f"invalid Redis URL {redact(url)!r}: scheme must be one of "
            + ", ".join(f"{s}://" for s in SCHEMES)
        )
    return scheme


def open_client(url: str, **kwargs: Any) -> Any:
    """A synchronous redis-py client for `url` (no connection is made until first use)."""
    scheme_of(url)
    try:
        return redis.Redis.from_url(url, **kwargs)
    except (ValueError, TypeError) as exc:
        raise PresenceConfigError(scrub(f"invalid Redis URL {redact(url)!r}: {exc}", url)) from None


def scrub(message: str, url: str) -> str:
    """The message with the URL's password, if any, replaced by ``***``."""
    match = _CREDENTIALS.search(url)
    password = match.group(1).partition(":")[2] if match else ""
    return message.replace(password, "***") if password else message

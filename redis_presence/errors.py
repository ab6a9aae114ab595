"""The package's exceptions: catch `PresenceError` to catch them all.

Bad arguments raise the built-in `TypeError` / `ValueError` (before anything is
written); everything that goes wrong on the Redis side is a `PresenceError`.
"""

from __future__ import annotations

from redis import exceptions as rx


class PresenceError(Exception):
    """Base class of every error raised by redis-presence for a Redis-side failure."""


class PresenceConnectionError(PresenceError):
    """Redis could not be reached, or the connection broke or timed out mid-call."""


class PresenceAuthError(PresenceError):
    """Redis refused the credentials, or the ACL user may not run this operation."""


class PresenceDataError(PresenceError):
    """A key under the prefix holds data this package did not write (e.g. WRONGTYPE)."""


class PresenceConfigError(PresenceError, ValueError):
    """A connection URL or option cannot be used (malformed URL, unknown scheme)."""


def translate(exc: Exception) -> PresenceError:
    """The package's exception for a redis-py error (the caller chains the original)."""
    if isinstance(exc, PresenceError):
        return exc
    if isinstance(exc, rx.AuthenticationError | rx.NoPermissionError):
        return PresenceAuthError(f"Redis refused access: {exc}")
    if isinstance(exc, rx.ResponseError) and str(exc).startswith(("NOAUTH", "WRONGPASS")):
        return PresenceAuthError(f"Redis refused access: {exc}")
    if isinstance(exc, rx.ConnectionError | rx.TimeoutError):
        return PresenceConnectionError(f"cannot reach Redis: {exc}")
    if isinstance(exc, rx.ResponseError) and "WRONGTYPE" in str(exc):
        return PresenceDataError(f"unexpected data under the prefix: {exc}")
    return PresenceError(f"Redis error: {exc}")

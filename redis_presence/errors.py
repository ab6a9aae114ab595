"""The package's exceptions: catch `PresenceError` to catch them all.

Bad arguments raise the built-in `TypeError` / `ValueError` (before anything is
written); everything that goes wrong on the Redis side is a `PresenceError`.
"""

from __future__ import annotations


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

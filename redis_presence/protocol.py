"""Deprecated name of `redis_presence.contract` (it read as the wire protocol); see `_moved`."""

from __future__ import annotations

from ._moved import forward

__all__ = ["PresenceRegistry"]  # noqa: F822 (handed out by __getattr__)

__getattr__ = forward(__name__, "redis_presence.contract", tuple(__all__))

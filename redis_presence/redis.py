"""Deprecated name of `redis_presence.registry` (it read as the driver); see `_moved`."""

from __future__ import annotations

from ._moved import forward

__all__ = ["RedisPresenceRegistry"]  # noqa: F822 (handed out by __getattr__)

__getattr__ = forward(__name__, "redis_presence.registry", tuple(__all__))

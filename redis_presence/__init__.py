"""redis-presence: which consumers are reading which queues right now, shared through Redis."""

from __future__ import annotations

from .aio import AsyncRedisPresenceRegistry
from .errors import (
    PresenceAuthError,
    PresenceConfigError,
    PresenceConnectionError,
    PresenceDataError,
    PresenceError,
    PresenceReadOnlyError,
)
from .memory import ConsumerPresenceRegistry
from .model import DEFAULT_PRESENCE_TTL_MS, ConsumerPresence, PresenceState
from .redis import RedisPresenceRegistry

__all__ = [
    "DEFAULT_PRESENCE_TTL_MS",
    "AsyncRedisPresenceRegistry",
    "ConsumerPresence",
    "ConsumerPresenceRegistry",
    "PresenceAuthError",
    "PresenceConfigError",
    "PresenceConnectionError",
    "PresenceDataError",
    "PresenceError",
    "PresenceReadOnlyError",
    "PresenceState",
    "RedisPresenceRegistry",
]

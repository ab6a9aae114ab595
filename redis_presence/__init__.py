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
from .protocol import PresenceRegistry
from .redis import RedisPresenceRegistry
from .reporter import DEFAULT_REPORT_INTERVAL_MS, AsyncPresenceReporter, PresenceReporter

__all__ = [
    "DEFAULT_PRESENCE_TTL_MS",
    "DEFAULT_REPORT_INTERVAL_MS",
    "AsyncPresenceReporter",
    "AsyncRedisPresenceRegistry",
    "ConsumerPresence",
    "ConsumerPresenceRegistry",
    "PresenceAuthError",
    "PresenceConfigError",
    "PresenceConnectionError",
    "PresenceDataError",
    "PresenceError",
    "PresenceReadOnlyError",
    "PresenceRegistry",
    "PresenceReporter",
    "PresenceState",
    "RedisPresenceRegistry",
]

"""redis-presence: which consumers are reading which queues right now, shared through Redis.

The public names load on first use (PEP 562), so importing a submodule that needs no driver
(the model, validation, the CLI's `--help`) does not import redis-py. A new public name is
one line in `_EXPORTS`, plus its import under `TYPE_CHECKING` for type checkers.
``__version__`` is the package's version (`redis_presence.__about__`, its one source).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .__about__ import __version__ as __version__

if TYPE_CHECKING:
    from .aio import AsyncRedisPresenceRegistry as AsyncRedisPresenceRegistry
    from .beats import BeatReply as BeatReply
    from .beats import Written as Written
    from .beats import process_instance as process_instance
    from .contract import PresenceRegistry as PresenceRegistry
    from .errors import PresenceAuthError as PresenceAuthError
    from .errors import PresenceBatchError as PresenceBatchError
    from .errors import PresenceClockError as PresenceClockError
    from .errors import PresenceClusterMigratingError as PresenceClusterMigratingError
    from .errors import PresenceConfigError as PresenceConfigError
    from .errors import PresenceConnectionError as PresenceConnectionError
    from .errors import PresenceDataError as PresenceDataError
    from .errors import PresenceDataWarning as PresenceDataWarning
    from .errors import PresenceError as PresenceError
    from .errors import PresenceOutOfMemoryError as PresenceOutOfMemoryError
    from .errors import PresencePoolExhausted as PresencePoolExhausted
    from .errors import PresenceProtocolError as PresenceProtocolError
    from .errors import PresenceReadOnlyError as PresenceReadOnlyError
    from .errors import PresenceResyncRequired as PresenceResyncRequired
    from .events import DEFAULT_EVENTS_KEPT as DEFAULT_EVENTS_KEPT
    from .events import EventKind as EventKind
    from .events import FollowCursor as FollowCursor
    from .events import FollowSnapshot as FollowSnapshot
    from .events import PresenceEvent as PresenceEvent
    from .memory import ConsumerPresenceRegistry as ConsumerPresenceRegistry
    from .model import DEFAULT_MAX_FUTURE_MS as DEFAULT_MAX_FUTURE_MS
    from .model import DEFAULT_PRESENCE_TTL_MS as DEFAULT_PRESENCE_TTL_MS
    from .model import DEFAULT_RETENTION_TTLS as DEFAULT_RETENTION_TTLS
    from .model import DEFAULT_STUCK_AFTER_MS as DEFAULT_STUCK_AFTER_MS
    from .model import ConsumerMeta as ConsumerMeta
    from .model import ConsumerPresence as ConsumerPresence
    from .model import GroupPresence as GroupPresence
    from .model import GroupsPage as GroupsPage
    from .model import PresenceState as PresenceState
    from .plans import MAX_BEATS_PER_CALL as MAX_BEATS_PER_CALL
    from .plans import MAX_CONSUMERS_PER_CALL as MAX_CONSUMERS_PER_CALL
    from .plans import MAX_GROUPS_PER_CALL as MAX_GROUPS_PER_CALL
    from .plans import MAX_ROWS_PER_ROUND_TRIP as MAX_ROWS_PER_ROUND_TRIP
    from .plans import TTL_CACHE_MS as TTL_CACHE_MS
    from .plans import Limits as Limits
    from .registry import RedisPresenceRegistry as RedisPresenceRegistry
    from .reporter import DEFAULT_REPORT_INTERVAL_MS as DEFAULT_REPORT_INTERVAL_MS
    from .reporter import AsyncPresenceReporter as AsyncPresenceReporter
    from .reporter import PresenceReporter as PresenceReporter
    from .validation import BeatSpec as BeatSpec
    from .verdict import GroupFacts as GroupFacts
    from .verdict import GroupVerdict as GroupVerdict
    from .verdict import Verdict as Verdict
    from .verdict import judge as judge

_EXPORTS: dict[str, str] = {
    "DEFAULT_MAX_FUTURE_MS": "model",
    "DEFAULT_PRESENCE_TTL_MS": "model",
    "DEFAULT_RETENTION_TTLS": "model",
    "DEFAULT_STUCK_AFTER_MS": "model",
    "ConsumerMeta": "model",
    "GroupPresence": "model",
    "GroupsPage": "model",
    "DEFAULT_REPORT_INTERVAL_MS": "reporter",
    "AsyncPresenceReporter": "reporter",
    "AsyncRedisPresenceRegistry": "aio",
    "BeatReply": "beats",
    "BeatSpec": "validation",
    "Written": "beats",
    "process_instance": "beats",
    "ConsumerPresence": "model",
    "ConsumerPresenceRegistry": "memory",
    "PresenceAuthError": "errors",
    "PresenceBatchError": "errors",
    "PresenceClockError": "errors",
    "PresenceClusterMigratingError": "errors",
    "PresenceConfigError": "errors",
    "PresenceConnectionError": "errors",
    "PresencePoolExhausted": "errors",
    "PresenceProtocolError": "errors",
    "PresenceDataError": "errors",
    "PresenceDataWarning": "errors",
    "PresenceError": "errors",
    "PresenceOutOfMemoryError": "errors",
    "PresenceReadOnlyError": "errors",
    "PresenceResyncRequired": "errors",
    "DEFAULT_EVENTS_KEPT": "events",
    "EventKind": "events",
    "FollowCursor": "events",
    "FollowSnapshot": "events",
    "PresenceEvent": "events",
    "Limits": "plans",
    "MAX_BEATS_PER_CALL": "plans",
    "MAX_CONSUMERS_PER_CALL": "plans",
    "MAX_GROUPS_PER_CALL": "plans",
    "MAX_ROWS_PER_ROUND_TRIP": "plans",
    "TTL_CACHE_MS": "plans",
    "PresenceRegistry": "contract",
    "PresenceReporter": "reporter",
    "PresenceState": "model",
    "RedisPresenceRegistry": "registry",
    "GroupFacts": "verdict",
    "GroupVerdict": "verdict",
    "Verdict": "verdict",
    "judge": "verdict",
}
"""Each public name and the submodule (of this package) that defines it."""

__all__ = list(_EXPORTS)


if not TYPE_CHECKING:  # type checkers see the imports above, and so catch a misspelt name

    def __getattr__(name: str) -> Any:
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", __name__), name)
        globals()[name] = value  # later lookups skip this function
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

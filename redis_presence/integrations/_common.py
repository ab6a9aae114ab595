"""What every framework integration shares: settings, consumer names and their checks.

No framework is imported here. Settings are checked when an integration is configured
(where the application is defined), so a bad URL or interval fails at import time in
every process, not later in a worker; no connection is opened until a worker starts.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from redis_presence.clients import open_async_client
from redis_presence.coalescer import check_interval_ms
from redis_presence.registry import RedisPresenceRegistry
from redis_presence.reporter import (
    DEFAULT_REPORT_INTERVAL_MS,
    AsyncPresenceReporter,
    PresenceReporter,
)
from redis_presence.validation import MAX_CAPACITY, check_name, check_prefix

__all__ = ["SCHEDULER_GROUP", "DrainCallback", "Settings", "capacity", "host_pid"]

SCHEDULER_GROUP = "scheduler"
"""The group of every scheduler's rows (Celery beat, RQ's and Taskiq's schedulers): "is
anyone scheduling?" is then the same ``check`` and dashboard question as for workers."""


def host_pid() -> str:
    """``host:pid`` of this process: unique among live processes, and it tells an operator
    where to look (the naming scheme the README recommends)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _check_url(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"url must be a str, got {type(value).__name__}")
    # Building an asyncio client checks the URL and its options, and connects nothing, not
    # even for a cluster (a sync cluster client would map the slots at once).
    open_async_client(value)
    return value


@dataclass(frozen=True)
class Settings:
    """Checked integration settings: where to write, under which prefix, how often."""

    url: str
    prefix: str
    group: str | None
    interval_ms: int

    @classmethod
    def checked(cls, url: object, prefix: object, group: object, interval_ms: object) -> Settings:
        """Validate the arguments every integration takes; errors name the argument."""
        return cls(
            url=_check_url(url),
            prefix=check_prefix(prefix),
            group=None if group is None else check_name("group", group),
            interval_ms=check_interval_ms(interval_ms, DEFAULT_REPORT_INTERVAL_MS),
        )

    def reporter(self, on_drain_requested: DrainCallback | None = None) -> PresenceReporter:
        """A thread-driven reporter on a new client; closing it deregisters every consumer
        it reported. `on_drain_requested` is the reporter's (see `PresenceReporter`)."""
        registry = RedisPresenceRegistry.from_url(self.url, prefix=self.prefix)
        return PresenceReporter(
            registry,
            self.interval_ms,
            deregister_on_close=True,
            on_drain_requested=on_drain_requested,
        )

    def async_reporter(
        self, on_drain_requested: DrainCallback | None = None
    ) -> AsyncPresenceReporter:
        """`reporter` for asyncio applications (create it inside the running loop)."""
        # Only asyncio applications import the asyncio registry.
        from redis_presence.aio import AsyncRedisPresenceRegistry  # noqa: PLC0415

        registry = AsyncRedisPresenceRegistry.from_url(self.url, prefix=self.prefix)
        return AsyncPresenceReporter(
            registry,
            self.interval_ms,
            deregister_on_close=True,
            on_drain_requested=on_drain_requested,
        )


DrainCallback = Callable[[str, str, str], Any]
"""A reporter's ``on_drain_requested(queue, group, consumer)``."""


def capacity(value: object) -> int | None:
    """A framework's concurrency as a row's capacity: a positive int, else None (not
    reported: a framework attribute that is missing or not a count says nothing)."""
    if type(value) is int and 0 < value <= MAX_CAPACITY:
        return value
    return None

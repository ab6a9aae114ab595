"""Automatic removal (issue 32 item 5): prune, every so often, the consumers expired for
longer than a retention, from whichever process is configured to do it (`redis-presence
prune --every`, `serve --prune-every`, a reporter's ``prune_every_s``).

A pass is `prune_expired(retention_ms=...)`: bounded script calls, each atomic, so several
processes pruning at once is safe (each consumer goes once, with one ``pruned`` event); what
it costs is their passes, most of which find nothing (about one server command a group:
docs/performance.md)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from .errors import PresenceBatchError


class PrunePass(NamedTuple):
    """One pass: how many consumers went (None: the pass failed), the error that ended it
    (or refused part of it), and how long it took in seconds."""

    removed: int | None
    error: Exception | None
    seconds: float


def prune_pass(registry: Any, retention_ms: int | None, ttl_ms: int | None = None) -> PrunePass:
    """One pass of `registry.prune_expired` that never raises an `Exception`: a refused
    group (`PresenceBatchError`) still counts what went, anything else is the error (a loop
    that runs for days must outlive an outage, and report it)."""
    started = time.monotonic()
    try:
        removed = registry.prune_expired(ttl_ms=ttl_ms, retention_ms=retention_ms)
    except Exception as exc:
        return _failed(exc, started)
    return PrunePass(int(removed), None, time.monotonic() - started)


def _failed(exc: Exception, started: float) -> PrunePass:
    removed = exc.completed if isinstance(exc, PresenceBatchError) else None
    return PrunePass(removed, exc, time.monotonic() - started)


async def aprune_pass(
    registry: Any, retention_ms: int | None, ttl_ms: int | None = None
) -> PrunePass:
    """`prune_pass` on an async registry."""
    started = time.monotonic()
    try:
        removed = await registry.prune_expired(ttl_ms=ttl_ms, retention_ms=retention_ms)
    except Exception as exc:
        return _failed(exc, started)
    return PrunePass(int(removed), None, time.monotonic() - started)


class PruneLoop:
    """Prunes `registry` every `every_s` seconds on a daemon thread until `stop()`, handing
    each pass to `on_pass` (the first pass comes one interval after `start()`)."""

    def __init__(
        self,
        registry: Any,
        every_s: float,
        retention_ms: int | None = None,
        ttl_ms: int | None = None,
        on_pass: Callable[[PrunePass], object] | None = None,
    ) -> None:
        self.registry, self.every_s = registry, every_s
        self.retention_ms, self.ttl_ms = retention_ms, ttl_ms
        self.on_pass = on_pass
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="presence-prune", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.wait(self.every_s):
            done = prune_pass(self.registry, self.retention_ms, self.ttl_ms)
            if self.on_pass is not None:
                self.on_pass(done)

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop after the pass under way (if any), waiting at most `timeout_s`."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout_s)


async def prune_forever(
    registry: Any,
    every_s: float,
    retention_ms: int | None = None,
    ttl_ms: int | None = None,
    on_pass: Callable[[PrunePass], object] | None = None,
) -> None:
    """Prune an async `registry` every `every_s` seconds until cancelled."""
    while True:
        await asyncio.sleep(every_s)
        done = await aprune_pass(registry, retention_ms, ttl_ms)
        if on_pass is not None:
            on_pass(done)

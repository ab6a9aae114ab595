"""Giving back the memory of closed event streams.

A closed stream leaves garbage that neither reference counting nor the allocators give
back soon: its response's cancelled tasks keep their ``CancelledError`` and its traceback,
whose frames keep everything the stream held, in reference cycles that wait for a full
collection (which a quiet service may not run for hours), and the C allocator keeps the
heap it grew to. After a thousand streams closed the service stayed at three times its
size. So once enough streams closed (RECLAIM_STREAMS, or the last open one), a moment
after the last close (RECLAIM_AFTER_S), the feed runs one full collection and, on glibc,
``malloc_trim(0)``, which hands the free pages of the heap back to the system; at most
once every RECLAIM_EVERY_S, so a full collection never costs the service more than a
sliver of its time.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
import time
from collections.abc import Callable

log = logging.getLogger("redis_presence.web")

RECLAIM_STREAMS = 100
"""Streams closed since the last reclaim that call for one (as does the last open one)."""
RECLAIM_AFTER_S = 1.0
"""How long after a close the reclaim runs (the closed streams' tasks end meanwhile)."""
RECLAIM_EVERY_S = 10.0
"""The least time between two reclaims."""


def _find_malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS)."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


class Reclaimer:
    """When to give the memory of closed streams back, and doing it (one per feed; its
    methods run on the event loop's thread)."""

    def __init__(
        self,
        *,
        streams: int = RECLAIM_STREAMS,
        after_s: float = RECLAIM_AFTER_S,
        every_s: float = RECLAIM_EVERY_S,
    ) -> None:
        self.streams, self.after_s, self.every_s = streams, after_s, every_s
        self.closed_since = 0
        """Streams closed since the last reclaim."""
        self.runs = 0
        """Reclaims run so far."""
        self._last = -float("inf")
        self._due: asyncio.TimerHandle | None = None
        self._trim = _find_malloc_trim()

    def closed(self, still_open: int) -> None:
        """A stream closed (`still_open` streams remain): plan a reclaim when enough did."""
        self.closed_since += 1
        if self.closed_since < self.streams and still_open:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # closed outside the event loop (its shutdown): nothing to plan
            return
        if self._due is not None:
            self._due.cancel()  # a moment after the last close of a wave
        wait = max(self.after_s, self._last + self.every_s - time.monotonic())
        self._due = loop.call_later(wait, self.reclaim)

    def reclaim(self) -> None:
        """One full collection, then the free heap back to the system (glibc)."""
        self._due = None
        self._last = time.monotonic()
        self.closed_since = 0
        self.runs += 1
        found = gc.collect()
        trimmed = self._trim(0) if self._trim is not None else 0
        log.debug("event streams closed: %d objects collected, heap trimmed: %s", found, trimmed)

    def cancel(self) -> None:
        """Drop a planned reclaim (the feed's shutdown)."""
        if self._due is not None:
            self._due.cancel()
            self._due = None


__all__ = ["Reclaimer"]

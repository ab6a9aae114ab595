"""Coalescing reporters: put `beat()` on a broker's read path, write once per interval.

`PresenceReporter.beat` only stores the latest beat of each consumer in memory (O(1), no
I/O); a background thread writes them once per interval with one script call (one per
queue on a cluster). Each beat carries how long ago it was made, measured on this
process's monotonic clock, and the script stamps it ``server_now - delay``: coalescing and
outages never make a consumer look fresher than it is, and no broker's wall clock is
trusted. `AsyncPresenceReporter` is the same with an asyncio task instead of a thread; the
coalescing, backoff and logging rules live once, in `redis_presence.coalescer`.

Forks (``os.fork``, a prefork server, multiprocessing's ``fork`` start method): the flusher
thread does not cross a fork, so in the child a `PresenceReporter` starts afresh, with its
own locks and nothing pending (what was pending is the parent's to write), and starts its
own thread at its first beat or deregistration there (a child that never beats, such as
RQ's work horse, never pays for one); an `AsyncPresenceReporter`, whose task and event
loop stay in the parent, raises `RuntimeError` at its first use in the child.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import time
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .__about__ import __version__
from ._base import RegistryBase
from .coalescer import Coalescer, CrossedFork, Outcome
from .model import DEFAULT_PRESENCE_TTL_MS, NS_PER_MS
from .pruning import PruneLoop, PrunePass, prune_forever
from .registry import RedisPresenceRegistry
from .validation import (
    MAX_DELAY_MS,
    ConsumerKey,
    check_meta,
    check_prune_every_ms,
    check_retention_ms,
)

if TYPE_CHECKING:  # a sync process never imports the asyncio registry
    from .aio import AsyncRedisPresenceRegistry  # noqa: F401  # named in a base class below

DEFAULT_REPORT_INTERVAL_MS = DEFAULT_PRESENCE_TTL_MS // 6
"""5,000 ms: a sixth of the default TTL, so a consumer that keeps beating never turns stale
while Redis answers (its stored beat is at most one interval plus one flush old)."""


logger = logging.getLogger("redis_presence.reporter")

R = TypeVar("R", bound=RegistryBase)
_MAX_DELAY_US = MAX_DELAY_MS * 1_000

__all__ = [
    "DEFAULT_REPORT_INTERVAL_MS",
    "AsyncPresenceReporter",
    "PresenceReporter",
    "default_meta",
]


def _module_default_meta() -> dict[str, str]:
    return default_meta()


def default_meta() -> dict[str, str]:
    """What a reporter tells about each consumer unless told otherwise: ``host`` (this
    machine's name), ``pid`` (this process) and ``version`` (of redis-presence)."""
    return {
        "host": socket.gethostname() or "unknown",
        "pid": str(os.getpid()),
        "version": __version__,
    }


DrainCallback = Callable[[str, str, str], Any]
"""``on_drain_requested(queue, group, consumer)``."""


_live_reporters: weakref.WeakSet[_Reporter[Any]] = weakref.WeakSet()
"""Every reporter not yet collected, for `_after_fork_in_child`."""


def _after_fork_in_child() -> None:
    for reporter in list(_live_reporters):
        reporter._crossed_fork()


if hasattr(os, "register_at_fork"):  # not on Windows, which has no fork
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _pruned(done: PrunePass) -> None:
    """A reporter's automatic prune pass, logged (a failed one as a warning)."""
    if done.error is not None:
        logger.warning("prune pass: %s (%s pruned)", done.error, done.removed or 0)
    elif done.removed:
        logger.info("prune pass: %d pruned", done.removed)


class _Reporter(Generic[R]):
    """What both reporters share: everything but the flusher (a thread or a task)."""

    def __init__(
        self,
        registry: R,
        interval_ms: int = DEFAULT_REPORT_INTERVAL_MS,
        *,
        deregister_on_close: bool = False,
        clock: Callable[[], int] = time.monotonic_ns,
        meta: dict[str, str] | None = None,
        default_meta: bool = True,
        prune_every_ms: int | None = None,
        prune_retention_ms: int | None = None,
        on_drain_requested: DrainCallback | None = None,
    ) -> None:
        if on_drain_requested is not None and not callable(on_drain_requested):
            raise TypeError("on_drain_requested must be callable or None")
        self._on_drain_requested = on_drain_requested
        if registry.read_only:
            raise ValueError("a reporter writes: its registry must not be read_only")
        # Automatic removal (off by default): a prune pass every `prune_every_ms`, keeping
        # expired consumers `prune_retention_ms` (None: DEFAULT_RETENTION_TTLS TTLs).
        every_ms = check_prune_every_ms(prune_every_ms)
        self._prune_every_s = None if every_ms is None else every_ms / 1000
        self._prune_retention_ms = check_retention_ms(prune_retention_ms, "prune_retention_ms")
        self._registry = registry
        self._default_meta = default_meta
        described = self._meta_of(meta)
        self._core = Coalescer(interval_ms, track=deregister_on_close, clock=clock, meta=described)
        self._closed = False
        self._pid = os.getpid()
        _live_reporters.add(self)
        self._start()

    def _tell_drains(self, drains: frozenset[ConsumerKey]) -> None:
        """Call `on_drain_requested(queue, group, consumer)` for each consumer a flush's
        reply said has a drain request (again at each flush until the consumer beats with
        ``draining=True``); a callback's exception is logged, never raised."""
        callback = self._on_drain_requested
        if callback is None:
            return
        for key in sorted(drains):
            try:
                callback(*key)
            except Exception:
                logger.exception("presence reporter: on_drain_requested%r raised", key)

    _asleep = False
    """Whether the flusher is still to start (in a forked child, until its first use)."""

    def _start(self) -> None:
        raise NotImplementedError

    def _wake(self) -> None:
        """Start the flusher (at the first beat or deregistration while `_asleep`)."""

    def _meta_of(self, meta: dict[str, str] | None) -> dict[str, str]:
        """The default metadata (unless `default_meta` is False) and the caller's, checked."""
        extra = {} if meta is None else check_meta(meta)
        base = _module_default_meta() if self._default_meta else {}
        return check_meta({**base, **extra})

    def _crossed_fork(self) -> None:
        """In a forked child (called by `os.register_at_fork`)."""
        raise NotImplementedError

    @property
    def registry(self) -> R:
        """The registry the beats are written to."""
        return self._registry

    @property
    def interval_ms(self) -> int:
        """How often pending beats are written, in milliseconds."""
        return self._core.interval_ns // NS_PER_MS

    @property
    def pending(self) -> int:
        """How many consumers have a beat waiting to be written."""
        return self._core.pending()

    @property
    def refused(self) -> dict[tuple[str, str], str]:
        """The ``(queue, group)`` pairs whose writes Redis refused at the last flush,
        although it took every other group's (a foreign or corrupt key, an ACL denial on
        that queue), each with why; their latest beats stay pending and are retried at
        every flush. Empty when the last flush wrote everything."""
        return dict(self._core.refused)

    def beat(
        self,
        queue: str,
        group: str,
        consumer: str,
        lease_count: int = 0,
        *,
        progressed: bool = False,
        capacity: int | None = None,
        draining: bool | None = None,
    ) -> None:
        """Remember that `consumer` read `queue` for `group` now (O(1), no I/O), and with
        `progressed` that it made progress now (kept until the next flush, whatever beats
        follow); `capacity` and `draining` (None: keep what an earlier beat said) are
        written with it. Bad arguments raise `TypeError` / `ValueError` here; nothing else
        ever does."""
        self._core.beat(queue, group, consumer, lease_count, progressed, capacity, draining)
        if self._asleep:
            self._wake()

    @property
    def meta(self) -> dict[str, str]:
        """The metadata each consumer of this reporter is described with: the default
        (``host``, ``pid``, ``version``; see `default_meta`) and the caller's."""
        return dict(self._core.meta)

    def describe(self, meta: dict[str, str]) -> None:
        """Replace the caller's part of `meta` (the default part stays, unless the reporter
        was made with ``default_meta=False``): written with the next flush for every
        consumer, and only when it changed."""
        self._core.set_meta(self._meta_of(meta))

    def deregister(self, queue: str, group: str, consumer: str) -> None:
        """Drop the consumer's pending beat and deregister it with the next flush (a later
        `beat` registers it again)."""
        self._core.deregister(queue, group, consumer)
        if self._asleep:
            self._wake()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._registry!r}, interval_ms={self.interval_ms})"


class PresenceReporter(_Reporter[RedisPresenceRegistry]):
    """Coalesces a broker's beats and writes them once per `interval_ms` from a daemon thread.

    `beat` is O(1) and never touches Redis, so it belongs on the read path; only bad
    arguments raise (at once). When Redis fails, the latest beat of each consumer is kept,
    retried with capped exponential backoff and equal jitter (from RETRY_MIN_MS up to the
    interval, each wait drawn between half and all of its bound), and
    the first failure of each outage is logged on ``redis_presence.reporter`` (one info
    line on recovery); a failed write that is retried never makes a beat look fresher.
    `close` (or leaving the ``with`` block) flushes and stops the thread; with
    ``deregister_on_close=True`` it deregisters every consumer it reported instead.
    `clock` (monotonic nanoseconds) can be replaced by tests.
    """

    _thread: threading.Thread | None

    def _start(self, *, thread: bool = True) -> None:
        self._flush_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None
        self._asleep = True
        self._pruner: PruneLoop | None = None
        if thread:
            self._wake()
            if self._prune_every_s is not None:  # in the process that made it, not a child
                self._pruner = PruneLoop(
                    self._registry, self._prune_every_s, self._prune_retention_ms, None, _pruned
                )
                self._pruner.start()

    def _wake(self) -> None:
        with self._flush_lock:  # two first beats in two threads start one thread
            if self._asleep and not self._closed:
                thread = threading.Thread(
                    target=self._loop, name="redis-presence-reporter", daemon=True
                )
                thread.start()
                self._thread = thread
            self._asleep = False

    def _crossed_fork(self) -> None:
        """A fresh start in the child: nothing pending or reported (the parent writes, and
        deregisters, its own) and new locks (the parent's threads may have held them); a
        new thread (the parent's did not cross the fork) starts at the child's first beat
        or deregistration. The registry's connection pool opens new connections in the
        child by itself (redis-py checks the pid)."""
        self._pid = os.getpid()
        if self._closed:
            return
        self._core = self._core.fresh()
        if self._default_meta:  # this process is not the parent: its own pid
            self._core.meta = {**self._core.meta, "pid": str(self._pid)}
        self._start(thread=False)

    def flush(self) -> int:
        """Write what is pending now, in this thread; returns how many beats were written.
        Raises the `PresenceError` of a failed write (the beats are kept for a retry), and
        `PresenceBatchError` when Redis refused some groups and wrote the others (`refused`
        names them; their beats are kept)."""
        return self._attempt().result()

    def close(self) -> None:
        """Stop the thread, then flush (or deregister, see above) once; idempotent. A failed
        final write is logged, not raised; beats made after `close` are dropped."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._pruner is not None:
            self._pruner.stop()
        with self._flush_lock:  # no thread starts after this
            thread = self._thread
        if thread is not None:
            thread.join()
        self._attempt(closing=True).log_at_close()

    def __enter__(self) -> PresenceReporter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _loop(self) -> None:
        wait_s = self._core.interval_s
        while not self._stop.wait(wait_s):
            wait_s = self._attempt().wait_s

    def _attempt(self, *, closing: bool = False) -> Outcome:
        with self._flush_lock:
            started, taken = self._core.begin(closing=closing)
            if taken is None:
                return self._core.idle(started)
            try:
                sent = self._registry.execute(self._core.plan(self._registry, taken))
            except Exception as error:
                return self._core.failed(taken, error)
            outcome = self._core.succeeded(taken, sent, started)
        self._tell_drains(sent.drains)
        return outcome


class AsyncPresenceReporter(_Reporter["AsyncRedisPresenceRegistry"]):
    """`PresenceReporter` for asyncio brokers: an asyncio task flushes once per interval.

    Create it inside a running event loop; `beat` and `deregister` stay plain O(1) calls,
    `flush` and `aclose` are coroutines, and ``async with`` closes it.
    """

    def _start(self) -> None:
        self._flush_lock = asyncio.Lock()
        self._stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        self._task = loop.create_task(self._loop(), name="redis-presence-reporter")
        self._pruning = None
        if self._prune_every_s is not None:
            self._pruning = loop.create_task(
                prune_forever(
                    self._registry, self._prune_every_s, self._prune_retention_ms, None, _pruned
                ),
                name="redis-presence-prune",
            )

    def _crossed_fork(self) -> None:
        """Its task and event loop stayed in the parent: every use in the child raises."""
        parent, self._pid = self._pid, os.getpid()
        self._closed = True
        self._core = CrossedFork(
            self._core,
            f"this AsyncPresenceReporter was created in process {parent} and cannot work in "
            f"its forked child {self._pid}: its task and event loop stayed in the parent; "
            "create a new registry and AsyncPresenceReporter in the child's event loop",
        )

    async def flush(self) -> int:
        """Write what is pending now; returns how many beats were written. Raises as
        `PresenceReporter.flush` does."""
        return (await self._attempt()).result()

    async def aclose(self) -> None:
        """Stop the task, then flush (or deregister) once; idempotent, logs a failed write."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._pruning is not None:
            self._pruning.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pruning
        await self._task
        (await self._attempt(closing=True)).log_at_close()

    async def __aenter__(self) -> AsyncPresenceReporter:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _loop(self) -> None:
        wait_s = self._core.interval_s
        while True:
            try:
                await asyncio.wait_for(self._stop.wait(), wait_s)
                return
            except asyncio.TimeoutError:
                pass
            wait_s = (await self._attempt()).wait_s

    async def _attempt(self, *, closing: bool = False) -> Outcome:
        async with self._flush_lock:
            started, taken = self._core.begin(closing=closing)
            if taken is None:
                return self._core.idle(started)
            try:
                sent = await self._registry.execute(self._core.plan(self._registry, taken))
            except Exception as error:
                return self._core.failed(taken, error)
            outcome = self._core.succeeded(taken, sent, started)
        self._tell_drains(sent.drains)
        return outcome

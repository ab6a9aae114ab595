"""Huey: ``install(huey, url=...)`` makes every worker of a ``huey_consumer`` report itself.

Call it once where the Huey instance is defined (the module the consumer loads)::

    huey = RedisHuey("billing", url="redis://broker:6379/0")
    redis_presence.integrations.huey.install(huey, url="redis://presence:6379/0")

Each worker of the consumer (``-w N``, threads or processes) keeps one row: ``queue`` is
the Huey instance's name (its queue), ``group`` ``"huey"`` unless told otherwise,
``consumer`` ``host:pid/Worker-N`` (the consumer's own name for the worker) and
``lease_count`` 1 while the worker holds a task it dequeued (0 otherwise), and
``capacity`` 1 (a worker runs one task at a time: the group's capacity, the sum over its
rows, is the consumer's ``-w`` workers). Each task it
is done with (executed, failed, retried, revoked, expired or put back on the schedule) is
progress on the row. The worker's own loop beats: ``install`` wraps this instance's
``dequeue`` (the one call of every loop of a worker, empty or not: with Redis storage a
blocking read of at most ``read_timeout``, 1 s by default; with polling storages the
consumer backs off up to ``-m``/``max_delay``, 10 s by default), and the task signals
``executing`` (start, when the task did not come from that dequeue) and ``complete`` /
``error`` (finish) beat too: two beats per task. While a worker runs
a task its loop cannot beat: a thread of the process beats the row (lease 1) once per
interval until the task ends, so a hung task shows as no progress (``stuck``), not as a
stale row. A graceful shutdown
(SIGINT by default, SIGTERM with ``--graceful-signal TERM``) marks the rows draining (the
thread that beats for busy workers sees the consumer's stop flag within an interval; a
worker says it at the latest when it stops) and deregisters each worker once its task is
done (Huey's ``on_shutdown`` hook, which runs in the worker); a killed consumer goes stale
after the TTL and expired after twice the TTL. A drain request
(``registry.request_drain(queue, group, consumer)``) on any worker's row asks the whole
consumer for its graceful shutdown, once (its graceful signal to the consumer's main
process, as ``kill`` would): a Huey worker cannot stop alone, so a request on one row
drains every worker of that consumer. ``install`` wraps this instance's
``create_consumer`` to learn the consumer's stop flag, process and graceful signal.
Nothing connects where the instance is only imported (producers): each worker process
opens its reporter at its first beat.
"""

from __future__ import annotations

import functools
import logging
import multiprocessing
import os
import threading
from typing import Any

from huey import Huey
from huey import signals as huey_signals

from redis_presence.reporter import PresenceReporter

from ._common import Settings, host_pid

logger = logging.getLogger("redis_presence.integrations.huey")

__all__ = ["DEFAULT_GROUP", "install"]

DEFAULT_GROUP = "huey"
"""The group of every row unless ``install(group=...)`` names another."""

_FINISHED = (huey_signals.SIGNAL_COMPLETE, huey_signals.SIGNAL_ERROR)


def install(
    huey: Huey,
    *,
    url: str,
    prefix: str = "presence",
    group: str | None = None,
    interval_ms: int | None = None,
) -> None:
    """Make every consumer worker of `huey` report itself to the presence Redis at `url`.

    Bad arguments raise `TypeError` / `ValueError` here, where the instance is defined;
    installing twice on one instance raises `ValueError`.
    """
    if not isinstance(huey, Huey):
        raise TypeError(f"huey must be a huey.Huey, got {type(huey).__name__}")
    settings = Settings.checked(url, prefix, group, interval_ms)
    if isinstance(getattr(huey, "dequeue", None), _Dequeue):
        raise ValueError("redis-presence is already installed on this Huey instance")
    presence = _Presence(huey, settings)
    huey.dequeue = _Dequeue(huey.dequeue, presence)
    huey.create_consumer = _CreateConsumer(huey.create_consumer, presence)
    huey.on_startup("redis_presence")(presence.worker_started)
    huey.on_shutdown("redis_presence")(presence.worker_stopped)
    huey.signal(huey_signals.SIGNAL_EXECUTING)(presence.task_started)
    huey.signal(*_FINISHED)(presence.task_finished)


def _worker_name() -> str:
    """``host:pid/Worker-N``: the consumer names its worker threads and processes."""
    name = threading.current_thread().name
    if name == "MainThread":  # a worker process: its main thread runs the worker
        name = multiprocessing.current_process().name
    return f"{host_pid()}/{name}"


class _Presence:
    """What the hooks share in one process: the reporter (opened at the first beat of the
    process) and, per worker thread, its name and whether it holds a task."""

    def __init__(self, huey: Huey, settings: Settings) -> None:
        self.queue = str(huey.name)
        self.group = settings.group or DEFAULT_GROUP
        self._settings = settings
        self._lock = threading.Lock()
        self._reporter: PresenceReporter | None = None
        self._pid = 0
        self._workers = 0
        # Worker -> whether it runs a task: each worker writes only its own entry (no lock
        # on the task path), the ticker reads a copy.
        self._holding: dict[str, bool] = {}
        self._stopping = threading.Event()
        self._local = threading.local()
        # The consumer's, learnt where huey_consumer creates it (before any worker starts
        # or forks): its stop flag (set when a shutdown begins), its process and its
        # graceful signal (what a drain request sends).
        self.stop_flag: Any = None
        self.consumer_pid = 0
        self.graceful_signal: int | None = None
        self._draining = False
        self._drain_asked = False

    def _reporter_here(self) -> PresenceReporter:
        with self._lock:
            if self._reporter is None or self._pid != os.getpid():
                # A new process (or a forked worker process): its own reporter, count and
                # ticker (threads do not cross a fork).
                self._reporter = self._settings.reporter(self._drain_requested)
                self._pid = os.getpid()
                self._workers, self._holding = 0, {}
                self._draining = self._drain_asked = False
                self._stopping = threading.Event()
                ticker = threading.Thread(
                    target=self._tick,
                    args=(self._reporter, self._stopping),
                    name="redis-presence-huey",
                    daemon=True,
                )
                ticker.start()
            return self._reporter

    def _tick(self, reporter: PresenceReporter, stopping: threading.Event) -> None:
        """Once per interval, beat the workers running a task (they cannot beat from
        their own loop meanwhile): a hung task keeps its row active and shows no
        progress, which ``stuck`` reports."""
        while not stopping.wait(self._settings.interval_ms / 1000):
            holding = self._holding.copy()  # one C call: atomic under the GIL
            if not self._draining and self.stopping():
                self._draining = True  # the consumer's shutdown began: every row drains
                for consumer in sorted(holding):
                    reporter.beat(
                        self.queue, self.group, consumer, int(holding[consumer]), draining=True
                    )
                continue
            for consumer in sorted(name for name, held in holding.items() if held):
                reporter.beat(self.queue, self.group, consumer, 1, draining=self._draining)

    def stopping(self) -> bool:
        """Whether the consumer's stop flag is set (its shutdown began)."""
        flag = self.stop_flag
        return flag is not None and bool(flag.is_set())

    def _drain_requested(self, queue: str, group: str, consumer: str) -> None:
        """The reporter's thread: a drain of a worker of this consumer was requested: ask
        the consumer for its graceful shutdown, once (a second graceful signal interrupts
        the workers)."""
        if queue != self.queue or group != self.group or self.graceful_signal is None:
            return
        if self._drain_asked or self.stopping():
            return
        self._drain_asked = True
        logger.info("redis-presence: drain of %s requested: graceful shutdown", consumer)
        os.kill(self.consumer_pid, self.graceful_signal)

    def _consumer(self) -> str:
        name: str | None = getattr(self._local, "consumer", None)
        if name is None:
            name = self._local.consumer = _worker_name()
        return name

    def beat(self, *, holding: bool, progressed: bool = False) -> None:
        """Beat this worker's row (O(1), no I/O, no lock of its own)."""
        reporter = self._reporter
        if reporter is None or self._pid != os.getpid():
            reporter = self._reporter_here()
        local = self._local
        consumer = getattr(local, "consumer", None) or self._consumer()
        if getattr(local, "holding", False) is not holding:
            local.holding = self._holding[consumer] = holding
        reporter.beat(
            self.queue,
            self.group,
            consumer,
            1 if holding else 0,
            progressed=progressed,
            capacity=1,
            draining=self._draining,
        )

    def holding(self) -> bool:
        """Whether this worker holds a task (it dequeued one and did not finish it yet)."""
        return bool(getattr(self._local, "holding", False))

    def before_dequeue(self) -> None:
        """A worker loop starts a read: the task it still held, if any, is done (revoked,
        expired, retried...: the ends without a ``complete`` or ``error`` signal)."""
        if self.holding():
            self.beat(holding=False, progressed=True)

    # -- Huey's hooks, each called in the worker's thread ------------------------------

    def worker_started(self) -> None:
        self._reporter_here()
        with self._lock:
            self._workers += 1
        self.beat(holding=False)

    def worker_stopped(self) -> None:
        """Graceful shutdown (after the worker's task): deregister; the last worker of
        the process writes it and closes."""
        reporter, consumer = self._reporter_here(), self._consumer()
        if self.stopping():  # a graceful shutdown: the row says draining before it leaves
            self._draining = True
            reporter.beat(self.queue, self.group, consumer, 0, capacity=1, draining=True)
            try:
                reporter.flush()
            except Exception:  # the deregistration below is written by the last flush
                logger.exception("redis-presence could not write that the worker is draining")
        with self._lock:
            self._holding.pop(consumer, None)
            reporter.deregister(self.queue, self.group, consumer)
            self._workers -= 1
            last = self._workers <= 0
            if last:
                self._reporter = None
                self._stopping.set()
        if last:
            reporter.close()
            reporter.registry.close()

    def task_started(self, signal: str, task: Any, *args: Any, **kwargs: Any) -> None:
        """A task starts: its dequeue beat the row with its lease a moment ago, unless it
        came another way."""
        if not self.holding():
            self.beat(holding=True)

    def task_finished(self, signal: str, task: Any, *args: Any, **kwargs: Any) -> None:
        self.beat(holding=False, progressed=True)


class _CreateConsumer:
    """This Huey instance's ``create_consumer``, telling `_Presence` about the consumer."""

    def __init__(self, create_consumer: Any, presence: _Presence) -> None:
        self._create_consumer = create_consumer
        self._presence = presence
        functools.update_wrapper(self, create_consumer)

    def __call__(self, **options: Any) -> Any:
        consumer = self._create_consumer(**options)
        presence = self._presence
        presence.stop_flag = getattr(consumer, "stop_flag", None)
        presence.consumer_pid = os.getpid()
        presence.graceful_signal = getattr(consumer, "_graceful_sig", None)
        return consumer


class _Dequeue:
    """This Huey instance's ``dequeue``, beating before and after each read."""

    def __init__(self, dequeue: Any, presence: _Presence) -> None:
        self._dequeue = dequeue
        self._presence = presence
        functools.update_wrapper(self, dequeue)

    def __call__(self) -> Any:
        """One beat per read, after it (at most ``read_timeout`` apart when idle), and one
        before it only to end a task that finished without a signal."""
        presence = self._presence
        presence.before_dequeue()
        task = self._dequeue()
        presence.beat(holding=task is not None)
        return task

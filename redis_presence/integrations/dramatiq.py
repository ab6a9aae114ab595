"""Dramatiq: ``PresenceMiddleware`` makes every worker process report its consumer threads.

Add it to the broker where the broker is defined (the module every worker imports)::

    broker = RedisBroker(url="redis://broker:6379/0")
    broker.add_middleware(PresenceMiddleware(url="redis://presence:6379/0"))

Each consumer thread of a worker process gets one row: ``queue`` is the queue the thread
reads (a delay queue such as ``default.DQ`` has a thread and a row of its own), ``group``
the middleware's group (``"dramatiq"`` unless told otherwise), ``consumer`` the process
(``host:pid``), ``lease_count`` the messages of that queue the process is working on
and has not acknowledged yet (being processed, or waiting for their ETA) and ``capacity``
the process's worker threads (``--threads``: the messages it can process at once, from
any of its queues). A thread of the middleware beats every live, unpaused consumer thread
once per interval through a `PresenceReporter`; a consumer thread that stops deregisters
its row, and the last flush at worker shutdown writes that. Processes that only enqueue
messages never connect.

A warm shutdown (SIGTERM, SIGINT) marks every row draining when it begins (Dramatiq's
``before_worker_shutdown``, written at once), while the worker threads finish their
messages; the rows leave as the consumer threads stop. Drain requests are not acted on:
Dramatiq stops a worker process as a whole, and a process that stops alone makes the
``dramatiq`` command stop every other process it runs (it reads the exit as a crash);
pausing one consumer thread would keep the messages it prefetched unprocessed, and its
delay queue would still move messages back to it. Drain a Dramatiq worker with its own
warm shutdown (SIGTERM to the ``dramatiq`` command).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from dramatiq import Middleware

from redis_presence.reporter import PresenceReporter

from ._common import Settings, capacity, host_pid

__all__ = ["DEFAULT_GROUP", "PresenceMiddleware"]

DEFAULT_GROUP = "dramatiq"
"""The group of every row unless `PresenceMiddleware(group=...)` names another."""

logger = logging.getLogger("redis_presence.integrations.dramatiq")


class PresenceMiddleware(Middleware):
    """Reports every consumer thread of a Dramatiq worker process to the presence Redis.

    `group` defaults to `DEFAULT_GROUP`; `interval_ms` (how often the process writes) to
    `DEFAULT_REPORT_INTERVAL_MS` (5,000 ms). Bad arguments raise `TypeError` /
    `ValueError` here, where the broker is defined.
    """

    def __init__(
        self,
        *,
        url: str,
        prefix: str = "presence",
        group: str | None = None,
        interval_ms: int | None = None,
    ) -> None:
        self._settings = Settings.checked(url, prefix, group, interval_ms)
        self.group = self._settings.group or DEFAULT_GROUP
        self._lock = threading.Lock()
        self._reporter: PresenceReporter | None = None
        self._ticker: threading.Thread | None = None
        self._stopping = threading.Event()
        self._threads: dict[str, Any] = {}  # queue -> its ConsumerThread
        self._held: dict[str, set[str]] = {}  # queue -> ids of messages in progress
        self._consumer = ""
        self._capacity: int | None = None
        self._draining = False

    @property
    def consumer(self) -> str:
        """This process's consumer name (``host:pid``; empty until the worker boots)."""
        return self._consumer

    # -- the worker's life cycle -----------------------------------------------------

    def before_worker_boot(self, broker: Any, worker: Any) -> None:
        """A worker process starts: open the reporter and start the beating thread."""
        with self._lock:
            self._consumer = host_pid()
            self._capacity = capacity(getattr(worker, "worker_threads", None))
            self._draining = False
            self._stopping.clear()
            self._reporter = self._settings.reporter()
            self._ticker = threading.Thread(
                target=self._tick, name="redis-presence-dramatiq", daemon=True
            )
            self._ticker.start()

    def after_consumer_thread_boot(self, broker: Any, thread: Any) -> None:
        """A consumer thread is about to read its queue: it has a row from now on."""
        with self._lock:
            self._threads[thread.queue_name] = thread
            self._held.setdefault(thread.queue_name, set())
            self._beat_locked(thread.queue_name)

    def before_consumer_thread_shutdown(self, broker: Any, thread: Any) -> None:
        """A consumer thread stopped reading: its row is deregistered."""
        with self._lock:
            self._threads.pop(thread.queue_name, None)
            if self._reporter is not None:
                self._reporter.deregister(thread.queue_name, self.group, self._consumer)

    def before_worker_shutdown(self, broker: Any, worker: Any) -> None:
        """The warm shutdown begins (before the worker threads finish their messages):
        every row says draining from now on, written at once."""
        with self._lock:
            self._draining = True
            reporter = self._reporter
            for queue in list(self._threads):
                self._beat_locked(queue)
        if reporter is not None:
            try:
                reporter.flush()
            except Exception:  # retried by the next flush
                logger.exception("redis-presence could not write that the worker is draining")

    def after_worker_shutdown(self, broker: Any, worker: Any) -> None:
        """The worker process is done: write the deregistrations and close."""
        self._stopping.set()
        with self._lock:
            reporter, self._reporter = self._reporter, None
            ticker, self._ticker = self._ticker, None
            self._threads.clear()
        if ticker is not None:
            ticker.join()
        if reporter is not None:
            reporter.close()
            reporter.registry.close()

    # -- messages ---------------------------------------------------------------------

    def before_process_message(self, broker: Any, message: Any) -> None:
        self._hold(message)

    def before_delay_message(self, broker: Any, message: Any) -> None:
        self._hold(message)

    def after_ack(self, broker: Any, message: Any) -> None:
        self._release(message)

    def after_nack(self, broker: Any, message: Any) -> None:
        self._release(message)

    def _hold(self, message: Any) -> None:
        with self._lock:
            self._held.setdefault(message.queue_name, set()).add(message.message_id)
            self._beat_locked(message.queue_name)

    def _release(self, message: Any) -> None:
        with self._lock:
            held = self._held.get(message.queue_name)
            if held is not None and message.message_id in held:
                held.discard(message.message_id)
                self._beat_locked(message.queue_name, progressed=True)  # acked or failed

    # -- beats ------------------------------------------------------------------------

    def _beat_locked(self, queue: str, *, progressed: bool = False) -> None:
        """Beat one queue's row with its current leases, if its thread reads (lock held),
        with progress when a message was just acknowledged."""
        thread = self._threads.get(queue)
        if self._reporter is None or thread is None:
            return
        if thread.is_alive() and not getattr(thread, "paused", False):
            leases = len(self._held[queue])
            self._reporter.beat(
                queue,
                self.group,
                self._consumer,
                leases,
                progressed=progressed,
                capacity=self._capacity,
                draining=self._draining,
            )

    def _tick(self) -> None:
        """Once per interval, beat every consumer thread that is alive and not paused (a
        paused or wedged-dead thread stops beating and goes stale on time)."""
        interval_s = self._settings.interval_ms / 1000
        while not self._stopping.wait(interval_s):
            with self._lock:
                for queue in list(self._threads):
                    self._beat_locked(queue)

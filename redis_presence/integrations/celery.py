"""Celery: ``install(app, url=...)`` makes every worker of the app report its presence.

Call it once where the app is defined (the module every worker imports)::

    app = Celery("billing", broker="redis://broker:6379/0")
    redis_presence.integrations.celery.install(app, url="redis://presence:6379/0")

Every worker then keeps one row per queue it consumes: ``queue`` is the Celery queue,
``group`` the app's main name (``"billing"``; ``"celery"`` for an app without one),
``consumer`` the worker's node name (``celery@host``, or what ``-n`` says) and
``lease_count`` the tasks it holds and has not finished (prefetched, running, or waiting
for their ETA). Each task the worker finishes (succeeded, failed or revoked) records
progress on its queue's row at the next beat (``last_progress_ns``, which ``stuck`` reads).
A consumer bootstep drives a `PresenceReporter` from the worker's own
timer (and from its event heartbeat, ``heartbeat_sent``, when events are on), so the
beats stop when the worker's loop stops, but for one case: while a task runs in the
worker's own process (the solo pool runs it in that very loop, which then beats no more
until the task ends; the threads and gevent pools run it in a thread or greenlet of it),
the reporter's own thread beats too, just before each of its writes, with the same lease
counts. A task that hangs there is then seen by ``stuck`` (no progress), not by the row
going stale. In a prefork pool tasks run in the children: the main loop is never busy
with one, and only it beats. Queues added or cancelled at run time
(``celery control add_consumer``/``cancel_consumer``) gain or lose their row at the next
beat. Each row reports the pool's size as its ``capacity`` (``--concurrency``; the
current number of processes under ``--autoscale``; 1 for the solo pool).

A warm shutdown (SIGTERM) marks every row draining at once (``worker_shutting_down``:
a beat with ``draining=True``, written from a thread of its own right away), keeps the
rows while the running tasks finish, then deregisters them; a worker that dies goes
stale after the TTL and expired after twice the TTL. A drain request
(``registry.request_drain(queue, group, consumer)``, ``redis-presence drain``) cancels
the worker's consumer of that queue, as ``celery control cancel_consumer`` does: the
worker takes no more of its messages, the row says draining (which acknowledges the
request) while the tasks of that queue it holds finish, then it is deregistered; the
worker goes on with its other queues.

Nothing connects to Redis where the app is only imported (producers, web servers): the
reporter is created when a worker's consumer starts.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from celery import Celery, bootsteps
from celery.signals import (
    heartbeat_sent,
    task_postrun,
    task_prerun,
    task_received,
    worker_shutting_down,
)
from celery.worker import state as worker_state

from redis_presence.registry import RedisPresenceRegistry
from redis_presence.reporter import PresenceReporter

from ._common import DrainCallback, Settings, capacity

__all__ = ["DEFAULT_GROUP", "PresenceStep", "install"]

DEFAULT_GROUP = "celery"
"""The group of an app without a main name (``Celery()`` with no name)."""

logger = logging.getLogger("redis_presence.integrations.celery")


def install(
    app: Celery,
    *,
    url: str,
    prefix: str = "presence",
    group: str | None = None,
    interval_ms: int | None = None,
) -> None:
    """Make every worker of `app` report itself to the presence Redis at `url`.

    `group` defaults to the app's main name; `interval_ms` (how often the worker writes)
    to `DEFAULT_REPORT_INTERVAL_MS` (5,000 ms, a sixth of the default TTL). Bad arguments
    raise `TypeError` / `ValueError` here, where the app is defined. Installing twice on
    one app raises `ValueError`.
    """
    if not isinstance(app, Celery):
        raise TypeError(f"app must be a celery.Celery, got {type(app).__name__}")
    settings = Settings.checked(url, prefix, group, interval_ms)
    if any(getattr(step, "presence_settings", None) for step in app.steps["consumer"]):
        raise ValueError("redis-presence is already installed on this Celery app")
    app.steps["consumer"].add(_step_for(settings))


def _step_for(settings: Settings) -> type[PresenceStep]:
    """A `PresenceStep` subclass that carries `settings` (Celery instantiates steps)."""
    return type("PresenceStep", (PresenceStep,), {"presence_settings": settings})


class PresenceStep(bootsteps.StartStopStep):  # type: ignore[misc]
    """Consumer bootstep: beats every consumed queue on the worker's timer; deregisters at
    worker shutdown. Celery creates it once per worker process (in the main process, where
    the consumer and the reserved-task state live)."""

    requires = ("celery.worker.consumer.tasks:Tasks",)
    presence_settings: Settings | None = None

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        settings = self.presence_settings
        if settings is None:  # pragma: no cover - only install() adds the step
            raise RuntimeError("PresenceStep is added by redis_presence...celery.install()")
        self._settings = settings
        self._group = settings.group or parent.app.main or DEFAULT_GROUP
        self._consumer = str(parent.hostname)
        self._lock = threading.Lock()
        self._reporter: PresenceReporter | None = None
        self._timer_entry: Any = None
        self._parent: Any = None
        self._queues: tuple[str, ...] = ()
        # Every request held at the last beat or received since: one of them no longer
        # held at a beat has finished (this process sees no "task done" signal of its own:
        # in a prefork pool task_postrun fires in the child).
        self._seen: set[Any] = set()
        # The ids of the tasks running in this very process (solo, threads, gevent pools;
        # never in a prefork pool's main process), and which process that is.
        self._running: set[str] = set()
        self._pid = os.getpid()
        # The warm shutdown began (every row says draining from then on), and the thread
        # that writes that at once.
        self._draining = False
        self._announcing: threading.Thread | None = None
        # Queues whose consumer a drain request cancelled -> their kombu Queue: each
        # keeps a draining row while the worker holds tasks of it.
        self._drained: dict[str, Any] = {}
        self._cancelled: set[str] = set()  # of those, the ones the worker's loop cancelled
        self._consumed: list[Any] = []  # the kombu Queues consumed at the last beat
        # Connected before any step starts: the Heart only sends the signal when it had
        # receivers at its own start.
        heartbeat_sent.connect(self._on_heartbeat_sent, weak=False)
        task_received.connect(self._on_task_received, weak=False)
        task_prerun.connect(self._on_task_prerun, weak=False)
        task_postrun.connect(self._on_task_postrun, weak=False)
        worker_shutting_down.connect(self._on_shutting_down, weak=False)

    # -- the consumer's life cycle ---------------------------------------------------

    def start(self, parent: Any) -> None:
        """The consumer started (or restarted after a lost broker connection): beat now and
        then once per interval from the worker's timer."""
        with self._lock:
            if self._reporter is None:
                self._pid = os.getpid()
                self._reporter = _reporter(
                    self._settings, self._beat_while_running, self._on_drain_requested
                )
            self._parent = parent
        self.beat()
        interval_s = self._settings.interval_ms / 1000
        self._timer_entry = parent.timer.call_repeatedly(interval_s, self.beat)

    def stop(self, parent: Any) -> None:
        """The consumer stopped reading (shutdown, or a lost connection): no more beats."""
        entry, self._timer_entry = self._timer_entry, None
        if entry is not None:
            entry.cancel()
        with self._lock:
            self._parent = None

    def shutdown(self, parent: Any) -> None:
        """The worker is done (after a warm shutdown, once its tasks finished): deregister
        every row it reported and close the connection."""
        self.stop(parent)
        heartbeat_sent.disconnect(self._on_heartbeat_sent)
        task_received.disconnect(self._on_task_received)
        task_prerun.disconnect(self._on_task_prerun)
        task_postrun.disconnect(self._on_task_postrun)
        worker_shutting_down.disconnect(self._on_shutting_down)
        announcing, self._announcing = self._announcing, None
        if announcing is not None:  # "draining" is written before the rows leave
            announcing.join()
        with self._lock:
            reporter, self._reporter = self._reporter, None
        if reporter is not None:
            reporter.close()
            reporter.registry.close()

    # -- draining ----------------------------------------------------------------------

    def _on_shutting_down(self, sender: Any = None, how: Any = None, **kwargs: Any) -> None:
        """``worker_shutting_down`` (in the main process's signal handler): a warm (or
        soft) shutdown begins. The rows say draining from now on; a thread writes that at
        once (a signal handler may have interrupted this process inside the reporter,
        holding its lock: the thread waits for it instead)."""
        if how == "Cold" or os.getpid() != self._pid or self._draining:
            return
        if sender is not None and str(sender) != self._consumer:
            return
        self._draining = True
        announcing = threading.Thread(
            target=self._announce_draining, name="redis-presence-celery-draining", daemon=True
        )
        self._announcing = announcing
        announcing.start()

    def _announce_draining(self) -> None:
        """Beat every row with ``draining=True`` and write it now (the worker's loop may
        stop beating before the next flush)."""
        self.beat()
        reporter = self._reporter
        if reporter is None:
            return
        try:
            reporter.flush()
        except Exception:  # retried by the next flush, or the last one at close
            logger.exception("redis-presence could not write that the worker is draining")

    def _on_drain_requested(self, queue: str, group: str, consumer: str) -> None:
        """The reporter's thread: a drain of one of this worker's rows was requested. The
        worker's own loop cancels the consumer of that queue (``call_soon``, as the
        ``cancel_consumer`` remote control does); the row says draining from now on."""
        if group != self._group or consumer != self._consumer:
            return
        with self._lock:
            parent = self._parent
            if parent is None or queue in self._drained or parent.task_consumer is None:
                return
            found = [q for q in parent.task_consumer.queues if q.name == queue]
            if not found:
                return
            self._drained[queue] = found[0]
            logger.info("redis-presence: drain of %s requested: cancelling its consumer", queue)
            reporter = self._reporter
        # The draining beat is written before the consumer is cancelled: a queue with no
        # task held is deregistered at the first beat after that, which would drop a
        # pending beat. (This is the reporter's thread, after its flush: flushing is free.)
        self.beat()
        if reporter is not None:
            try:
                reporter.flush()
            except Exception:  # retried by the next flush
                logger.exception("redis-presence could not write that %s drains", queue)
        parent.call_soon(self._cancel, parent, queue)

    def _cancel(self, parent: Any, queue: str) -> None:
        """In the worker's loop: stop consuming `queue` (Celery's ``cancel_consumer``)."""
        parent.cancel_task_queue(queue)
        with self._lock:
            if queue in self._drained:
                self._cancelled.add(queue)

    def _capacity_locked(self) -> int | None:
        """The pool's size (lock held): its processes, threads or greenlets."""
        parent = self._parent
        if parent is None:
            return self._capacity
        try:
            size = parent.pool.num_processes
        except Exception:  # a pool not started yet, or without the attribute
            size = None
        found = capacity(size)
        if found is None:
            found = capacity(getattr(getattr(parent, "controller", None), "concurrency", None))
        if found is not None:
            self._capacity = found
        return self._capacity

    _capacity: int | None = None

    # -- beats ------------------------------------------------------------------------

    def _on_heartbeat_sent(self, sender: Any = None, **kwargs: Any) -> None:
        self.beat()

    def _on_task_received(self, sender: Any = None, request: Any = None, **kwargs: Any) -> None:
        """A request this worker's consumer took from the broker (the main process's own
        signal, sent before the request is reserved, in the consumer's thread)."""
        if request is not None:
            with self._lock:
                self._seen.add(request)

    def _on_task_prerun(self, sender: Any = None, task_id: Any = None, **kwargs: Any) -> None:
        """A task starts running in the process that sends this (in a prefork pool's
        child, whose copy of this step has no reporter: nothing to do there)."""
        if task_id is not None and os.getpid() == self._pid:
            with self._lock:
                self._running.add(task_id)

    def _on_task_postrun(self, sender: Any = None, task_id: Any = None, **kwargs: Any) -> None:
        """A task ended (whatever its outcome) in the process that sends this."""
        if task_id is not None and os.getpid() == self._pid:
            with self._lock:
                self._running.discard(task_id)

    def _beat_while_running(self) -> None:
        """The reporter's thread, just before each regular write: beat from here while a
        task runs in this process, which may block the worker's loop (the solo pool), and
        during a warm shutdown (the loop's timer stopped; the running tasks go on)."""
        if os.getpid() != self._pid:  # a prefork child's copy of the reporter
            return
        with self._lock:
            if self._running:
                # A task whose task_postrun never came (a greenlet killed by a revoke)
                # is no longer one of the worker's requests: forget it.
                known = _request_ids()
                if known is not None:
                    self._running.intersection_update(known)
            running = bool(self._running)
        if running or self._draining:  # the worker's loop may no longer beat
            self.beat()

    def beat(self) -> None:
        """One beat per consumed queue with its lease count, the pool's size and whether
        it drains; queues no longer consumed are deregistered, but for a queue drained on
        request, which keeps a draining row while the worker holds tasks of it
        (O(queues + held tasks), no I/O)."""
        with self._lock:
            reporter, parent = self._reporter, self._parent
            if reporter is None:
                return
            if parent is not None and parent.task_consumer is not None:
                consumed = self._consumed = list(parent.task_consumer.queues)
            elif self._draining:  # the worker's loop stopped: its queues as last seen
                consumed = self._consumed
            else:
                return
            queues = tuple(queue.name for queue in consumed)
            for queue in self._cancelled.intersection(queues):  # consumed again
                self._drained.pop(queue, None)  # (``add_consumer``): no longer drained
                self._cancelled.discard(queue)
            known = consumed + list(self._drained.values())
            held = _held_requests()
            leases = _leases_by_queue(held, known)
            done = _leases_by_queue(self._seen.difference(held), known)
            self._seen = set(held)
            size = self._capacity_locked()
            for queue in (*queues, *self._drained):
                reporter.beat(
                    queue,
                    self._group,
                    self._consumer,
                    leases.get(queue, 0),
                    progressed=done.get(queue, 0) > 0,
                    capacity=size,
                    draining=self._draining or queue in self._drained,
                )
            for queue in [q for q in self._cancelled if not leases.get(q, 0)]:
                del self._drained[queue]  # its tasks are done: it leaves below
                self._cancelled.discard(queue)
            for gone in set(self._queues) - set(queues) - set(self._drained):
                reporter.deregister(gone, self._group, self._consumer)
            self._queues = queues + tuple(q for q in self._drained if q not in queues)


class _BusyLoopReporter(PresenceReporter):
    """A `PresenceReporter` that calls `before_flush` before each write but the last one (at
    `close`): from its own thread once per interval, so that it can beat when the worker's
    loop cannot. Overrides the private `_attempt` of `PresenceReporter`."""

    def __init__(
        self,
        registry: RedisPresenceRegistry,
        interval_ms: int,
        before_flush: Callable[[], None],
        on_drain_requested: DrainCallback | None = None,
    ) -> None:
        self._before_flush = before_flush
        super().__init__(
            registry,
            interval_ms,
            deregister_on_close=True,
            on_drain_requested=on_drain_requested,
        )

    def _attempt(self, *, closing: bool = False) -> Any:
        if not closing:
            try:
                self._before_flush()
            except Exception:  # never the end of the reporter's thread
                logger.exception("redis-presence could not beat from the reporter's thread")
        return super()._attempt(closing=closing)


def _reporter(
    settings: Settings, before_flush: Callable[[], None], on_drain_requested: DrainCallback
) -> PresenceReporter:
    """`Settings.reporter` (closing it deregisters every row), with `before_flush`."""
    registry = RedisPresenceRegistry.from_url(settings.url, prefix=settings.prefix)
    return _BusyLoopReporter(registry, settings.interval_ms, before_flush, on_drain_requested)


def _held_requests() -> list[Any]:
    """The requests this worker holds and has not finished: reserved (prefetched or
    running) and scheduled (waiting for an ETA/countdown). Celery may change these sets
    from a pool thread meanwhile: copy them, trying again if one changed size."""
    for _ in range(10):
        try:
            held = set(worker_state.reserved_requests)
            held.update(worker_state.scheduled_requests)
            return list(held)
        except RuntimeError:  # "Set changed size during iteration"
            continue
    return []


def _request_ids() -> set[str] | None:
    """The ids of every request the worker holds (None if the set kept changing size)."""
    for _ in range(10):
        try:
            return set(worker_state.requests)
        except RuntimeError:  # "dictionary changed size during iteration"
            continue
    return None


def _leases_by_queue(requests: Iterable[Any], queues: Sequence[Any]) -> Counter[str]:
    """Held requests per consumed queue, from each request's delivery info: the queue
    bound to its exchange and routing key, else the queue named like its routing key,
    else the only queue consumed. A request no rule places is not counted."""
    by_binding = {(_exchange_name(q), q.routing_key): q.name for q in queues}
    names = {q.name for q in queues}
    only = queues[0].name if len(queues) == 1 else None
    counts: Counter[str] = Counter()
    for request in requests:
        info = request.delivery_info or {}
        routing_key, exchange = info.get("routing_key"), info.get("exchange")
        queue = by_binding.get((exchange or "", routing_key))
        if queue is None and routing_key in names:
            queue = routing_key
        queue = queue or only
        if queue is not None:
            counts[queue] += 1
    return counts


def _exchange_name(queue: Any) -> str:
    exchange = getattr(queue, "exchange", None)
    return str(getattr(exchange, "name", "") or "")

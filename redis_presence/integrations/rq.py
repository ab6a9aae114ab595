"""RQ: ``PresenceWorker``, an RQ ``Worker`` that reports its presence on every poll.

Run it with RQ's own command line (or django-rq's ``RQ['WORKER_CLASS']``)::

    $ REDIS_PRESENCE_URL=redis://presence:6379/0 \\
        rq worker -w redis_presence.integrations.rq.PresenceWorker invoices refunds

or configure a subclass in code: ``Worker = PresenceWorker.configured(url=...)``.

Each worker keeps one row per queue it reads: ``queue`` is the RQ queue, ``group``
``"rq"`` unless told otherwise, ``consumer`` the worker's name (RQ's ``--name``, a random
hex name by default: the one ``rq info`` shows), ``lease_count`` 1 on the queue of the
job it is running (0 elsewhere) and ``capacity`` 1 (a worker runs one job at a time, in
its work horse). Each job it finishes (succeeded, failed or stopped) is
progress on its queue's row. The beats come from the worker's own loop, at each of RQ's
own heartbeats: before and after every dequeue poll (idle or not: the blocking dequeue
waits at most one interval, instead of RQ's default of the worker TTL less 15 s) and,
while a job runs in the work horse, each time the worker wakes to watch it (at most
once per interval, and at least once a second: RQ's job monitoring interval is lowered
to that). A warm shutdown (SIGTERM, Ctrl-C, ``rq``'s shutdown command) marks the rows
draining at once (written from a thread of its own, the signal handler's moment); they
keep beating, draining, while the running job finishes, and are deregistered as soon as
the worker's loop ends: before RQ waits for its scheduler and its pub/sub thread (RQ's
own teardown can take up to a minute). A killed worker goes stale after the TTL and
expired after twice the TTL.

A drain request (``registry.request_drain(queue, group, consumer)`` on any of its rows,
``redis-presence drain``) asks the worker for a warm stop, as RQ's own shutdown command
does (a SIGINT to itself): it takes no new job, finishes the one it runs, and exits; an RQ
worker cannot stop reading one of its queues alone, so a request on one row drains them
all.

With ``--with-scheduler``, the worker's scheduler process (RQ's ``RQScheduler``, which
enqueues the jobs scheduled with ``enqueue_at`` / ``enqueue_in``) is a consumer too: one
row per queue whose scheduler lock it holds, group ``"scheduler"``, consumer ``host:pid``
of the scheduler process, beaten at each of its ticks (each finished tick is progress),
marked draining, then deregistered, when it stops (no capacity; drain requests on its
rows are not acted on).
"""

from __future__ import annotations

import logging
import math
import os
import signal
import threading
from collections.abc import Callable
from typing import Any, ClassVar

import redis
from rq.defaults import DEFAULT_LOGGING_DATE_FORMAT, DEFAULT_LOGGING_FORMAT
from rq.scheduler import RQScheduler
from rq.worker import Worker

from redis_presence.registry import RedisPresenceRegistry
from redis_presence.reporter import PresenceReporter

from ._common import SCHEDULER_GROUP, DrainCallback, Settings, host_pid

__all__ = [
    "DEFAULT_GROUP",
    "SCHEDULER_GROUP",
    "PresenceScheduler",
    "PresenceWorker",
]

logger = logging.getLogger("redis_presence.integrations.rq")

DEFAULT_GROUP = "rq"
"""The group of a worker's rows unless `PresenceWorker.configured(group=...)` names another."""

URL_ENV, PREFIX_ENV, INTERVAL_ENV = (
    "REDIS_PRESENCE_URL",
    "REDIS_PRESENCE_PREFIX",
    "REDIS_PRESENCE_INTERVAL_MS",
)
"""Where a worker started as ``-w redis_presence.integrations.rq.PresenceWorker`` (no
configuration in code) finds its settings: the URL and prefix are the CLI's variables."""


def _settings(
    url: str | None, prefix: str | None, group: str | None, interval_ms: int | None
) -> tuple[Settings, bool]:
    """Checked settings, from the arguments else the environment; whether a URL was found
    (without one the worker writes presence to its own Redis, under the same prefix)."""
    url = url if url is not None else os.environ.get(URL_ENV) or None  # empty: unset
    prefix = prefix if prefix is not None else os.environ.get(PREFIX_ENV) or "presence"
    if interval_ms is None and os.environ.get(INTERVAL_ENV):
        raw = os.environ[INTERVAL_ENV]
        if not raw.isdigit():
            raise ValueError(f"{INTERVAL_ENV} must be a number of milliseconds, got {raw!r}")
        interval_ms = int(raw)
    # The worker's own Redis, when no URL is given, is checked by RQ itself.
    checked = Settings.checked(url or "redis://localhost:6379/0", prefix, group, interval_ms)
    return checked, url is not None


def _reporter(
    settings: Settings,
    has_url: bool,
    connection: Any,
    on_drain_requested: DrainCallback | None = None,
) -> PresenceReporter:
    """A reporter on `settings.url`, or on a new client of `connection`'s server."""
    if has_url:
        registry = RedisPresenceRegistry.from_url(settings.url, prefix=settings.prefix)
    else:
        pool = connection.connection_pool
        client = redis.Redis(
            connection_pool=redis.ConnectionPool(
                connection_class=pool.connection_class, **pool.connection_kwargs
            )
        )
        registry = RedisPresenceRegistry(client, prefix=settings.prefix)
    # A work horse (forked per job) never beats, so its copy never starts a flusher thread.
    return PresenceReporter(
        registry,
        settings.interval_ms,
        deregister_on_close=True,
        on_drain_requested=on_drain_requested,
    )


def _close(reporter: PresenceReporter | None) -> None:
    """Deregister what `reporter` reported, then close its connection."""
    if reporter is not None:
        reporter.close()
        reporter.registry.close()


PUBSUB_READ_S = 1.0
"""How long the worker's pub/sub thread (RQ's commands: stop a job, shut down) waits for a
message at a time: how long RQ's teardown may wait for it (RQ's own is 60 s)."""


class PresenceWorker(Worker):
    """An RQ ``Worker`` (forking a work horse per job) that beats on each poll.

    Settings: the class attributes, set by `configured`, else the environment
    (``REDIS_PRESENCE_URL``, ``REDIS_PRESENCE_PREFIX``, ``REDIS_PRESENCE_INTERVAL_MS``),
    else the worker's own Redis, prefix ``presence`` and `DEFAULT_REPORT_INTERVAL_MS`.
    """

    presence_url: ClassVar[str | None] = None
    presence_prefix: ClassVar[str | None] = None
    presence_group: ClassVar[str | None] = None
    presence_interval_ms: ClassVar[int | None] = None

    @classmethod
    def configured(
        cls,
        *,
        url: str | None = None,
        prefix: str | None = None,
        group: str | None = None,
        interval_ms: int | None = None,
    ) -> type[PresenceWorker]:
        """A subclass with these settings, checked here (where it is defined): bad ones
        raise `TypeError` / `ValueError`."""
        _settings(url, prefix, group, interval_ms)
        attrs = {
            "presence_url": url,
            "presence_prefix": prefix,
            "presence_group": group,
            "presence_interval_ms": interval_ms,
            "__module__": cls.__module__,
        }
        return type(cls.__name__, (cls,), attrs)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        settings, has_url = _settings(
            self.presence_url, self.presence_prefix, self.presence_group, self.presence_interval_ms
        )
        self._presence_settings, self._presence_has_url = settings, has_url
        self._presence_group = settings.group or DEFAULT_GROUP
        self._presence_reporter: PresenceReporter | None = None
        self._presence_announcing: threading.Thread | None = None
        self._presence_draining = False
        self._presence_drain_asked = False
        self._presence_job_queue: str | None = None
        super().__init__(*args, **kwargs)
        # While a job runs, the worker wakes every job_monitoring_interval seconds (a
        # SIGALRM, whole seconds) to watch it: at least once per beat interval.
        every_s = max(1, math.floor(settings.interval_ms / 1000))
        self.job_monitoring_interval = min(self.job_monitoring_interval, every_s)

    @property
    def dequeue_timeout(self) -> float:  # type: ignore[override]  # BLPOP takes seconds as a float
        """How long one blocking dequeue waits: at most one beat interval."""
        return min(super().dequeue_timeout, self._presence_settings.interval_ms / 1000)

    def bootstrap(
        self,
        logging_level: str | None = "INFO",
        date_format: str = DEFAULT_LOGGING_DATE_FORMAT,
        log_format: str = DEFAULT_LOGGING_FORMAT,
    ) -> None:
        """The worker starts its loop: open the reporter (it beats at the first poll)."""
        if self._presence_reporter is None:
            self._presence_reporter = _reporter(
                self._presence_settings,
                self._presence_has_url,
                self.connection,
                self._presence_drain_requested,
            )
        super().bootstrap(logging_level, date_format, log_format)

    def heartbeat(self, timeout: int | None = None, pipeline: Any = None) -> None:
        """RQ's own heartbeat (each poll, each job, each wake while a job runs), and a beat
        of every queue with its lease."""
        super().heartbeat(timeout, pipeline)
        self._presence_beat()

    def execute_job(self, job: Any, queue: Any) -> None:
        """Run one job (in a work horse): its queue holds a lease meanwhile, and its end,
        whatever the outcome, is progress on that queue."""
        self._presence_job_queue = queue.name
        self._presence_beat()
        try:
            super().execute_job(job, queue)
        finally:
            self._presence_job_queue = None
            self._presence_beat(progressed=queue.name)

    def handle_warm_shutdown_request(self) -> None:
        """SIGTERM or Ctrl-C (in RQ's signal handler): the warm shutdown begins, and the
        rows say draining from now on (written at once); they stay, with the running job's
        lease, until the worker's loop ends."""
        super().handle_warm_shutdown_request()  # type: ignore[no-untyped-call]
        if self.is_horse or self._presence_draining:
            return
        self._presence_draining = True
        if self._presence_reporter is not None:
            # A signal handler may interrupt the main thread inside the reporter (a beat
            # holds its lock): the draining beat is written by a thread of its own, at
            # once, and teardown waits for it.
            announcing = threading.Thread(
                target=self._presence_announce, name="redis-presence-rq-draining", daemon=True
            )
            self._presence_announcing = announcing
            announcing.start()

    def _presence_announce(self) -> None:
        """Beat every row with ``draining=True`` and write it now."""
        reporter = self._presence_reporter
        self._presence_beat()
        if reporter is not None:
            try:
                reporter.flush()
            except Exception:  # retried by the next flush, or the last one at close
                logger.exception("redis-presence could not write that the worker is draining")

    def _presence_drain_requested(self, queue: str, group: str, consumer: str) -> None:
        """The reporter's thread: a drain of one of this worker's rows was requested. Ask
        for a warm stop once, as RQ's shutdown command does (SIGINT to this process; RQ
        takes a second one as a cold stop, hence once)."""
        if group != self._presence_group or consumer != self.name:
            return
        if self._presence_drain_asked or self._presence_draining:
            return
        self._presence_drain_asked = True
        logger.info("redis-presence: drain of %s requested: warm stop after the current job", queue)
        os.kill(os.getpid(), signal.SIGINT)

    def subscribe(self) -> None:
        """RQ's own ``subscribe`` (rq 3.0), with its pub/sub thread reading for at most
        `PUBSUB_READ_S` at a time instead of 60 s: redis-py 8.2's ``PubSubWorkerThread.stop``
        waits for the thread's current read, so RQ's teardown waited up to a minute."""
        self.log.info("Worker %s: subscribing to channel %s", self.name, self.pubsub_channel_name)
        self.pubsub = self.connection.pubsub()
        self.pubsub.subscribe(**{self.pubsub_channel_name: self.handle_payload})
        self.pubsub_thread = self.pubsub.run_in_thread(  # type: ignore[assignment]  # rq: None
            sleep_time=PUBSUB_READ_S,
            daemon=True,
            exception_handler=self._pubsub_exception_handler,
        )

    def teardown(self) -> None:
        """The loop ended: the rows are deregistered (after the draining beat, if a warm
        shutdown wrote one) before RQ's own teardown, which may wait."""
        if not self.is_horse:
            announcing, self._presence_announcing = self._presence_announcing, None
            if announcing is not None:
                announcing.join()
            reporter, self._presence_reporter = self._presence_reporter, None
            _close(reporter)
        super().teardown()  # type: ignore[no-untyped-call]

    def _presence_beat(self, *, progressed: str | None = None) -> None:
        reporter = self._presence_reporter
        if reporter is None or self.is_horse:  # the horse's copy never beats
            return
        current = self._presence_job_queue
        for name in self.queue_names():
            lease = 1 if name == current else 0
            reporter.beat(
                name,
                self._presence_group,
                self.name,
                lease,
                progressed=name == progressed,
                capacity=1,
                draining=self._presence_draining,
            )

    def _start_scheduler(
        self,
        burst: bool = False,
        logging_level: str | None = "INFO",
        date_format: str = DEFAULT_LOGGING_DATE_FORMAT,
        log_format: str = DEFAULT_LOGGING_FORMAT,
    ) -> None:
        """RQ's own ``_start_scheduler`` (rq 3.0), with a `PresenceScheduler`."""
        scheduler_class = PresenceScheduler.bound(
            lambda: _reporter(self._presence_settings, self._presence_has_url, self.connection)
        )
        self.scheduler = scheduler_class(
            self.queues,
            connection=self.connection,
            logging_level=logging_level if logging_level is not None else self.log.level,
            date_format=date_format,
            log_format=log_format,
            serializer=self.serializer,
        )
        self.scheduler.acquire_locks()  # type: ignore[no-untyped-call]
        if self.scheduler.acquired_locks:
            if burst:
                try:
                    self.scheduler.register_birth()
                    self.scheduler.enqueue_scheduled_jobs()
                finally:
                    self.scheduler.release_locks()  # type: ignore[no-untyped-call]
                    self.scheduler.register_death()
            else:
                self.scheduler.start()  # type: ignore[no-untyped-call]


class PresenceScheduler(RQScheduler):
    """RQ's scheduler, beating one row per queue whose lock it holds (group
    `SCHEDULER_GROUP`), in its own process; `PresenceWorker` starts it."""

    presence_open: ClassVar[Callable[[], PresenceReporter] | None] = None

    @classmethod
    def bound(cls, open_reporter: Callable[[], PresenceReporter]) -> type[PresenceScheduler]:
        """A subclass that opens its reporter with `open_reporter` (in its own process)."""
        return type(cls.__name__, (cls,), {"presence_open": staticmethod(open_reporter)})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._presence_reporter: PresenceReporter | None = None
        self._presence_consumer = ""
        self._presence_queues: set[str] = set()

    def register_birth(self) -> None:
        """The scheduler process starts: open the reporter there."""
        super().register_birth()
        opener = type(self).presence_open
        if opener is not None and self._presence_reporter is None:
            self._presence_consumer = host_pid()
            self._presence_reporter = opener()

    def heartbeat(self) -> None:
        """RQ's heartbeat of the scheduler (each tick), and a beat per locked queue."""
        super().heartbeat()  # type: ignore[no-untyped-call]
        self._presence_beat()

    def enqueue_scheduled_jobs(self) -> None:
        """One tick's work; its end is progress."""
        super().enqueue_scheduled_jobs()  # type: ignore[no-untyped-call]
        self._presence_beat(progressed=True)

    def stop(self) -> None:
        """The scheduler stops (the worker's warm shutdown; called from its loop): its rows
        say draining (written at once), then are deregistered."""
        reporter = self._presence_reporter
        if reporter is not None:
            for name in sorted(self._presence_queues):
                reporter.beat(name, SCHEDULER_GROUP, self._presence_consumer, draining=True)
            try:
                reporter.flush()
            except Exception:  # the deregistration is written all the same
                logger.exception("redis-presence could not write that the scheduler drains")
        super().stop()  # type: ignore[no-untyped-call]
        reporter, self._presence_reporter = self._presence_reporter, None
        _close(reporter)

    def _presence_beat(self, *, progressed: bool = False) -> None:
        reporter = self._presence_reporter
        if reporter is None:
            return
        held = set(self.acquired_locks)
        for name in sorted(held):
            reporter.beat(name, SCHEDULER_GROUP, self._presence_consumer, progressed=progressed)
        for gone in self._presence_queues - held:
            reporter.deregister(gone, SCHEDULER_GROUP, self._presence_consumer)
        self._presence_queues = held

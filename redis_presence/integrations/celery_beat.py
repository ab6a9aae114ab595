"""Celery beat: ``install_beat(app, url=...)`` makes ``celery beat`` report itself.

Call it once where the app is defined, beside (or instead of) the worker's ``install``::

    app = Celery("billing", broker="redis://broker:6379/0")
    redis_presence.integrations.celery_beat.install_beat(app, url="redis://presence:6379/0")

It sets ``app.conf.beat_scheduler`` to a subclass of the app's scheduler class
(``scheduler=``: a class or ``"module:Class"``, default Celery's ``PersistentScheduler``)
that is a consumer of group ``"scheduler"``: one row per queue its schedule sends to
(each entry's ``options["queue"]``, else ``task_default_queue``), consumer ``host:pid``
of the beat process. It beats at ``beat_init`` and after each ``tick()``, each finished
tick being progress, and a tick never sleeps longer than one interval (Celery's beat
otherwise sleeps up to ``beat_max_loop_interval``, 300 s by default, when nothing is
due), so a beat whose loop stops goes stale. Its shutdown (SIGTERM, SIGINT) marks the
rows draining (written at once), then deregisters them; a killed beat goes stale after
the TTL and expired after twice the TTL. Beat runs no tasks: its rows report no
capacity, and a drain request is not acted on (stop beat as you start it; a scheduler
has nothing to finish).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

from celery import Celery
from celery.beat import PersistentScheduler, Scheduler
from celery.signals import beat_init
from kombu.utils.imports import symbol_by_name

from redis_presence.reporter import PresenceReporter

from ._common import SCHEDULER_GROUP, Settings, host_pid

__all__ = ["SCHEDULER_GROUP", "PresenceSchedulerMixin", "install_beat"]

logger = logging.getLogger("redis_presence.integrations.celery_beat")


def install_beat(
    app: Celery,
    *,
    url: str,
    prefix: str = "presence",
    interval_ms: int | None = None,
    scheduler: type[Scheduler] | str = PersistentScheduler,
) -> type[Scheduler]:
    """Make `celery beat` of `app` report itself to the presence Redis at `url`; returns
    the scheduler class it set as ``app.conf.beat_scheduler`` (a ``-S`` on the command
    line replaces it: pass that scheduler here instead). Bad arguments raise
    `TypeError` / `ValueError` here, where the app is defined."""
    if not isinstance(app, Celery):
        raise TypeError(f"app must be a celery.Celery, got {type(app).__name__}")
    settings = Settings.checked(url, prefix, None, interval_ms)
    base = symbol_by_name(scheduler) if isinstance(scheduler, str) else scheduler  # type: ignore[no-untyped-call]
    if not (isinstance(base, type) and issubclass(base, Scheduler)):
        raise TypeError(f"scheduler must be a celery.beat.Scheduler subclass, got {base!r}")
    if issubclass(base, PresenceSchedulerMixin):
        raise ValueError("redis-presence is already installed on this beat scheduler")
    attrs = {"presence_settings": settings, "__module__": __name__}
    cls: type[Scheduler] = type(f"Presence{base.__name__}", (PresenceSchedulerMixin, base), attrs)
    app.conf.beat_scheduler = cls
    beat_init.connect(_on_beat_init, weak=False, dispatch_uid="redis_presence.beat_init")
    return cls


def _on_beat_init(sender: Any = None, **kwargs: Any) -> None:
    """``beat_init`` (the beat service starts, before its first tick): beat."""
    scheduler = getattr(sender, "scheduler", None)
    if isinstance(scheduler, PresenceSchedulerMixin):
        scheduler.presence_beat()


class PresenceSchedulerMixin:
    """Put before a ``celery.beat.Scheduler`` class: the scheduler beats after each
    tick, sleeps at most one interval, and deregisters at ``close()``."""

    presence_settings: Settings | None = None
    app: Any
    schedule: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._presence_lock = threading.Lock()
        self._presence_reporter: PresenceReporter | None = None
        self._presence_pid = 0
        self._presence_queues: set[str] = set()
        super().__init__(*args, **kwargs)

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """Celery's tick (send what is due), then a beat with progress; the wait until
        the next tick is at most one interval."""
        interval: float = super().tick(*args, **kwargs)  # type: ignore[misc]
        self.presence_beat(progressed=True)
        settings = self.presence_settings
        cap_s = settings.interval_ms / 1000 if settings is not None else interval
        return min(interval, cap_s)

    def close(self) -> None:
        """Beat stops (its shutdown): the rows say draining, then are deregistered and the
        connection closed."""
        with self._presence_lock:
            reporter = self._presence_reporter
            if reporter is not None and self._presence_pid == os.getpid():
                for queue in sorted(self._presence_queues):
                    reporter.beat(queue, SCHEDULER_GROUP, host_pid(), draining=True)
        if reporter is not None and self._presence_pid == os.getpid():
            try:
                reporter.flush()
            except Exception:  # the deregistration below is written all the same
                logger.exception("redis-presence could not write that beat is draining")
        super().close()  # type: ignore[misc]
        with self._presence_lock:
            reporter, self._presence_reporter = self._presence_reporter, None
        if reporter is not None:
            reporter.close()
            reporter.registry.close()

    def presence_beat(self, *, progressed: bool = False) -> None:
        """One beat per queue the schedule sends to (O(entries), no I/O); the reporter is
        opened at the first beat of the process that ticks."""
        settings = self.presence_settings
        if settings is None:
            return
        queues = self._presence_scheduled_queues()
        consumer = host_pid()
        with self._presence_lock:
            if self._presence_reporter is None or self._presence_pid != os.getpid():
                self._presence_reporter, self._presence_pid = settings.reporter(), os.getpid()
                self._presence_queues = set()
            reporter = self._presence_reporter
            for queue in sorted(queues):
                reporter.beat(queue, SCHEDULER_GROUP, consumer, progressed=progressed)
            for gone in self._presence_queues - queues:
                reporter.deregister(gone, SCHEDULER_GROUP, consumer)
            self._presence_queues = queues

    def _presence_scheduled_queues(self) -> set[str]:
        default = str(self.app.conf.task_default_queue)
        queues = set()
        for entry in list(self.schedule.values()):
            queue = (getattr(entry, "options", None) or {}).get("queue")
            queues.add(getattr(queue, "name", queue) or default)
        return {str(queue) for queue in queues} or {default}

"""Taskiq: ``PresenceMiddleware`` makes every ``taskiq worker`` process report itself.

Add it to the broker where the broker is defined (the module every worker imports)::

    broker = ListQueueBroker("redis://broker:6379/0", queue_name="invoices")
    broker.add_middlewares(PresenceMiddleware(url="redis://presence:6379/0"))

Each worker process keeps one row per queue its broker reads: ``queue`` is the broker's
``queue_name`` (and, for taskiq-redis's ``RedisStreamBroker``, each of its
``additional_streams``), ``group`` the stream broker's consumer group, else ``"taskiq"``
(``group=`` sets one for every row), ``consumer`` the stream broker's consumer name (the
one ``XINFO CONSUMERS`` shows), else ``host:pid``, and ``lease_count`` the tasks the
process is running. Each task it finishes (succeeded or failed) is progress.

A middleware only sees messages, so at the worker's startup it wraps this broker's
``listen()``: the worker's prefetcher, waiting for the next message, wakes at least once
per interval and beats, and beats again on each message, so an idle worker beats too and
a worker whose event loop is blocked goes stale. Nothing else reads ahead: the wrapper
asks the broker for a message only when the worker asks for one. At the worker's
shutdown (after its running tasks) every row is deregistered; a killed worker process
goes stale after the TTL and expired after twice the TTL. Processes that only send tasks
(``broker.startup()`` in a web application) never connect.

In a ``taskiq scheduler`` process (the broker's ``is_scheduler_process``), the scheduler
is the consumer: one row per queue of the broker, group ``"scheduler"``, consumer
``host:pid``. Its loop offers no hook of its own, so a task in its event loop beats once
per interval (a blocked loop goes stale), and each task it sends is progress. Its
shutdown (SIGINT; taskiq's scheduler leaves SIGTERM to Python's default, which ends the
process without one) deregisters the rows.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from taskiq import TaskiqMessage, TaskiqMiddleware, TaskiqResult

from redis_presence.aio import AsyncRedisPresenceRegistry
from redis_presence.reporter import AsyncPresenceReporter

from ._common import SCHEDULER_GROUP, Settings, host_pid

__all__ = ["DEFAULT_GROUP", "SCHEDULER_GROUP", "PresenceMiddleware"]

DEFAULT_GROUP = "taskiq"
"""The group of a broker without a consumer group of its own, unless ``group=`` names one."""


class PresenceMiddleware(TaskiqMiddleware):
    """Reports each worker process of a Taskiq broker to the presence Redis.

    `interval_ms` (how often the process writes, and the longest wait between two beats
    of an idle worker) defaults to `DEFAULT_REPORT_INTERVAL_MS` (5,000 ms). Bad arguments
    raise `TypeError` / `ValueError` here, where the broker is defined.
    """

    def __init__(
        self,
        *,
        url: str,
        prefix: str = "presence",
        group: str | None = None,
        interval_ms: int | None = None,
    ) -> None:
        super().__init__()
        self._settings = Settings.checked(url, prefix, group, interval_ms)
        self._reporter: AsyncPresenceReporter | None = None
        self._running: Counter[str] = Counter()
        self._queues: tuple[str, ...] = ()
        self.group = self._settings.group or DEFAULT_GROUP
        self.consumer = ""
        self._ticker: asyncio.Task[None] | None = None

    # -- the worker's life cycle -----------------------------------------------------

    async def startup(self) -> None:
        """A worker process starts (producers' startups are left alone): open the
        reporter, wrap ``listen()`` and beat."""
        broker: Any = self.broker
        if self._reporter is not None:
            return
        self._queues = _queues(broker)
        if broker.is_worker_process:
            self.group = (
                self._settings.group or _own(broker, "consumer_group_name") or DEFAULT_GROUP
            )
            self.consumer = _own(broker, "consumer_name") or host_pid()
            self._reporter = self._settings.async_reporter()
            broker.listen = _BeatingListen(broker.listen, self.beat, self._settings.interval_ms)
        elif getattr(broker, "is_scheduler_process", False):
            self.group, self.consumer = SCHEDULER_GROUP, host_pid()
            self._reporter = self._settings.async_reporter()
            self._ticker = asyncio.get_running_loop().create_task(
                self._tick(), name="redis-presence-taskiq-scheduler"
            )
        else:
            return
        self.beat()

    async def shutdown(self) -> None:
        """The worker is done (its running tasks too): deregister every row and close."""
        reporter, self._reporter = self._reporter, None
        ticker, self._ticker = self._ticker, None
        if ticker is not None:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker
        if reporter is None:
            return
        registry: AsyncRedisPresenceRegistry = reporter.registry
        await reporter.aclose()
        await registry.aclose()

    # -- tasks ------------------------------------------------------------------------

    def pre_execute(self, message: TaskiqMessage) -> TaskiqMessage:
        self._running[self._queue_of(message)] += 1
        self.beat()
        return message

    def post_execute(self, message: TaskiqMessage, result: TaskiqResult[Any]) -> None:
        queue = self._queue_of(message)
        self._running[queue] -= 1
        self.beat(progressed=queue)

    def post_send(self, message: TaskiqMessage) -> None:
        """A task was sent: in the scheduler process, that is its progress."""
        if self._ticker is not None:
            self.beat(progressed=self._queue_of(message))

    async def _tick(self) -> None:
        """The scheduler process's beat, once per interval, from its event loop."""
        while True:
            await asyncio.sleep(self._settings.interval_ms / 1000)
            self.beat()

    def _queue_of(self, message: TaskiqMessage) -> str:
        queue = message.labels.get("queue_name")
        if isinstance(queue, str) and queue in self._queues:
            return queue
        return self._queues[0]

    # -- beats ------------------------------------------------------------------------

    def beat(self, *, progressed: str | None = None) -> None:
        """Beat every queue with its running tasks (O(queues), no I/O)."""
        reporter = self._reporter
        if reporter is None:
            return
        for queue in self._queues:
            leases = max(0, self._running[queue])
            reporter.beat(queue, self.group, self.consumer, leases, progressed=queue == progressed)


def _own(broker: Any, attribute: str) -> str | None:
    """A broker's own consumer group or consumer name (taskiq-redis's stream brokers)."""
    value = getattr(broker, attribute, None)
    return value if isinstance(value, str) and value else None


def _queues(broker: Any) -> tuple[str, ...]:
    """The queues (lists, channels, streams) a broker reads."""
    main = getattr(broker, "queue_name", None)
    queues = [main if isinstance(main, str) and main else DEFAULT_GROUP]
    extra = getattr(broker, "additional_streams", None) or {}
    queues.extend(str(name) for name in extra if str(name) not in queues)
    return tuple(queues)


class _BeatingListen:
    """A broker's ``listen()`` that beats each time a message comes and at least once per
    interval while none does; it asks the broker for a message only when asked for one."""

    def __init__(
        self,
        listen: Callable[[], AsyncIterator[Any]],
        beat: Callable[[], None],
        interval_ms: int,
    ) -> None:
        self._listen = listen
        self._beat = beat
        self._interval_s = interval_ms / 1000

    def __call__(self) -> AsyncGenerator[Any, None]:
        return self._messages()

    async def _messages(self) -> AsyncGenerator[Any, None]:
        inner = self._listen()
        pending: asyncio.Future[Any] | None = None
        try:
            while True:
                if pending is None:
                    pending = asyncio.ensure_future(inner.__anext__())
                done, _ = await asyncio.wait({pending}, timeout=self._interval_s)
                self._beat()
                if not done:
                    continue
                future, pending = pending, None
                try:
                    message = future.result()
                except StopAsyncIteration:
                    return
                yield message
        finally:
            if pending is not None:
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await pending
            aclose = getattr(inner, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()

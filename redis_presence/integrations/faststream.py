"""FastStream: one ``PresenceMiddleware`` for the broker, ``presence.install(app)`` for the app.

Pass the middleware to the broker and install it on the application::

    presence = PresenceMiddleware(url="redis://presence:6379/0")
    broker = RabbitBroker("amqp://guest:guest@rabbit:5672/", middlewares=[presence])
    app = FastStream(broker)
    presence.install(app)

Every subscriber then has one row: ``queue`` is what it reads (the RabbitMQ queue, the
NATS subject, the Kafka topic, the Redis channel, list or stream), ``group`` its own
consumer group where the broker has one (a Redis Streams group, a NATS queue group, a
Kafka ``group_id``), else the middleware's group (``"faststream"``), unless ``group=``
names one for every row; ``consumer`` is the Redis Streams consumer name where there is
one (so the row names the same consumer as ``XINFO CONSUMERS``), else ``host:pid``;
``lease_count`` the messages the subscriber is handling now; and ``capacity`` the
subscriber's ``max_workers`` where it has one (a concurrent subscriber: ``max_workers=N``
on the Redis, NATS and Kafka brokers' subscribers); other subscribers report none
(FastStream keeps no other concurrency setting a middleware can read: a RabbitMQ
subscriber's is its channel's prefetch). FastStream's middleware sees
messages, not polls, so liveness comes from the application: after start-up a task beats
every running subscriber once per interval through an `AsyncPresenceReporter`, and after
shutdown (once the subscribers have stopped and their handlers are done) every row is
deregistered. Without a FastStream application (a FastAPI lifespan, a script), call
``await presence.start(broker)``, ``await presence.drain()`` before stopping the broker,
and ``await presence.stop()`` after, yourself.

The application's shutdown (SIGTERM, SIGINT) marks every row draining first (an
``on_shutdown`` hook: before the brokers stop; written at once); a row whose subscriber
stopped stays, draining, while its handlers still run, then leaves. A drain request
(``registry.request_drain(queue, group, consumer)``) stops that subscriber alone
(FastStream's ``subscriber.stop()``: it reads no more; the handlers it runs finish when
the broker has a ``graceful_timeout``, else FastStream cancels them), its row says
draining while its handlers run and then leaves; the application goes on with its other
subscribers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from faststream import BaseMiddleware

from redis_presence.reporter import AsyncPresenceReporter

from ._common import Settings, capacity, host_pid

__all__ = ["DEFAULT_GROUP", "FastStreamApp", "PresenceMiddleware"]

DEFAULT_GROUP = "faststream"
"""The group of a subscriber that has no consumer group of its own."""

logger = logging.getLogger("redis_presence.integrations.faststream")


class FastStreamApp(Protocol):
    """What `install` needs of an application (`FastStream`, `AsgiFastStream`)."""

    @property
    def brokers(self) -> Sequence[Any]: ...

    def after_startup(self, func: Callable[[], Awaitable[None]]) -> Any: ...

    def on_shutdown(self, func: Callable[[], Awaitable[None]]) -> Any: ...

    def after_shutdown(self, func: Callable[[], Awaitable[None]]) -> Any: ...


@dataclass(frozen=True)
class _Row:
    queue: str
    group: str
    consumer: str


class PresenceMiddleware:
    """Reports every subscriber of a FastStream application to the presence Redis.

    An instance is the broker's middleware factory (``middlewares=[presence]``); `install`
    ties its reporter to the application's start-up and shutdown. `group` applies to every
    row when given (default: each subscriber's own consumer group, else `DEFAULT_GROUP`);
    `interval_ms` defaults to `DEFAULT_REPORT_INTERVAL_MS` (5,000 ms). Bad arguments
    raise `TypeError` / `ValueError` here.
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
        self._brokers: list[Any] = []
        self._rows: dict[int, tuple[Any, _Row]] = {}  # id(subscriber) -> (subscriber, row)
        self._leases: dict[int, int] = {}  # id(subscriber) -> messages in its handler now
        self._reported: set[int] = set()  # rows beaten and not deregistered since
        self._reporter: AsyncPresenceReporter | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._draining = False
        self._drained: set[int] = set()  # subscribers a drain request stopped
        self._stops: set[asyncio.Task[None]] = set()

    # -- the broker's side: a middleware per message -----------------------------------

    def __call__(self, msg: Any, /, *, context: Any) -> BaseMiddleware:
        """The broker calls this for every message it receives or publishes."""
        return _MessageScope(msg, context=context, presence=self)

    def _received(self, subscriber: Any) -> None:
        key = id(subscriber)
        self._row(subscriber)
        self._leases[key] = self._leases.get(key, 0) + 1
        self._beat(key)

    def _finished(self, subscriber: Any) -> None:
        key = id(subscriber)
        self._leases[key] = max(0, self._leases.get(key, 0) - 1)
        self._beat(key, progressed=True)  # a message handled (or failed): progress

    # -- the application's side --------------------------------------------------------

    def install(self, app: FastStreamApp) -> None:
        """Start reporting after `app` has started its brokers; deregister after it stopped
        them."""
        names = ("brokers", "after_startup", "on_shutdown", "after_shutdown")
        if not all(hasattr(app, name) for name in names):
            raise TypeError(f"app must be a FastStream application, got {type(app).__name__}")

        async def after_startup() -> None:
            await self.start(*app.brokers)

        async def on_shutdown() -> None:
            await self.drain()

        async def after_shutdown() -> None:
            await self.stop()

        app.after_startup(after_startup)
        app.on_shutdown(on_shutdown)
        app.after_shutdown(after_shutdown)

    async def start(self, *brokers: Any) -> None:
        """Beat every running subscriber of `brokers` once per interval from now on (call it
        in the running event loop, after the brokers started)."""
        if self._reporter is not None:
            raise RuntimeError("presence is already started")
        for broker in brokers:
            if self not in broker.middlewares:
                logger.warning(
                    "redis-presence: %s has no PresenceMiddleware in middlewares=[...]: its "
                    "rows are kept alive, but lease counts stay 0",
                    type(broker).__name__,
                )
        self._brokers = list(brokers)
        self._stopping = asyncio.Event()
        self._draining = False
        self._drained = set()
        self._reporter = self._settings.async_reporter(self._drain_requested)
        self._beat_all()
        self._ticker = asyncio.get_running_loop().create_task(
            self._tick(), name="redis-presence-faststream"
        )

    async def drain(self) -> None:
        """The shutdown begins (call it before the brokers stop): every row says draining
        from now on, written at once."""
        reporter = self._reporter
        if reporter is None or self._draining:
            return
        self._draining = True
        self._beat_all()
        try:
            await reporter.flush()
        except Exception:  # retried by the next flush
            logger.exception("redis-presence could not write that the application is draining")

    def _drain_requested(self, queue: str, group: str, consumer: str) -> None:
        """A drain of one subscriber's row was requested (in the event loop): stop that
        subscriber; its row drains while its handlers run."""
        for key, (subscriber, row) in list(self._rows.items()):
            if (row.queue, row.group, row.consumer) != (queue, group, consumer):
                continue
            if key in self._drained or self._draining:
                return
            self._drained.add(key)
            logger.info("redis-presence: drain of %s requested: stopping its subscriber", queue)
            self._beat(key)  # the draining beat acknowledges the request
            task = asyncio.get_running_loop().create_task(self._drain_subscriber(subscriber))
            self._stops.add(task)
            task.add_done_callback(self._stopped)
            return

    async def _drain_subscriber(self, subscriber: Any) -> None:
        """Write the draining beat, then stop the subscriber (a stopped one with nothing
        to finish is deregistered at the next beat, which would drop a pending beat)."""
        reporter = self._reporter
        if reporter is not None:
            try:
                await reporter.flush()
            except Exception:  # retried by the next flush
                logger.exception("redis-presence could not write that a subscriber drains")
        await subscriber.stop()

    def _stopped(self, task: asyncio.Task[None]) -> None:
        self._stops.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("redis-presence: a drained subscriber's stop failed: %r", task.exception())

    async def stop(self) -> None:
        """Stop beating and deregister every row this process reported; idempotent."""
        self._stopping.set()
        ticker, self._ticker = self._ticker, None
        if ticker is not None:
            await ticker
        reporter, self._reporter = self._reporter, None
        self._reported.clear()
        if reporter is not None:
            await reporter.aclose()
            await reporter.registry.aclose()

    async def _tick(self) -> None:
        interval_s = self._settings.interval_ms / 1000
        while True:
            try:
                await asyncio.wait_for(self._stopping.wait(), interval_s)
                return
            except asyncio.TimeoutError:
                self._beat_all()

    def _beat_all(self) -> None:
        for broker in self._brokers:
            for subscriber in broker.subscribers:
                self._row(subscriber)
        for key in list(self._rows):
            self._beat(key)

    def _beat(self, key: int, *, progressed: bool = False) -> None:
        """Beat one subscriber's row with its leases while it runs (O(1), no I/O), with
        progress when a message was just handled; once it stopped, its row is
        deregistered."""
        reporter = self._reporter
        found = self._rows.get(key)
        if reporter is None or found is None:
            return
        subscriber, row = found
        leases = self._leases.get(key, 0)
        draining = self._draining or key in self._drained
        if subscriber.running or (draining and leases and key in self._reported):
            reporter.beat(
                row.queue,
                row.group,
                row.consumer,
                leases,
                progressed=progressed,
                capacity=capacity(getattr(subscriber, "max_workers", None)),
                draining=draining,
            )
            self._reported.add(key)
        elif key in self._reported:
            reporter.deregister(row.queue, row.group, row.consumer)
            self._reported.discard(key)

    # -- naming ------------------------------------------------------------------------

    def _row(self, subscriber: Any) -> _Row:
        key = id(subscriber)
        found = self._rows.get(key)
        if found is not None:
            return found[1]
        queue, own_group, own_consumer = _describe(subscriber)
        group = self._settings.group or own_group or DEFAULT_GROUP
        consumer = own_consumer or host_pid()
        taken = {row for _, row in self._rows.values()}
        row, n = _Row(queue, group, consumer), 1
        while row in taken:  # two subscribers of one queue in one process
            n += 1
            row = _Row(queue, group, f"{consumer}#{n}")
        self._rows[key] = (subscriber, row)
        return row


def _describe(subscriber: Any) -> tuple[str, str | None, str | None]:
    """``(queue, own group, own consumer name)`` of a subscriber, from the log context every
    FastStream subscriber builds (``get_log_context``) and a Redis stream's settings."""
    context = subscriber.get_log_context(None)
    if "subject" in context:  # NATS: the queue group is NATS's consumer group
        return str(context["subject"]), context.get("queue") or None, None
    if "topic" in context:  # Kafka
        return str(context["topic"]), context.get("group_id") or None, None
    if "channel" in context:  # Redis: a channel, a list or a stream
        stream = getattr(subscriber, "stream_sub", None)
        group = getattr(stream, "group", None) or None
        consumer = getattr(stream, "consumer", None) if group else None
        return str(context["channel"]), group, consumer or None
    if "queue" in context:  # RabbitMQ
        return str(context["queue"]), None, None
    named = [str(value) for key, value in context.items() if key != "message_id" and value]
    return (named[0] if named else type(subscriber).__name__), None, None


class _MessageScope(BaseMiddleware):
    """One message's middleware: counts it as a lease of its subscriber while handled."""

    def __init__(self, msg: Any, /, *, context: Any, presence: PresenceMiddleware) -> None:
        super().__init__(msg, context=context)
        self._presence = presence

    async def consume_scope(self, call_next: Callable[[Any], Awaitable[Any]], msg: Any) -> Any:
        subscriber = self.context.get_local("handler_")
        if subscriber is None:  # not a subscriber's message (e.g. an RPC reply)
            return await call_next(msg)
        self._presence._received(subscriber)
        try:
            return await call_next(msg)
        finally:
            self._presence._finished(subscriber)

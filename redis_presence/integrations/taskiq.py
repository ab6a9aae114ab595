"""Taskiq: ``PresenceMiddleware`` makes every ``taskiq worker`` process report itself.

Add it to the broker where the broker is defined (the module every worker imports)::

    # socket_timeout=None: the broker's BRPOP waits with no timeout (see below)
    broker = ListQueueBroker("redis://broker:6379/0", queue_name="invoices", socket_timeout=None)
    broker.add_middlewares(PresenceMiddleware(url="redis://presence:6379/0"))

Each worker process keeps one row per queue its broker reads: ``queue`` is the broker's
``queue_name`` (and, for taskiq-redis's ``RedisStreamBroker``, each of its
``additional_streams``), ``group`` the stream broker's consumer group, else ``"taskiq"``
(``group=`` sets one for every row), ``consumer`` the stream broker's consumer name (the
one ``XINFO CONSUMERS`` shows), else ``host:pid``, ``lease_count`` the tasks the
process is running and ``capacity`` how many it runs at once (``--max-async-tasks``, its
jitter included; none when unlimited). Each task it finishes (succeeded or failed) is
progress.

A middleware only sees messages, so at the worker's startup it wraps this broker's
``listen()``: each message beats, and while the worker's prefetcher waits in it for the
next one (an idle worker: ``ListQueueBroker`` waits on a ``BRPOP`` with no timeout), a
task of the worker's event loop beats once per interval, so an idle worker beats too and
a worker whose event loop is blocked goes stale. The wrapper reads nothing ahead. At the worker's
shutdown (after its running tasks) every row is deregistered; a killed worker process
goes stale after the TTL and expired after twice the TTL. Processes that only send tasks
(``broker.startup()`` in a web application) never connect.

Taskiq gives a middleware neither the worker's limit nor its shutdown: at startup the
middleware finds them on the ``Receiver`` that starts the broker (its caller: the
semaphore's limit and the ``finish_event`` that SIGTERM/SIGINT set). A warm shutdown then
marks every row draining at once (the event is set: the prefetcher stops, the running
tasks finish), before the rows leave. A drain request
(``registry.request_drain(queue, group, consumer)``) sets that same event: the worker
process takes no new task, finishes its running ones, deregisters and exits, and
``taskiq worker``'s process manager starts a new process in its place (a new consumer).

A worker whose broker's blocking read outlasts its client's ``socket_timeout`` (redis-py's
default is 5 s; ``ListQueueBroker``'s ``BRPOP`` never times out, the stream brokers'
``XREADGROUP`` blocks ``xread_block`` ms) dies of a ``TimeoutError`` each time it waits
that long for a task, and taskiq restarts it: its rows come and go under a new
``host:pid``. At startup the middleware checks the broker's client for that and logs one
warning (logger ``redis_presence.integrations.taskiq``) naming the setting to change.

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
import inspect
import logging
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from taskiq import TaskiqMessage, TaskiqMiddleware, TaskiqResult

from redis_presence.aio import AsyncRedisPresenceRegistry
from redis_presence.reporter import AsyncPresenceReporter

from ._common import SCHEDULER_GROUP, Settings, capacity, host_pid

__all__ = ["DEFAULT_GROUP", "SCHEDULER_GROUP", "PresenceMiddleware"]

DEFAULT_GROUP = "taskiq"
"""The group of a broker without a consumer group of its own, unless ``group=`` names one."""

READ_MARGIN_S = 1.0
"""How much longer than a broker's blocking read its client's ``socket_timeout`` must be,
so that the reply to a read that waited its whole time still arrives in time."""

logger = logging.getLogger(__name__)


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
        self._listen: _BeatingListen | None = None  # a worker's; None in a scheduler
        self._scheduler = False
        self._warned = False
        self._capacity: int | None = None
        self._draining = False
        self._finish: asyncio.Event | None = None
        self._watcher: asyncio.Task[None] | None = None

    # -- the worker's life cycle -----------------------------------------------------

    async def startup(self) -> None:
        """A worker process starts (producers' startups are left alone): open the
        reporter, wrap ``listen()`` and beat."""
        broker: Any = self.broker
        if self._reporter is not None:
            return
        self._queues = _queues(broker)
        if broker.is_worker_process:
            risk = _restart_risk(broker)
            if risk is not None and not self._warned:
                self._warned = True
                logger.warning("%s", risk)
            self.group = (
                self._settings.group or _own(broker, "consumer_group_name") or DEFAULT_GROUP
            )
            self.consumer = _own(broker, "consumer_name") or host_pid()
            self._listen = broker.listen = _BeatingListen(broker.listen, self.beat)
            self._capacity, self._finish = _receiver_context()
        elif getattr(broker, "is_scheduler_process", False):
            self.group, self.consumer = SCHEDULER_GROUP, host_pid()
            self._scheduler = True
        else:
            return
        self._draining = False
        self._reporter = self._settings.async_reporter(self._drain_requested)
        loop = asyncio.get_running_loop()
        self._ticker = loop.create_task(self._tick(), name="redis-presence-taskiq")
        if self._finish is not None:
            self._watcher = loop.create_task(
                self._watch_finish(self._finish), name="redis-presence-taskiq-draining"
            )
        self.beat()

    async def _watch_finish(self, finish: asyncio.Event) -> None:
        """The worker's shutdown begins (its finish event is set): every row says draining,
        written at once."""
        await finish.wait()
        self._draining = True
        self.beat()
        reporter = self._reporter
        if reporter is not None:
            try:
                await reporter.flush()
            except Exception:  # retried by the next flush
                logger.exception("redis-presence could not write that the worker is draining")

    def _drain_requested(self, queue: str, group: str, consumer: str) -> None:
        """A drain of this worker was requested (in its event loop): stop it as its warm
        shutdown does, by setting the receiver's finish event."""
        if group != self.group or consumer != self.consumer or self._finish is None:
            return
        if not self._finish.is_set():
            logger.info("redis-presence: drain of %s requested: the worker stops", queue)
            self._finish.set()

    async def shutdown(self) -> None:
        """The worker is done (its running tasks too): deregister every row and close."""
        watcher, self._watcher = self._watcher, None
        finish = self._finish
        if watcher is not None and not (finish is not None and finish.is_set()):
            watcher.cancel()  # no shutdown began through the event: nothing to say
        if watcher is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await watcher  # "draining" is written before the rows leave
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
        if self._scheduler:
            self.beat(progressed=self._queue_of(message))

    async def _tick(self) -> None:
        """Once per interval, from the process's event loop: the scheduler beats; a worker
        beats while its prefetcher waits in ``listen()`` (an idle worker's poll) or tasks
        run (a warm shutdown drains them after the prefetcher stopped)."""
        while True:
            await asyncio.sleep(self._settings.interval_ms / 1000)
            listen = self._listen
            if listen is None or listen.listening or any(self._running.values()):
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
            reporter.beat(
                queue,
                self.group,
                self.consumer,
                leases,
                progressed=queue == progressed,
                capacity=self._capacity,
                draining=self._draining if not self._scheduler else None,
            )


def _restart_risk(broker: Any) -> str | None:
    """Why `broker`'s worker processes would die of a ``TimeoutError`` while they wait for
    a task (its blocking read outlasts its client's ``socket_timeout``), naming the
    setting to change; None when they would not, or for a broker it does not know."""
    try:
        import taskiq_redis  # noqa: PLC0415  # the [taskiq] extra's; other brokers are not checked
    except ImportError:  # pragma: no cover - installed with the extra
        return None
    lists = (
        taskiq_redis.ListQueueBroker,
        taskiq_redis.ListQueueClusterBroker,
        taskiq_redis.ListQueueSentinelBroker,
    )
    streams = (
        taskiq_redis.RedisStreamBroker,
        taskiq_redis.RedisStreamClusterBroker,
        taskiq_redis.RedisStreamSentinelBroker,
    )
    name = type(broker).__name__
    timeout_s = _socket_timeout_s(broker)
    if timeout_s is None:  # no timeout: a read waits as long as it must
        return None
    if isinstance(broker, lists):
        read, limit = "its BRPOP waits with no timeout", "socket_timeout=None"
    elif isinstance(broker, streams):
        block_ms = broker.block
        if block_ms == 0:  # BLOCK 0: no timeout
            read, limit = (
                "its XREADGROUP blocks with no timeout (xread_block=0)",
                "socket_timeout=None",
            )
        else:
            least_s = block_ms / 1000 + READ_MARGIN_S
            if timeout_s >= least_s:
                return None
            read = f"its XREADGROUP blocks xread_block={block_ms} ms"
            limit = f"socket_timeout=None (or at least {least_s:g} s), or a shorter xread_block"
    else:
        return None
    return (
        f"taskiq worker processes of this {name} die of a TimeoutError, and taskiq restarts "
        f"them, each time they wait {timeout_s:g} s for a task: {read}, and its client's "
        f"socket_timeout is {timeout_s:g} s; create the broker with {limit}"
    )


def _socket_timeout_s(broker: Any) -> float | None:
    """The ``socket_timeout`` of a taskiq-redis broker's connections (its pool's, its
    cluster client's or its Sentinel's), else redis-py's default."""
    from redis.asyncio.connection import AbstractConnection  # noqa: PLC0415

    default = inspect.signature(AbstractConnection.__init__).parameters["socket_timeout"].default
    for owner in ("connection_pool", "redis", "sentinel"):
        kwargs = getattr(getattr(broker, owner, None), "connection_kwargs", None)
        if isinstance(kwargs, dict):
            value = kwargs.get("socket_timeout", default)
            return None if value is None else float(value)
    return None if default is None else float(default)


def _receiver_context() -> tuple[int | None, asyncio.Event | None]:
    """The limit of simultaneous tasks (None: unlimited) and the finish event of the
    taskiq ``Receiver`` whose ``listen`` starts the broker: the caller of this startup."""
    from taskiq.receiver import Receiver  # noqa: PLC0415

    frame = inspect.currentframe()
    while frame is not None:
        owner = frame.f_locals.get("self")
        if frame.f_code.co_name == "listen" and isinstance(owner, Receiver):
            semaphore = owner.sem
            # At startup no task holds the semaphore: its value is its limit.
            limit = None if semaphore is None else capacity(semaphore._value)
            finish = frame.f_locals.get("finish_event")
            return limit, finish if isinstance(finish, asyncio.Event) else None
        frame = frame.f_back
    return None, None


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
    """A broker's ``listen()`` that beats on each message and says whether the worker's
    prefetcher is in it (waiting for a message: the middleware's ticker beats then); it
    reads nothing ahead."""

    def __init__(self, listen: Callable[[], AsyncIterator[Any]], beat: Callable[[], None]) -> None:
        self._listen = listen
        self._beat = beat
        self.listening = 0

    def __call__(self) -> AsyncGenerator[Any, None]:
        return self._messages()

    async def _messages(self) -> AsyncGenerator[Any, None]:
        self.listening += 1
        try:
            async for message in self._listen():
                self._beat()
                yield message
        finally:
            self.listening -= 1

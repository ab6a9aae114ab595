"""`/api/v1/events`: the registry's events as server-sent event streams, and cursor polls.

Every open stream with the same filter (queue, group) shares one *poller* (`LiveFeed`):
one `registry.changes(cursor)` per interval for all of them, from the poller's cursor (the
library's opaque cursor, which survives a restart of the service), so a tick costs what
changed since the last one, once, whatever the number of open dashboards. Each stream
gets the poller's messages through a bounded queue of its own; a stream that falls more
than `SUBSCRIBER_BACKLOG` messages behind loses them and gets one ``snapshot`` instead, so
a slow reader never makes the service hold more. The poller stops when its last stream
closes. What the streams may cost the pages and the API is bounded: a read's messages
are one `Delivery`, framed once (sse-starlette's encoder) and written as the same bytes to
every stream; a stream is written at most once every STREAM_WRITE_INTERVAL_S; a read that
finds more than PAGE_EVENTS events (a burst) is one ``snapshot`` to every stream, not the
events; the pollers read Redis FEED_READS at a time; and the memory of closed streams is
given back (`Reclaimer`). The messages a stream sends:

* ``hello`` ``{"cursor"}``: the stream is open and goes on from this cursor;
* ``presence``: one `PresenceEvent` (`PresenceEvent.to_dict`), in the registry's order;
* ``cursor`` ``{"cursor", "now_ns"}`` (with the cursor as the SSE id): every event up to
  `now_ns` was sent, so a reconnecting `EventSource` goes on from there; after each read
  that found events, and every CURSOR_EVERY_S otherwise;
* ``status`` ``{"redis_up", "message", "since_ns"}``: Redis cannot be reached (since
  `since_ns`, the service's clock: one instant for every stream of the service), or it
  answers but the prefix cannot be read (``redis_up`` true with a `message`: written by
  another protocol version), or answers again (``redis_up`` true, no `message`; then a
  ``snapshot`` follows: the page reads what it shows again, and consumers lost meanwhile,
  say in a restart without persistence, disappear);
* ``snapshot`` ``{"reason", "cursor"}``: what the stream knew cannot go on (the cursor's log
  was trimmed or Redis lost its data, Redis answers again after an outage, rows the pages
  show vanished without an event, the stream fell behind, or more events came at once than
  one read gives): take a fresh read of what you show, then apply the events after `cursor`;
* ``rows`` ``{"now_ns", "rows"}``: the current rows, read at `now_ns` (the server's clock),
  of the consumers the poller watches whose last beat or leases changed since its last
  ``rows``: no event carries the beats of an active consumer, so a view ages and counts
  its rows from these, never from the event that made them active.

A poller watches the consumers of its filter that the pages read lately (`LiveFeed.shown`)
and, once such a page showed rows, those its events made active, at most WATCHED_ROWS,
and reads their rows again (`Planner.rows_of`, one round trip) after each read of its
events: what it costs depends on the rows shown, never on the number of open streams (a
poller whose pages show no rows, the groups page's, reads none).

A stream resumed with a cursor (``Last-Event-ID``) that its poller sent in the last
`HISTORY_BATCHES` reads gets the messages after it from the poller's memory; an older or
foreign cursor gets the events from it up to the poller's cursor from a read of its own
(or a ``snapshot`` when that cursor cannot go on), then the poller's, none twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from typing import Any

from sse_starlette import ServerSentEvent

from redis_presence.errors import (
    PresenceError,
    PresencePoolExhausted,
    PresenceProtocolError,
    PresenceResyncRequired,
)
from redis_presence.events import LOG_LAG_MS, EventCursor, PresenceEvent
from redis_presence.model import ConsumerPresence

from .reads import PresenceData
from .reclaim import Reclaimer

log = logging.getLogger("redis_presence.web")

CURSOR_EVERY_S = 10.0
"""How often a quiet stream still sends its cursor (so a reconnect resumes recently)."""
PAGE_EVENTS = 1_000
"""At most this many events per `changes` read (where the registry pages them)."""
SUBSCRIBER_BACKLOG = 2_000
"""Messages one stream may have waiting; past it they are dropped for one ``snapshot``."""
HISTORY_BATCHES = 240
"""How many of its last reads a poller remembers, for streams resumed from their cursors."""
HISTORY_EVENTS = 10_000
"""At most this many events in a poller's memory (older reads are forgotten first)."""
OUTAGE_GAP_S = 15.0
"""Failures further apart than this, with no stream watching between, are two outages."""
DEFAULT_MAX_STREAMS = 1_000
"""Open event streams one service serves at most (``--max-streams``)."""
WATCHED_ROWS = 500
"""At most this many consumers a poller reads the rows of again at each interval."""
STREAM_WRITE_INTERVAL_S = 0.5
"""The least time between two writes to one stream: what comes meanwhile waits (within
SUBSCRIBER_BACKLOG) and goes in the next write."""
FEED_READS = 4
"""Reads of Redis the pollers make at once, all pollers together; the others wait their
turn, so open streams never hold more than this many of the pool's connections."""

_Key = tuple[str, str, str]
_Beat = tuple[int, int, int]  # (registered_at_ns, last_heartbeat_ns, lease_count)
_WATCHING = {"joined", "recovered"}
_UNWATCHING = {"left", "pruned"}


class StreamMessage:
    """One server-sent event: its name, its JSON data and, for cursors, its id; its bytes
    on the wire are made once, however many streams send it."""

    __slots__ = ("_wire", "data", "event", "id")

    def __init__(self, event: str, data: dict[str, Any], id: str | None = None) -> None:
        self.event = event
        self.data = data
        self.id = id
        self._wire: bytes | None = None

    def json(self) -> str:
        return json.dumps(self.data, ensure_ascii=False)

    def wire(self) -> bytes:
        """The message framed by sse-starlette's own encoder (`ServerSentEvent.encode`:
        ``id``, ``event``, ``data`` lines), made once."""
        if self._wire is None:
            self._wire = ServerSentEvent(self.json(), event=self.event, id=self.id).encode()
        return self._wire

    def __repr__(self) -> str:
        return f"StreamMessage({self.event!r}, {self.data!r}, {self.id!r})"


class StreamsFull(Exception):
    """The service already serves its `max_streams` event streams."""


def cursor_now_ns(cursor: str) -> int:
    """The instant up to which a cursor's events were given."""
    return EventCursor.decode(cursor).now_ns


def _hello(cursor: str) -> StreamMessage:
    return StreamMessage("hello", {"cursor": cursor}, cursor)


def _snapshot(reason: str, cursor: str) -> StreamMessage:
    return StreamMessage("snapshot", {"reason": reason, "cursor": cursor}, cursor)


def _cursor(cursor: str) -> StreamMessage:
    return StreamMessage("cursor", {"cursor": cursor, "now_ns": cursor_now_ns(cursor)}, cursor)


class _Page:
    """One `changes` read: its events, the cursor after them, and whether more are due at
    once (the registry's ``more``, where it pages)."""

    __slots__ = ("cursor", "events", "more")

    def __init__(self, events: list[PresenceEvent], cursor: str, more: bool) -> None:
        self.events, self.cursor, self.more = events, cursor, more


class Delivery:
    """What a poller sends its streams at once: its messages, and their bytes on the wire,
    made once and written as they are to every stream that gets the whole of it."""

    __slots__ = ("_wire", "messages")

    def __init__(self, messages: Sequence[StreamMessage]) -> None:
        self.messages = tuple(messages)
        self._wire: bytes | None = None

    def wire(self) -> bytes:
        if self._wire is None:
            self._wire = b"".join(message.wire() for message in self.messages)
        return self._wire


class Subscriber:
    """One open stream of a poller: its queue of deliveries to send."""

    def __init__(self, poller: _Poller, cursor: str | None) -> None:
        self.poller = poller
        self.resume_from = cursor
        self.queue: deque[Delivery] = deque()
        self.waiting = 0
        """Messages in `queue`."""
        self.wakeup = asyncio.Event()
        self.greeted = False
        """Whether its ``hello`` is queued; until then the poller's reads are not its."""
        self.catching_up = False
        """Resumed from a cursor the poller does not remember: its own read comes first."""
        self.closed = False

    def put(self, delivery: Delivery | Sequence[StreamMessage], cursor: str | None) -> None:
        if not isinstance(delivery, Delivery):
            delivery = Delivery(delivery)
        count = len(delivery.messages)
        if not count:
            return
        if self.waiting + count > SUBSCRIBER_BACKLOG and cursor is not None:
            self.queue.clear()  # fallen behind: what it missed is one snapshot
            dropped = _snapshot(
                f"this stream fell more than {SUBSCRIBER_BACKLOG:,} messages behind: "
                "events were dropped",
                cursor,
            )
            self.queue.append(Delivery([dropped]))
            self.waiting = 1
        else:
            self.queue.append(delivery)
            self.waiting += count
        self.wakeup.set()

    def _take(self) -> list[Delivery]:
        taken = list(self.queue)
        self.queue.clear()
        self.waiting = 0
        return taken

    async def messages(self) -> AsyncGenerator[StreamMessage, None]:
        """The stream's messages until it is closed (`close`, or the generator's own)."""
        deliveries = self.deliveries()
        try:
            async for delivery in deliveries:
                for message in delivery.messages:
                    yield message
        finally:
            await deliveries.aclose()  # leaves the poller now, not when collected

    async def chunks(
        self, min_interval_s: float = STREAM_WRITE_INTERVAL_S
    ) -> AsyncGenerator[bytes, None]:
        """What to write, at most once every `min_interval_s`: everything waiting goes in
        one write, and a delivery that is the whole write is the poller's own bytes (made
        once for all its streams, not copied per stream)."""
        deliveries = self.deliveries(min_interval_s)
        try:
            async for delivery in deliveries:
                yield delivery.wire()
        finally:
            await deliveries.aclose()

    async def deliveries(self, min_interval_s: float = 0.0) -> AsyncGenerator[Delivery, None]:
        """`messages`, all those waiting at once (one `Delivery`), at most once every
        `min_interval_s`."""
        loop = asyncio.get_running_loop()
        try:
            if self.catching_up:
                yield Delivery([m for d in self._take() for m in d.messages])  # its hello
                async for batch in self.poller.catch_up(self):
                    yield Delivery(batch)
            while not self.closed:
                if not self.queue:
                    self.wakeup.clear()
                    await self.wakeup.wait()
                    continue
                taken = self._take()
                skip = self._skip
                if skip is not None:
                    kept = [
                        m for d in taken for m in d.messages if m.event != "presence" or not skip(m)
                    ]
                    taken = [Delivery(kept)] if kept else []
                if len(taken) > 1:
                    taken = [Delivery([m for d in taken for m in d.messages])]
                if not taken:
                    continue
                wrote_at = loop.time()
                yield taken[0]
                rest = wrote_at + min_interval_s - loop.time()
                if rest > 0 and not self.closed:
                    await asyncio.sleep(rest)  # what comes meanwhile goes in the next write
        finally:
            self.close()

    _skip: Callable[[StreamMessage], bool] | None = None

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.wakeup.set()
            self.poller.leave(self)


class _Poller:
    """The one `changes` loop of a filter, and the streams it serves."""

    def __init__(self, feed: LiveFeed, queue: str | None, group: str | None) -> None:
        self.feed = feed
        self.queue, self.group = queue, group
        self.subscribers: set[Subscriber] = set()
        self.cursor: str | None = None
        self.history: deque[tuple[str, tuple[StreamMessage, ...]]] = deque()
        self.history_events = 0
        self.down: StreamMessage | None = None
        """The ``status`` message while Redis cannot be reached."""
        self.ready = asyncio.Event()
        """Set once the poller has a cursor (and again after each new start)."""
        self.task: asyncio.Task[None] | None = None
        self._last_cursor_at = time.monotonic()
        self.watched: dict[_Key, _Beat | None] = {}
        """The consumers whose rows it reads again, with what its streams last got of them."""
        self.shows_rows = False
        """Whether a page of its filter showed rows (the groups page shows none): only then
        does it watch the consumers its events make active."""
        self.missing: dict[_Key, float] = {}
        """Watched consumers whose rows were gone at the last read of them, with no event
        (monotonic time then): still gone at the next, after a whole read of the events,
        they were lost (keys deleted by hand, data lost) and every stream re-reads."""

    def watch(self, rows: Sequence[ConsumerPresence]) -> None:
        """Read these rows again at each interval (the most recently shown WATCHED_ROWS)."""
        self.shows_rows = True
        for row in rows:
            beat = self.watched.pop(row.key, None)
            if beat is not None and beat[0] != row.registered_at_ns:
                beat = None
            self.watched[row.key] = beat
        while len(self.watched) > WATCHED_ROWS:
            del self.watched[next(iter(self.watched))]

    # -- streams joining and leaving

    def join(self, cursor: str | None) -> Subscriber:
        sub = Subscriber(self, cursor)
        self.subscribers.add(sub)
        if cursor is not None:
            sub.put([_hello(cursor)], None)  # at once, whatever Redis says
            sub.greeted = True
            replay = self._after(cursor)
            if replay is not None:
                sub.put(replay, self.cursor)
            else:
                sub.catching_up = True
        elif self.cursor is not None:
            sub.put([_hello(self.cursor)], None)
            sub.greeted = True
        if self.down is not None:
            sub.put([self.down], None)
        if self.task is None:
            self.task = asyncio.ensure_future(self._run())
        return sub

    def leave(self, sub: Subscriber) -> None:
        if sub not in self.subscribers:
            return
        self.subscribers.discard(sub)
        self.feed.reclaimer.closed(self.feed.streams)
        if not self.subscribers:
            self.feed._stopped(self)
            if self.task is not None:
                self.task.cancel()
                self.task = None

    def _after(self, cursor: str) -> list[StreamMessage] | None:
        """The messages the poller sent after `cursor`, or None when it does not remember
        sending that cursor."""
        if cursor == self.cursor:
            return []
        found = False
        out: list[StreamMessage] = []
        for after, messages in self.history:
            if found:
                out += messages
            elif after == cursor:
                found = True
        return out if found else None

    # -- sending

    def _send(self, messages: list[StreamMessage], cursor: str | None) -> None:
        """Send to every greeted stream (one not greeted yet gets its ``hello`` at `cursor`
        instead: what came before it is not its own), one `Delivery` for all."""
        delivery = Delivery(messages)
        hello: Delivery | None = None
        for sub in list(self.subscribers):
            if sub.catching_up:
                continue
            if not sub.greeted:
                if cursor is not None:
                    sub.greeted = True
                    hello = hello or Delivery([_hello(cursor)])
                    sub.put(hello, None)
                continue
            sub.put(delivery, cursor)

    def _send_status(self, message: StreamMessage) -> None:
        """Send a ``status`` to every stream, greeted or not."""
        delivery = Delivery([message])
        for sub in list(self.subscribers):
            sub.put(delivery, None)

    def _remember(self, cursor: str, messages: list[StreamMessage]) -> None:
        self.history.append((cursor, tuple(messages)))
        self.history_events += len(messages)
        while len(self.history) > HISTORY_BATCHES or (
            self.history_events > HISTORY_EVENTS and len(self.history) > 1
        ):
            self.history_events -= len(self.history.popleft()[1])

    def _restart(self, cursor: str, reason: str) -> None:
        """A new start from `cursor`: every stream takes a fresh read (``snapshot``)."""
        self.history.clear()
        self.history_events = 0
        message = _snapshot(reason, cursor)
        self.cursor = cursor
        self._remember(cursor, [message])
        self._send([message], cursor)
        self._last_cursor_at = time.monotonic()

    # -- the loop

    async def _run(self) -> None:
        feed = self.feed
        lost: str | None = None  # why the poller starts over: every stream re-reads
        while self.subscribers:
            fresh = self.cursor is None or lost is not None
            try:
                page = await feed.read(None if fresh else self.cursor, self.queue, self.group)
            except PresenceResyncRequired as exc:
                lost = str(exc)
                if fresh:
                    await asyncio.sleep(feed.interval_s)
                continue
            except PresencePoolExhausted as exc:  # the service is busy, Redis may be fine
                log.warning("event stream: %s", str(exc))
                await asyncio.sleep(feed.interval_s)
                continue
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not isinstance(exc, PresenceError):  # never a dead feed: log, go on
                    log.error("event stream failed: %s", repr(exc))
                    await asyncio.sleep(feed.interval_s)
                    continue
                if self.down is None:
                    # Redis answered when the prefix is another version's: not "down".
                    self.down = StreamMessage(
                        "status",
                        {
                            "redis_up": isinstance(exc, PresenceProtocolError),
                            "message": str(exc),
                            "since_ns": feed.unreachable_since_ns(),
                        },
                    )
                    self._send_status(self.down)
                await asyncio.sleep(feed.interval_s)
                continue
            feed.down_since_ns = None
            if self.down is not None:
                # Back after an outage: whatever happened meanwhile (a restart that lost
                # the data, say), every view reads itself again, from a fresh cursor.
                since = self.down.data["since_ns"]
                self.down = None
                up = StreamMessage("status", {"redis_up": True, "message": "", "since_ns": None})
                self._send_status(up)
                if self.cursor is not None and lost is None:
                    lost = f"Redis answers again after an outage (unreachable since {since} ns)"
                    continue  # read from now: the cursor may name a log that is gone
            if self.cursor is None or lost is not None:
                first = self.cursor is None
                if first and lost is None:
                    self.cursor = page.cursor
                    self._remember(page.cursor, [])
                    self._send([], page.cursor)  # every waiting stream: hello
                else:
                    self._restart(page.cursor, lost or "")
                lost = None
                self.ready.set()
            elif page.more or len(page.events) > PAGE_EVENTS:
                # More events at once than one read gives (a fleet gone stale together, a
                # mass restart): every stream takes one fresh read, not the events one by
                # one, so a burst costs each stream one message whatever its size.
                lost = (
                    f"more than {PAGE_EVENTS:,} events at once: take a fresh snapshot() of "
                    "what you show"
                )
                continue
            else:
                rows = await self._reread() if self.watched and feed.rereads else []
                self._deliver(page, rows)
            await asyncio.sleep(feed.interval_s)

    def _deliver(self, page: _Page, rows: list[StreamMessage]) -> None:
        """Send a read's events, its cursor and `rows` (`_reread`'s), in one delivery."""
        messages = [StreamMessage("presence", event.to_dict()) for event in page.events]
        for event in page.events:
            if not self.shows_rows:
                break
            if event.kind.value in _WATCHING and event.registered_at_ns is not None:
                self.watched.pop(event.key, None)
                beat = event.last_heartbeat_ns
                self.watched[event.key] = (
                    None if beat is None else (event.registered_at_ns, beat, event.lease_count)
                )
            elif event.kind.value in _UNWATCHING:
                self.watched.pop(event.key, None)
                self.missing.pop(event.key, None)
        while len(self.watched) > WATCHED_ROWS:
            del self.watched[next(iter(self.watched))]
        now = time.monotonic()
        if messages or now - self._last_cursor_at >= CURSOR_EVERY_S:
            self._last_cursor_at = now
            messages.append(_cursor(page.cursor))
        self.cursor = page.cursor
        self._remember(page.cursor, messages)
        self._send(messages + rows, page.cursor)

    async def _reread(self) -> list[StreamMessage]:
        """Read the watched rows again: a ``rows`` message of those whose beat or leases
        changed (none when none did)."""
        keys = list(self.watched)
        try:
            async with self.feed.reads:
                now_ns, rows = await self.feed.data.rows_of(keys)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the next read of the events says what is wrong
            log.warning("event stream: rows not read again: %s", repr(exc))
            return []
        found: set[_Key] = set()
        changed: list[dict[str, Any]] = []
        for row in rows:
            found.add(row.key)
            beat = (row.registered_at_ns, row.last_heartbeat_ns, row.lease_count)
            if row.key in self.watched and self.watched[row.key] != beat:
                self.watched[row.key] = beat
                changed.append(
                    {
                        "queue": row.queue,
                        "group": row.group,
                        "consumer": row.consumer,
                        "registered_at_ns": row.registered_at_ns,
                        "last_heartbeat_ns": row.last_heartbeat_ns,
                        "lease_count": row.lease_count,
                        "state": row.state.value,
                    }
                )
        self._vanished([key for key in keys if key not in found])
        return [StreamMessage("rows", {"now_ns": now_ns, "rows": changed})] if changed else []

    def _vanished(self, gone: list[_Key]) -> None:
        """Watched consumers whose rows are gone: their event (left, pruned) comes with the
        next read of the events, which `_deliver` applies first; those still watched at the
        next read of the rows (and, on a cluster, LOG_LAG_MS later) vanished without one,
        and every stream takes a fresh read (``snapshot``)."""
        now = time.monotonic()
        for key in [key for key in self.missing if key not in gone]:
            del self.missing[key]
        lost = []
        for key in gone:
            first = self.missing.setdefault(key, now)
            if first < now and now - first >= self.feed.settle_s:
                lost.append(key)
        if lost and self.cursor is not None:
            for key in lost:
                self.watched.pop(key, None)
                del self.missing[key]
            queue, group, consumer = lost[0]
            self._restart(
                self.cursor,
                f"{len(lost)} consumers shown here vanished without an event (the first: "
                f"{queue!r} / {group!r} / {consumer!r}): their keys were deleted, or Redis "
                "lost them",
            )

    # -- a stream resumed from a cursor the poller does not remember

    async def catch_up(self, sub: Subscriber) -> AsyncIterator[list[StreamMessage]]:
        """The events from `sub`'s cursor up to the poller's, from a read of its own; from
        then on it gets the poller's messages, without an event it already got."""
        await self.ready.wait()
        base = self.cursor
        assert base is not None
        assert sub.resume_from is not None
        sub.catching_up = False  # the poller's reads after `base` are its own from now
        up_to = cursor_now_ns(base)
        try:
            # The logged events up to now, the derived ones up to the poller's cursor: one
            # read (more than it gives is a burst, answered with one fresh read instead).
            page = await self.feed.read(sub.resume_from, self.queue, self.group, now_ns=up_to)
        except PresenceResyncRequired as exc:
            yield [_snapshot(str(exc), base)]
            return
        except PresenceError as exc:
            reason = f"the events since this stream's cursor could not be read: {exc}"
            yield [_snapshot(reason, base)]
            return
        if page.more or len(page.events) > PAGE_EVENTS:
            reason = (
                f"more than {PAGE_EVENTS:,} events since this stream's cursor: take a fresh "
                "snapshot() of what you show"
            )
            yield [_snapshot(reason, base)]
            return
        batch = [StreamMessage("presence", event.to_dict()) for event in page.events]
        seen = {_event_key(message) for message in batch}
        if batch:
            yield batch
        yield [_cursor(base)]
        if seen:
            # The poller's reads after `base` may give again an event this read gave (one
            # logged after `base` was read, and before this read): only reads that began
            # before this one ended, give or take the log's lag, can.
            until = time.monotonic() + LOG_LAG_MS / 1000 + 2 * self.feed.interval_s
            sub._skip = lambda m: time.monotonic() < until and _event_key(m) in seen


def _event_key(message: StreamMessage) -> tuple[Any, ...]:
    """A ``presence`` message's event, as a key (two reads of one logged event agree)."""
    data = message.data
    return (
        data["kind"],
        data["queue"],
        data["group"],
        data["consumer"],
        data["at_ns"],
        data["lease_count"],
        data["registered_at_ns"],
        data["last_heartbeat_ns"],
    )


class LiveFeed:
    """The event streams of one service: one `_Poller` per filter, at most `max_streams`
    open streams in all."""

    def __init__(
        self,
        data: PresenceData,
        *,
        interval_s: float = 0.5,
        max_streams: int = DEFAULT_MAX_STREAMS,
    ) -> None:
        self.data = data
        self.interval_s = interval_s
        self.max_streams = max_streams
        self._pollers: dict[tuple[str | None, str | None], _Poller] = {}
        self.rereads = hasattr(data.registry, "plans") and hasattr(data.registry, "execute")
        """Whether the registry runs `Planner.rows_of` (the pollers read their rows again)."""
        clustered = self.rereads and bool(getattr(data.registry.plans, "clustered", False))
        self.settle_s = LOG_LAG_MS / 1000 if clustered else 0.0
        """How long a watched row must stay gone before it counts as lost (a cluster's logs
        may run LOG_LAG_MS ahead of the clock that bounds a read of the events)."""
        self.down_since_ns: int | None = None
        """Since when (the service's clock) Redis cannot be reached, as the pollers and
        the routes saw it; None once a poller's read succeeds."""
        self._down_seen_ns = 0
        self.reads = asyncio.Semaphore(FEED_READS)
        """What every poller's read of Redis holds (FEED_READS at once)."""
        self.reclaimer = Reclaimer()
        """Gives the memory of closed streams back (`Reclaimer`)."""

    def unreachable_since_ns(self) -> int:
        """Since when Redis cannot be reached (one instant for every stream and error page
        of this outage): a failure after OUTAGE_GAP_S without one, while no poller is down
        (a route's failure, with no stream open to see Redis come back), starts a new one."""
        self.data.forget_totals()  # what Redis holds when it answers again may be other data
        self.data.observed.unreachable()
        now = time.time_ns()
        gap = now - self._down_seen_ns > OUTAGE_GAP_S * 1e9
        ongoing = any(poller.down is not None for poller in self._pollers.values())
        if self.down_since_ns is None or (gap and not ongoing):
            self.down_since_ns = now
        self._down_seen_ns = now
        return self.down_since_ns

    @property
    def streams(self) -> int:
        """How many streams are open."""
        return sum(len(p.subscribers) for p in self._pollers.values())

    @property
    def pollers(self) -> int:
        """How many pollers run (one per filter of the open streams)."""
        return len(self._pollers)

    def subscribe(
        self, cursor: str | None, *, queue: str | None = None, group: str | None = None
    ) -> Subscriber:
        """A new stream of the events of `queue` / `group` from `cursor` (None: from now);
        `StreamsFull` when `max_streams` are open."""
        if self.streams >= self.max_streams:
            raise StreamsFull(f"this service already serves {self.max_streams:,} event streams")
        poller = self._pollers.get((queue, group))
        if poller is None:
            poller = self._pollers[(queue, group)] = _Poller(self, queue, group)
        return poller.join(cursor)

    def shown(self, queue: str | None, group: str | None, rows: Sequence[ConsumerPresence]) -> None:
        """A page of the filter `queue` / `group` read `rows`: its poller, if one runs,
        reads them again at each interval for its streams."""
        poller = self._pollers.get((queue, group))
        if poller is not None:
            poller.watch(rows)

    def _stopped(self, poller: _Poller) -> None:
        if self._pollers.get((poller.queue, poller.group)) is poller:
            del self._pollers[(poller.queue, poller.group)]

    async def read(
        self,
        cursor: str | None,
        queue: str | None,
        group: str | None,
        *,
        now_ns: int | None = None,
    ) -> _Page:
        """One `changes` read: a page of at most PAGE_EVENTS events (one of FEED_READS
        reads at once)."""
        async with self.reads:
            page = await self.data.changes(
                cursor, queue=queue, group=group, now_ns=now_ns, limit=PAGE_EVENTS
            )
        events, after = page
        return _Page(list(events), after, bool(getattr(page, "more", False)))

    async def close(self) -> None:
        """Stop every poller (the app's shutdown)."""
        self.reclaimer.cancel()
        pollers = list(self._pollers.values())
        self._pollers.clear()
        for poller in pollers:
            for sub in list(poller.subscribers):
                sub.closed = True
                sub.wakeup.set()
            poller.subscribers.clear()
            if poller.task is not None:
                poller.task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await poller.task
                poller.task = None


async def stream(
    data: PresenceData,
    cursor: str | None,
    *,
    queue: str | None = None,
    group: str | None = None,
    interval_s: float = 0.5,
) -> AsyncGenerator[StreamMessage, None]:
    """The messages of one event stream from `cursor` (None: from now) until the client
    goes away, from a feed of its own."""
    feed = LiveFeed(data, interval_s=interval_s)
    sub = feed.subscribe(cursor, queue=queue, group=group)
    try:
        async for message in sub.messages():
            yield message
    finally:
        sub.close()
        await feed.close()


__all__ = [
    "DEFAULT_MAX_STREAMS",
    "LiveFeed",
    "StreamMessage",
    "StreamsFull",
    "Subscriber",
    "cursor_now_ns",
    "stream",
]

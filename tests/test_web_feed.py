"""The live feed behind `/api/v1/events` streams (`redis_presence.web.feed.LiveFeed`):
one poller per filter shared by every stream, bounded queues, resuming from a cursor, and
what streams are told when the log is lost or Redis goes away and comes back. Against a
real redis-server; time is the feed's fixed clock, waits are deadlines."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncGenerator, Iterator
from typing import Any

import pytest
from servers import MakeRedisServer
from waiting import wait_until_async

from redis_presence import AsyncRedisPresenceRegistry, RedisPresenceRegistry
from redis_presence.events import EventCursor
from redis_presence.web import feed as live_events
from redis_presence.web.feed import LiveFeed, StreamMessage, StreamsFull
from redis_presence.web.reads import PresenceData

pytestmark = [pytest.mark.redis_server, pytest.mark.timeout(90)]

MS = 1_000_000
TTL_MS = 10_000
T0 = 1_796_000_000_000 * MS
DEADLINE_S = 20.0


class Clock:
    def __init__(self) -> None:
        self.now_ns = T0

    def __call__(self) -> int:
        return self.now_ns


@pytest.fixture
def writer(redis_url: str) -> Iterator[RedisPresenceRegistry]:
    registry = RedisPresenceRegistry.from_url(redis_url, max_future_ms=None)
    registry.set_ttl(TTL_MS)
    try:
        yield registry
    finally:
        registry.close()


class Counted:
    """`PresenceData.changes` counted, per filter."""

    def __init__(self, data: PresenceData) -> None:
        self.calls: dict[tuple[Any, Any], int] = {}
        inner = data.changes

        async def changes(cursor: str | None, **kwargs: Any) -> Any:
            key = (kwargs.get("queue"), kwargs.get("group"))
            self.calls[key] = self.calls.get(key, 0) + 1
            return await inner(cursor, **kwargs)

        data.changes = changes  # type: ignore[method-assign]


async def until(
    messages: AsyncGenerator[StreamMessage, None], event: str, seen: list[StreamMessage]
) -> StreamMessage:
    async def wait() -> StreamMessage:
        while True:
            message = await anext(messages)
            seen.append(message)
            if message.event == event:
                return message

    return await asyncio.wait_for(wait(), DEADLINE_S)


def consumers(seen: list[StreamMessage]) -> list[tuple[str, str]]:
    return [(m.data["kind"], m.data["consumer"]) for m in seen if m.event == "presence"]


def test_one_poller_per_filter_shared_by_every_stream(
    redis_url: str, writer: RedisPresenceRegistry
) -> None:
    clock = Clock()

    async def main() -> None:
        async with AsyncRedisPresenceRegistry.from_url(redis_url) as registry:
            data = PresenceData(registry, ttl_ms=None, clock=clock)
            counted = Counted(data)
            feed = LiveFeed(data, interval_s=0.02, max_streams=60)
            subs = [feed.subscribe(None, queue="q") for _ in range(50)]
            subs += [feed.subscribe(None, queue="other") for _ in range(10)]
            assert (feed.streams, feed.pollers) == (60, 2)
            with pytest.raises(StreamsFull, match="60 event streams"):
                feed.subscribe(None)
            streams = [sub.messages() for sub in subs]
            hellos = [await until(s, "hello", []) for s in streams]
            assert len({h.id for h in hellos[:50]}) == 1  # one poller, one cursor
            writer.heartbeat("q", "g", "joins", now_ns=T0)
            writer.heartbeat("other", "g", "elsewhere", now_ns=T0)
            got = [await until(s, "presence", []) for s in streams]
            assert {m.data["consumer"] for m in got[:50]} == {"joins"}
            assert {m.data["consumer"] for m in got[50:]} == {"elsewhere"}
            assert all(m is got[0] for m in got[:50])  # one message, made once
            calls = counted.calls[("q", None)]
            await asyncio.sleep(0.2)
            # The reads grow with time, not with the number of streams (50 here).
            assert counted.calls[("q", None)] - calls < 30
            for stream in streams[:50]:
                await stream.aclose()
            assert (feed.streams, feed.pollers) == (10, 1)  # its last stream gone: stopped
            before = counted.calls.get(("q", None))
            await asyncio.sleep(0.1)
            assert counted.calls.get(("q", None)) == before
            for stream in streams[50:]:
                await stream.aclose()
            assert (feed.streams, feed.pollers) == (0, 0)
            await feed.close()

    asyncio.run(main())


def test_a_stream_resumed_from_a_cursor_gets_what_came_in_between(
    redis_url: str, writer: RedisPresenceRegistry
) -> None:
    clock = Clock()

    async def main() -> None:
        async with AsyncRedisPresenceRegistry.from_url(redis_url) as registry:
            data = PresenceData(registry, ttl_ms=None, clock=clock)
            feed = LiveFeed(data, interval_s=0.02)
            keeper = feed.subscribe(None, queue="q")  # keeps the poller running
            kept = keeper.messages()
            seen: list[StreamMessage] = []
            await until(kept, "hello", seen)
            writer.heartbeat("q", "g", "a", now_ns=T0)
            first = await until(kept, "cursor", seen)
            writer.heartbeat("q", "g", "b", now_ns=T0)
            writer.heartbeat("q", "g", "c", now_ns=T0)
            await until(kept, "cursor", seen)
            assert consumers(seen) == [("joined", "a"), ("joined", "b"), ("joined", "c")]

            # A cursor the poller sent: the messages after it, from its memory.
            remembered = feed.subscribe(first.id, queue="q").messages()
            again: list[StreamMessage] = []
            hello = await until(remembered, "hello", again)
            assert hello.id == first.id
            await until(remembered, "cursor", again)
            assert consumers(again) == [("joined", "b"), ("joined", "c")]

            # A cursor it never sent (an earlier poll's): its own read up to the poller's
            # cursor, then the poller's, nothing twice.
            old = (await data.changes(None, queue="q"))[1]
            writer.heartbeat("q", "g", "d", now_ns=T0)
            foreign = feed.subscribe(old, queue="q").messages()
            caught: list[StreamMessage] = []
            await until(foreign, "hello", caught)
            await until(foreign, "presence", caught)
            writer.heartbeat("q", "g", "e", now_ns=T0)
            while ("joined", "e") not in consumers(seen):
                await until(kept, "presence", seen)
            while ("joined", "e") not in consumers(caught):
                await until(foreign, "presence", caught)
            assert consumers(caught) == [("joined", "d"), ("joined", "e")]
            for stream in (kept, remembered, foreign):
                await stream.aclose()
            await feed.close()

    asyncio.run(main())


def test_a_slow_stream_gets_a_snapshot_instead_of_a_growing_queue(
    redis_url: str, writer: RedisPresenceRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(live_events, "SUBSCRIBER_BACKLOG", 20)
    clock = Clock()

    async def main() -> None:
        async with AsyncRedisPresenceRegistry.from_url(redis_url) as registry:
            data = PresenceData(registry, ttl_ms=None, clock=clock)
            feed = LiveFeed(data, interval_s=0.02)
            fast, slow = feed.subscribe(None), feed.subscribe(None)
            fast_messages, slow_messages = fast.messages(), slow.messages()
            await until(fast_messages, "hello", [])
            await until(slow_messages, "hello", [])
            for i in range(3):  # the slow one reads nothing meanwhile
                writer.heartbeat_many([("q", "g", f"c{i}-{n}", 0) for n in range(15)], now_ns=T0)
                seen: list[StreamMessage] = []
                await until(fast_messages, "cursor", seen)
                assert len(consumers(seen)) == 15
                assert len(slow.queue) <= 20
            snapshot = await until(slow_messages, "snapshot", [])
            assert "fell more than 20 messages behind" in snapshot.data["reason"]
            await fast_messages.aclose()
            await slow_messages.aclose()
            await feed.close()

    asyncio.run(main())


def test_every_stream_rereads_after_a_lost_log_and_after_an_outage(
    make_redis_server: MakeRedisServer,
) -> None:
    server = make_redis_server()
    writer = RedisPresenceRegistry.from_url(server.url, max_future_ms=None)
    writer.set_ttl(TTL_MS)
    clock = Clock()

    async def main() -> None:
        registry = AsyncRedisPresenceRegistry.from_url(server.url)
        data = PresenceData(registry, ttl_ms=None, clock=clock)
        feed = LiveFeed(data, interval_s=0.02)
        streams = [feed.subscribe(None).messages() for _ in range(3)]
        seen: list[list[StreamMessage]] = [[] for _ in streams]
        for stream, got in zip(streams, seen, strict=True):
            await until(stream, "hello", got)

        # The log trimmed past the poller's cursor: one snapshot to every stream.
        events = feed._pollers[(None, None)]
        events.cursor = EventCursor(T0 - 10**15, 1_000, {}).encode()
        for stream, got in zip(streams, seen, strict=True):
            snapshot = await until(stream, "snapshot", got)
            assert "fresh snapshot" in snapshot.data["reason"]

        # Redis goes away: each stream is told since when; back: each reads again.
        server.stop()
        for stream, got in zip(streams, seen, strict=True):
            down = await until(stream, "status", got)
            assert down.data["redis_up"] is False
            assert "cannot reach Redis" in down.data["message"]
            assert isinstance(down.data["since_ns"], int)
        late = feed.subscribe(None).messages()  # joins while Redis is down: told at once
        late_seen: list[StreamMessage] = []
        assert (await until(late, "status", late_seen)).data["redis_up"] is False
        server.restart()  # on the same port (stopped already), empty
        for stream, got in [*zip(streams, seen, strict=True), (late, late_seen)]:
            up = await until(stream, "status", got)
            assert up.data == {"redis_up": True, "message": "", "since_ns": None}
        for stream, got in [*zip(streams, seen, strict=True), (late, late_seen)]:
            snapshot = await until(stream, "snapshot", got)
            assert "Redis answers again after an outage" in snapshot.data["reason"]
        assert [m.event for m in late_seen] == ["hello", "status", "status", "snapshot"]
        for stream in [*streams, late]:
            await stream.aclose()
        await feed.close()
        await registry.aclose()

    asyncio.run(main())
    writer.close()


def test_a_poller_sends_the_beats_and_leases_of_the_rows_its_pages_show(
    redis_url: str, writer: RedisPresenceRegistry
) -> None:
    """No event carries an active consumer's beats: the poller reads the rows its pages
    showed again (one read per poller, whatever the number of streams) and sends those
    whose beat or leases changed; a poller whose pages show no rows reads none."""
    clock = Clock()

    async def main() -> None:
        async with AsyncRedisPresenceRegistry.from_url(redis_url) as registry:
            data = PresenceData(registry, ttl_ms=None, clock=clock)
            reads: list[int] = []
            inner = data.rows_of

            async def rows_of(keys: Any) -> Any:
                reads.append(len(keys))
                return await inner(keys)

            data.rows_of = rows_of  # type: ignore[method-assign]
            feed = LiveFeed(data, interval_s=0.02)
            streams = [feed.subscribe(None, queue="q", group="g").messages() for _ in range(20)]
            overview = feed.subscribe(None).messages()
            for stream in [*streams, overview]:
                await until(stream, "hello", [])
            writer.heartbeat("q", "g", "busy", 1, now_ns=T0)
            for stream in streams:
                await until(stream, "presence", [])
            await asyncio.sleep(0.1)
            assert reads == []  # no page showed rows yet: nothing to read again
            feed.shown("q", "g", writer.snapshot(queue="q", group="g", now_ns=T0))
            writer.heartbeat("q", "g", "busy", 7, now_ns=T0 + 1_000 * MS)
            clock.now_ns = T0 + 1_500 * MS
            got = [await until(stream, "rows", []) for stream in streams]
            assert all(m is got[0] for m in got)  # one read, one message for every stream
            (row,) = got[0].data["rows"]
            assert (row["consumer"], row["lease_count"]) == ("busy", 7)
            assert row["last_heartbeat_ns"] == T0 + 1_000 * MS
            assert got[0].data["now_ns"] == T0 + 1_500 * MS  # the instant of the read
            # Unchanged since: read again, but nothing sent.
            count = len(reads)
            await wait_until_async(
                lambda: len(reads) > count + 3, timeout_s=DEADLINE_S, what="more reads of the rows"
            )
            assert all(n == 1 for n in reads)
            overview_seen: list[StreamMessage] = []
            writer.heartbeat("q", "g", "busy", 8, now_ns=T0 + 2_000 * MS)
            third = await until(streams[0], "rows", [])
            assert third.data["rows"][0]["lease_count"] == 8
            writer.heartbeat("elsewhere", "g", "mark", now_ns=T0 + 2_000 * MS)
            await until(overview, "presence", overview_seen)
            assert [m.event for m in overview_seen if m.event == "rows"] == []
            for stream in [*streams, overview]:
                await stream.aclose()
            await feed.close()

    asyncio.run(main())


# -- what the streams may cost the service (issue 30 item 8) --------------------------------


def test_a_burst_of_events_is_one_snapshot_per_stream_not_the_events(
    redis_url: str, writer: RedisPresenceRegistry
) -> None:
    """1,500 consumers go stale at one instant (more than one read of the events gives):
    every stream gets one ``snapshot``, not 1,500 ``presence`` messages, and the stream
    goes on with the events after it."""
    clock = Clock()
    beats = [("burst", "g", f"w{i:04}", 0) for i in range(1_500)]
    for start in range(0, len(beats), 500):
        writer.heartbeat_many(beats[start : start + 500], now_ns=T0)

    async def main() -> None:
        async with AsyncRedisPresenceRegistry.from_url(redis_url) as registry:
            data = PresenceData(registry, ttl_ms=None, clock=clock)
            feed = LiveFeed(data, interval_s=0.02)
            streams = [feed.subscribe(None, queue="burst").messages() for _ in range(5)]
            seen: list[list[StreamMessage]] = [[] for _ in streams]
            for stream, got in zip(streams, seen, strict=True):
                await until(stream, "hello", got)
            clock.now_ns = T0 + (TTL_MS + 5) * MS  # every one of them crosses the stale line
            for stream, got in zip(streams, seen, strict=True):
                snapshot = await until(stream, "snapshot", got)
                assert "more than 1,000 events at once" in snapshot.data["reason"]
            writer.heartbeat("burst", "g", "after", now_ns=clock.now_ns)
            for stream, got in zip(streams, seen, strict=True):
                await until(stream, "presence", got)
                assert consumers(got) == [("joined", "after")]  # none of the burst's
            for stream in streams:
                await stream.aclose()
            await feed.close()

    asyncio.run(main())


def test_a_stream_is_written_at_most_once_per_interval_and_loses_nothing(
    redis_url: str, writer: RedisPresenceRegistry
) -> None:
    """A poller reading every 20 ms with events each time: its stream is written at most
    once every 300 ms (what came meanwhile goes in the next write), every event once."""
    clock = Clock()
    joins = 40

    async def main() -> None:
        async with AsyncRedisPresenceRegistry.from_url(redis_url) as registry:
            data = PresenceData(registry, ttl_ms=None, clock=clock)
            feed = LiveFeed(data, interval_s=0.02)
            sub = feed.subscribe(None, queue="paced")
            chunks = sub.chunks(min_interval_s=0.3)
            written: list[tuple[float, bytes]] = []
            loop = asyncio.get_running_loop()

            async def read() -> None:
                async for chunk in chunks:
                    written.append((loop.time(), chunk))

            reader = asyncio.ensure_future(read())
            await wait_until_async(lambda: written, timeout_s=DEADLINE_S, what="the hello")
            for i in range(joins):
                await asyncio.to_thread(writer.heartbeat, "paced", "g", f"w{i:02}", now_ns=T0)
                await asyncio.sleep(0.02)
            await wait_until_async(
                lambda: b"".join(c for _, c in written).count(b"event: presence") >= joins,
                timeout_s=DEADLINE_S,
                what="every join written",
            )
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            await feed.close()
            gaps = [b[0] - a[0] for a, b in itertools.pairwise(written)]
            assert gaps
            assert min(gaps) >= 0.3 - 0.01, gaps
            body = b"".join(c for _, c in written)
            assert body.count(b"event: presence") == joins  # each once
            assert len(written) <= 1 + (written[-1][0] - written[0][0]) / 0.3 + 1

    asyncio.run(main())


def test_every_stream_writes_the_pollers_bytes_made_once(
    redis_url: str, writer: RedisPresenceRegistry
) -> None:
    """50 streams of one poller: each write of a read's events is the very bytes object
    the poller made, not a copy per stream."""
    clock = Clock()

    async def main() -> None:
        async with AsyncRedisPresenceRegistry.from_url(redis_url) as registry:
            data = PresenceData(registry, ttl_ms=None, clock=clock)
            feed = LiveFeed(data, interval_s=0.02)
            chunks = [feed.subscribe(None, queue="shared").chunks() for _ in range(50)]
            for stream in chunks:  # each one's hello
                assert b"event: hello" in await asyncio.wait_for(anext(stream), DEADLINE_S)
            writer.heartbeat_many([("shared", "g", f"w{i}", 0) for i in range(3)], now_ns=T0)
            got = [await asyncio.wait_for(anext(stream), DEADLINE_S) for stream in chunks]
            assert got[0].count(b"event: presence") == 3
            assert all(chunk is got[0] for chunk in got)
            for stream in chunks:
                await stream.aclose()
            await feed.close()

    asyncio.run(main())


def test_pollers_read_redis_a_few_at_a_time_whatever_the_number_of_filters(
    redis_url: str, writer: RedisPresenceRegistry
) -> None:
    """30 streams of 30 groups (30 pollers): never more than FEED_READS reads of Redis at
    once, so open streams never take the pool's connections from the pages."""
    clock = Clock()

    async def main() -> None:
        async with AsyncRedisPresenceRegistry.from_url(redis_url) as registry:
            data = PresenceData(registry, ttl_ms=None, clock=clock)
            running, most, reads = 0, 0, 0
            inner = data.changes

            async def changes(cursor: str | None, **kwargs: Any) -> Any:
                nonlocal running, most, reads
                running += 1
                most = max(most, running)
                try:
                    await asyncio.sleep(0.01)  # a read that takes a while
                    return await inner(cursor, **kwargs)
                finally:
                    running -= 1
                    reads += 1

            data.changes = changes  # type: ignore[method-assign]
            feed = LiveFeed(data, interval_s=0.02)
            streams = [feed.subscribe(None, queue="q", group=f"g{i}").messages() for i in range(30)]
            for stream in streams:
                await until(stream, "hello", [])
            await wait_until_async(lambda: reads > 120, timeout_s=DEADLINE_S, what="reads")
            assert most <= live_events.FEED_READS
            for stream in streams:
                await stream.aclose()
            await feed.close()

    asyncio.run(main())


def test_a_wave_of_closed_streams_is_reclaimed_once(redis_url: str) -> None:
    """150 streams close: one reclaim (a full collection, the heap given back) runs a
    moment after the last, not one per stream."""

    async def main() -> None:
        async with AsyncRedisPresenceRegistry.from_url(redis_url) as registry:
            data = PresenceData(registry, ttl_ms=None, clock=Clock())
            feed = LiveFeed(data, interval_s=0.02)
            feed.reclaimer.after_s = 0.05
            streams = [feed.subscribe(None).messages() for _ in range(150)]
            for stream in streams:
                await until(stream, "hello", [])
            for stream in streams:
                await stream.aclose()
            await wait_until_async(
                lambda: feed.reclaimer.runs >= 1, timeout_s=DEADLINE_S, what="a reclaim"
            )
            await asyncio.sleep(0.2)
            assert feed.reclaimer.runs == 1
            assert feed.reclaimer.closed_since == 0
            await feed.close()

    asyncio.run(main())


def test_stream_frames_are_made_by_sse_starlettes_encoder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 35 item 6: a message's bytes on the wire are `ServerSentEvent.encode`'s (its
    framing, its escaping of line breaks in ids), not written by hand."""
    from sse_starlette import ServerSentEvent

    encoded: list[bytes] = []
    original = ServerSentEvent.encode

    def encode(self: ServerSentEvent) -> bytes:
        encoded.append(original(self))
        return encoded[-1]

    monkeypatch.setattr(ServerSentEvent, "encode", encode)
    message = StreamMessage("presence", {"consumer": "a\nb", "kind": "joined"}, "7-0")
    assert message.wire() == encoded[0]
    assert message.wire() is message.wire()  # made once
    assert (
        encoded[0]
        == b'id: 7-0\r\nevent: presence\r\ndata: {"consumer": "a\\nb", "kind": "joined"}\r\n\r\n'
    )


def test_a_group_page_rereads_when_the_rows_it_shows_vanish_without_an_event(
    redis_url: str, writer: RedisPresenceRegistry
) -> None:
    """A group's keys deleted by hand (or lost) leave no event: the open group page kept
    showing its consumers. The poller reads the rows its pages show again anyway; rows
    still gone at its next read, with no event between, make every stream re-read."""
    clock = Clock()

    async def main() -> None:
        async with AsyncRedisPresenceRegistry.from_url(redis_url) as registry:
            data = PresenceData(registry, ttl_ms=None, clock=clock)
            feed = LiveFeed(data, interval_s=0.02)
            stream = feed.subscribe(None, queue="q", group="g").messages()
            seen: list[StreamMessage] = []
            await until(stream, "hello", seen)
            writer.heartbeat("q", "g", "w1", now_ns=T0)
            writer.heartbeat("q", "g", "w2", now_ns=T0)
            while len(consumers(seen)) < 2:
                await until(stream, "presence", seen)
            feed.shown("q", "g", writer.snapshot(queue="q", group="g", now_ns=T0))
            # One leaves with its event: no re-read for that.
            writer.deregister("q", "g", "w1", now_ns=T0)
            left = await until(stream, "presence", seen)
            assert (left.data["kind"], left.data["consumer"]) == ("left", "w1")
            gk = writer.plans.keys.group("q", "g")
            writer.client.delete(gk.hb, gk.data)
            snapshot = await until(stream, "snapshot", seen)
            assert "vanished without an event" in snapshot.data["reason"]
            assert "'w2'" in snapshot.data["reason"]
            assert [m.event for m in seen].count("snapshot") == 1
            await stream.aclose()
            await feed.close()

    asyncio.run(main())

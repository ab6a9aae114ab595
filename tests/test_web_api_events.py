"""`/api/v1/events` over Starlette's test client, against a real redis-server: polled with
a cursor, and as a server-sent stream from the registry's changes (a lost log, a resync,
Redis down). The live feed's own rules are in test_web_feed.py."""

from __future__ import annotations

import asyncio
import base64
import time

import redis
from servers import free_port
from web_client import MS, T0, TTL_MS, Clock, clock, make_client, writer

from redis_presence import AsyncRedisPresenceRegistry, RedisPresenceRegistry
from redis_presence.events import EventCursor
from redis_presence.web import feed as live_events
from redis_presence.web.feed import StreamMessage
from redis_presence.web.reads import PresenceData

__all__ = ["clock", "writer"]  # the fixtures, used by name below


def trim_the_log(redis_url: str, queue: str, now_ns: int) -> None:
    """Write 400 events to `queue`'s log through a registry that keeps about 50 of them."""
    client = redis.Redis.from_url(redis_url)
    trimming = RedisPresenceRegistry(client, events_kept=50, max_future_ms=None)
    for i in range(200):
        trimming.heartbeat(queue, "g", f"c{i}", now_ns=now_ns)
        trimming.deregister(queue, "g", f"c{i}", now_ns=now_ns)
    client.close()


def test_events_polled_with_a_cursor(redis_url: str, writer: RedisPresenceRegistry) -> None:
    # Near the server's clock: a prune at a now_ns a day off the server's would take the
    # event logs out of the event index (they look a day old).
    clock = Clock(time.time_ns() // MS * MS)
    T0 = clock.now_ns
    writer.set_ttl(TTL_MS)  # the events' TTL: the shared one
    writer.heartbeat("q", "g", "dies", now_ns=T0)
    writer.heartbeat("q", "g", "leaves", now_ns=T0)
    with make_client(redis_url, clock, ttl_ms=None) as client:
        first = client.get("/api/v1/events").json()
        assert first["events"] == []
        assert first["now_ns"] == T0
        cursor = first["cursor"]
        # A cursor goes on only with its own filter: one of its own for queue q.
        cursors = {"": cursor, "q": client.get("/api/v1/events", params={"queue": "q"}).json()}
        cursors["q"] = cursors["q"]["cursor"]

        def events(**params: str) -> list[tuple[str, str, int]]:
            nonlocal cursor
            name = params.get("queue", "")
            cursor = cursors[name]
            response = client.get("/api/v1/events", params={"cursor": cursor, **params})
            assert response.status_code == 200, response.text
            body = response.json()
            assert body["now_ns"] == clock.now_ns
            cursor = cursors[name] = body["cursor"]
            return [(e["kind"], e["consumer"], e["at_ns"]) for e in body["events"]]

        clock.advance_ms(TTL_MS)
        assert events() == []
        clock.advance_ms(1)
        stale_at = T0 + (TTL_MS + 1) * MS
        assert events() == [("stale", "dies", stale_at), ("stale", "leaves", stale_at)]
        assert events(queue="q") == [("stale", "dies", stale_at), ("stale", "leaves", stale_at)]
        writer.deregister("q", "g", "leaves", now_ns=clock.now_ns)
        assert events(queue="q") == [("left", "leaves", clock.now_ns)]
        other = client.get("/api/v1/events", params={"cursor": cursors["q"], "group": "g"})
        assert other.status_code == 400
        assert "a cursor goes on only with the filter it was made for" in other.text
        assert events() == [("left", "leaves", clock.now_ns)]
        clock.advance_ms(TTL_MS)
        assert events() == [("expired", "dies", T0 + (2 * TTL_MS + 1) * MS)]
        assert writer.prune_expired(now_ns=clock.now_ns) == 1
        assert events() == [("pruned", "dies", clock.now_ns)]
        writer.heartbeat("elsewhere", "g", "other", now_ns=clock.now_ns)
        assert events(queue="q") == [("pruned", "dies", clock.now_ns)]  # not elsewhere's
        writer.heartbeat("q", "g", "back", 4, now_ns=clock.now_ns)
        # A cursor goes with its filter: this one went on over queue q alone.
        cursor = cursors["q"]
        body = client.get("/api/v1/events", params={"cursor": cursor, "queue": "q"}).json()
        assert body["events"] == [
            {
                "kind": "joined",
                "queue": "q",
                "group": "g",
                "consumer": "back",
                "at_ns": clock.now_ns,
                "lease_count": 4,
                "registered_at_ns": clock.now_ns,
                "last_heartbeat_ns": clock.now_ns,
            }
        ]
        # The same cursor answers the same again: polling is safe to retry.
        retried = client.get("/api/v1/events", params={"cursor": cursor, "queue": "q"}).json()
        assert retried["events"] == body["events"]
        cursor = body["cursor"]

        # A log trimmed past the cursor: 410, with a fresh cursor to go on from.
        trim_the_log(redis_url, "q", clock.now_ns)
        gone = client.get("/api/v1/events", params={"cursor": cursor, "queue": "q"})
        assert gone.status_code == 410
        body = gone.json()
        assert body["error"] == "resync_required"
        assert "fresh snapshot" in body["message"]
        fresh = client.get("/api/v1/events", params={"cursor": body["cursor"], "queue": "q"})
        assert fresh.status_code == 200
        assert fresh.json()["events"] == []
        # A cursor older than the logs last: the same answer.
        old = EventCursor(T0, 1_000, {}).encode()
        assert client.get("/api/v1/events", params={"cursor": old}).status_code == 410
        for junk in ["junk", "0000.1", base64.urlsafe_b64encode(b'{"v": 2}').decode()]:
            bad = client.get("/api/v1/events", params={"cursor": junk})
            assert bad.status_code == 400
            assert bad.json()["error"] == "bad_request"
            assert "cursor" in bad.json()["message"]
            streamed = client.get(
                "/api/v1/events", params={"cursor": junk}, headers={"Accept": "text/event-stream"}
            )
            assert streamed.status_code == 400


def test_the_event_stream_from_changes(
    redis_url: str, writer: RedisPresenceRegistry, clock: Clock
) -> None:
    """The messages of one stream, from the registry's `changes`: hello, presence events and
    cursors; a snapshot when its cursor was trimmed; status while Redis is down."""
    writer.set_ttl(TTL_MS)
    writer.heartbeat("q", "g", "dies", now_ns=T0)

    async def run() -> list[tuple[str, dict[str, object]]]:
        registry = AsyncRedisPresenceRegistry.from_url(redis_url)
        data = PresenceData(registry, ttl_ms=None, clock=clock)
        seen: list[tuple[str, dict[str, object]]] = []
        messages = live_events.stream(data, None, queue="q", interval_s=0.01)
        try:

            async def until(event: str) -> StreamMessage:
                while True:
                    message = await anext(messages)
                    seen.append((message.event, message.data))
                    if message.event == event:
                        return message

            hello = await until("hello")
            assert hello.id == hello.data["cursor"]
            clock.advance_ms(TTL_MS + 1)
            await until("presence")
            cursor = await until("cursor")
            assert cursor.id == cursor.data["cursor"]
            assert cursor.data["now_ns"] == clock.now_ns
            writer.deregister("q", "g", "dies", now_ns=clock.now_ns)
            await until("presence")
            await until("cursor")
            # Trim the log past the stream's cursor: it starts over, with a snapshot.
            trim_the_log(redis_url, "q", clock.now_ns)
            snapshot = await until("snapshot")
            assert snapshot.id == snapshot.data["cursor"]
            writer.heartbeat("q", "g", "after", now_ns=clock.now_ns + 1)
            joined = await until("presence")
            assert (joined.data["kind"], joined.data["consumer"]) == ("joined", "after")
            # From a cursor: hello at once, then what came after it.
            resumed = live_events.stream(data, str(snapshot.id), queue="q", interval_s=0.01)
            first = await anext(resumed)
            assert (first.event, first.data) == ("hello", {"cursor": snapshot.id})
            again = await anext(resumed)
            assert (again.event, again.data["consumer"]) == ("presence", "after")
            await resumed.aclose()
        finally:
            await messages.aclose()
            await registry.aclose()
        return seen

    seen = asyncio.run(run())
    kinds = [(event, data.get("kind"), data.get("consumer")) for event, data in seen]
    assert kinds[:3] == [
        ("hello", None, None),
        ("presence", "stale", "dies"),
        ("cursor", None, None),
    ]
    assert ("presence", "left", "dies") in kinds
    assert not any(kind == "joined" and str(c).startswith("c") for _, kind, c in kinds)


def test_the_event_stream_says_when_redis_is_down(clock: Clock) -> None:
    async def run() -> list[StreamMessage]:
        registry = AsyncRedisPresenceRegistry.from_url(
            f"redis://:s3cret-pass@127.0.0.1:{free_port()}/0"
        )
        data = PresenceData(registry, ttl_ms=None, clock=clock)
        messages = live_events.stream(data, None, interval_s=0.01)
        try:
            return [await anext(messages)]
        finally:
            await messages.aclose()
            await registry.aclose()

    (status,) = asyncio.run(run())
    assert status.event == "status"
    assert status.data["redis_up"] is False
    assert "cannot reach Redis" in str(status.data["message"])

"""The fleet's events without a saved cursor (issue 34 item 5), against a real
redis-server: `since=<time>` on `/api/v1/events` (a start derived from the logs' entry ids,
which are the server's milliseconds), and a group's chart and timeline in its JSON."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

import pytest
from waiting import wait_until
from web_client import HOSTILE, MS, TTL_MS, Clock, group_path, make_client, writer

from redis_presence import RedisPresenceRegistry
from redis_presence.web.params import parse_since

__all__ = ["writer"]  # the fixture, used by name below

S = 1_000 * MS


def near_server_clock() -> Clock:
    """The app's clock at the server's (the logs' entry ids are the server's milliseconds)."""
    return Clock(time.time_ns() // MS * MS)


def test_since_reads_the_events_of_a_time_gone_by(
    redis_url: str, writer: RedisPresenceRegistry
) -> None:
    clock = near_server_clock()
    t0 = clock.now_ns
    writer.set_ttl(TTL_MS)
    writer.heartbeat("q", "g", "dies", now_ns=t0)
    writer.heartbeat("q", "g", "leaves", 2, now_ns=t0)
    writer.heartbeat("other", "g", "elsewhere", now_ns=t0)
    writer.deregister("q", "g", "leaves", now_ns=t0)
    clock.advance_ms(TTL_MS + 1)  # "dies" went stale 1 ms ago
    with make_client(redis_url, clock, ttl_ms=None) as client:
        # No saved cursor: nothing before now (what an operator had before this issue).
        assert client.get("/api/v1/events").json()["events"] == []

        def since(value: str, **filters: str) -> dict[str, Any]:
            response = client.get("/api/v1/events", params={"since": value, **filters})
            assert response.status_code == 200, response.text
            body: dict[str, Any] = response.json()
            return body

        body = since(str(t0 - 5 * S))
        seen = [(e["kind"], e["queue"], e["consumer"]) for e in body["events"]]
        assert sorted(seen) == [
            ("joined", "other", "elsewhere"),
            ("joined", "q", "dies"),
            ("joined", "q", "leaves"),
            ("left", "q", "leaves"),
            ("stale", "other", "elsewhere"),
            ("stale", "q", "dies"),
        ]
        # In the order they happened: the crossings TTL later, the departure after its join.
        assert {kind for kind, _, _ in seen[-2:]} == {"stale"}
        assert seen.index(("joined", "q", "leaves")) < seen.index(("left", "q", "leaves"))
        assert body["more"] is False
        assert body["now_ns"] == clock.now_ns
        # The cursor goes on from now: nothing twice.
        after = client.get("/api/v1/events", params={"cursor": body["cursor"]}).json()
        assert after["events"] == []
        # Filtered by queue, by a time ago and by an ISO 8601 instant.
        only_q = since("1m", queue="q")
        assert {e["queue"] for e in only_q["events"]} == {"q"}
        iso = datetime.fromtimestamp((t0 - 5 * S) / 1e9, tz=timezone.utc).isoformat()
        assert since(iso)["events"] == body["events"]
        # Since a millisecond after the writes were logged (the logs' ids are the server's
        # milliseconds): the stale crossings alone. Asked once the server's clock reached that
        # millisecond: this app's clock runs a TTL ahead of it, so the app takes an instant
        # the server has not reached yet, whose cursor the read refuses as ahead of the
        # server's clock (a race CI lost when the request came within the same millisecond).
        mark = (time.time_ns() // MS + 1) * MS
        wait_until(
            lambda: time.time_ns() >= mark + MS,
            timeout_s=2,
            what="the server's clock past the millisecond asked for",
            interval_s=0.0005,
        )
        later = since(str(mark))
        assert [e["kind"] for e in later["events"]] == ["stale", "stale"]
        # Bad values name `since`, and nothing is read.
        for bad in ["yesterday", "2d", "-5m", str(clock.now_ns + S), "1e9"]:
            refused = client.get("/api/v1/events", params={"since": bad})
            assert refused.status_code == 400, bad
            assert refused.json()["parameter"] == "since"
        both = client.get("/api/v1/events", params={"since": "1m", "cursor": body["cursor"]})
        assert both.status_code == 400
        assert both.json()["parameter"] == "since"


def test_since_past_a_trimmed_log_says_so(redis_url: str) -> None:
    import redis

    clock = near_server_clock()
    client_ = redis.Redis.from_url(redis_url)
    trimming = RedisPresenceRegistry(client_, events_kept=50, max_future_ms=None)
    for i in range(200):
        trimming.heartbeat("q", "g", f"c{i}", now_ns=clock.now_ns)
        trimming.deregister("q", "g", f"c{i}", now_ns=clock.now_ns)
    client_.close()
    with make_client(redis_url, clock, ttl_ms=None) as client:
        gone = client.get("/api/v1/events", params={"since": "1m"})
        assert gone.status_code == 410
        assert gone.json()["message"].startswith("the events since ")
        assert "trimmed" in gone.json()["message"]


def test_parse_since() -> None:
    now = 1_796_000_000_000 * MS
    assert parse_since("90s", now) == now - 90 * S
    assert parse_since("15m", now) == now - 900 * S
    assert parse_since("2h", now) == now - 7_200 * S
    assert parse_since(str(now - 1), now) == now - 1
    at = datetime.fromtimestamp((now - 60 * S) / 1e9, tz=timezone.utc)
    assert parse_since(at.strftime("%Y-%m-%dT%H:%M:%SZ"), now) == now - 60 * S
    assert parse_since(at.strftime("%Y-%m-%dT%H:%M:%S"), now) == now - 60 * S  # UTC
    for bad in ["", "m", "15 m", "1w", "1.5h", "25h", "now"]:
        with pytest.raises(ValueError, match="since"):
            parse_since(bad, now)


def test_a_groups_json_holds_its_chart_and_timeline(
    redis_url: str, writer: RedisPresenceRegistry
) -> None:
    clock = near_server_clock()
    t0 = clock.now_ns
    writer.heartbeat("q", "g", "a", now_ns=t0)
    writer.heartbeat("q", "g", "b", now_ns=t0)
    writer.deregister("q", "g", "b", now_ns=t0 + 1 * S)
    clock.advance_ms(2_000)
    with make_client(redis_url, clock) as client:
        asked = {"queue": "q", "group": "g", "history": "1"}
        for response in (
            client.get(group_path("q", "g"), params={"history": "1"}),
            client.get("/group", params=asked, headers={"Accept": "application/json"}),
        ):
            assert response.status_code == 200, response.text
            past = response.json()["history"]
            assert (past["queue"], past["group"]) == ("q", "g")
            assert past["now_ns"] == clock.now_ns
            series = past["series"]
            assert len(series["times_ns"]) == len(series["low"]) == len(series["high"]) > 2
            assert series["low"][-1] == 1  # the count now: the page's own
            assert series["now_ns"] == clock.now_ns
            kinds = [(t["kind"], t["consumer"], t["derived"]) for t in past["timeline"]]
            assert kinds[0] == ("left", "b", False)  # newest first
            assert sorted(kinds[1:]) == [("joined", "a", False), ("joined", "b", False)]
            assert past["marks"] == []
        # Not asked for, it is not read (a live group page reads its twin again and again).
        assert client.get(group_path("q", "g")).json()["history"] is None
        twin = client.get(
            "/group", params={"queue": "q", "group": "g"}, headers={"Accept": "application/json"}
        )
        assert twin.json()["history"] is None
        bad = client.get(group_path("q", "g"), params={"history": "maybe"})
        assert bad.status_code == 400
        assert bad.json()["parameter"] == "history"
        # The consumer lists' JSON, which shows no chart, carries none.
        listed = client.get(
            "/consumers", params={"queue": "q"}, headers={"Accept": "application/json"}
        )
        assert listed.json()["history"] is None


def test_the_fleet_events_page(redis_url: str, writer: RedisPresenceRegistry) -> None:
    clock = near_server_clock()
    t0 = clock.now_ns
    writer.set_ttl(TTL_MS)
    writer.heartbeat("q", "g", "dies", now_ns=t0)
    writer.heartbeat("q", HOSTILE, "leaves", 2, now_ns=t0)
    writer.heartbeat("other", "g", "elsewhere", now_ns=t0)
    writer.deregister("q", HOSTILE, "leaves", now_ns=t0)
    clock.advance_ms(TTL_MS + 1)
    json_accept = {"Accept": "application/json"}
    with make_client(redis_url, clock, ttl_ms=None) as client:
        # By default, the last 15 minutes of every queue, oldest first.
        body = client.get("/events", headers=json_accept).json()
        assert body["since_ns"] == clock.now_ns - 15 * 60 * S
        kinds = sorted((e["kind"], e["consumer"], e["derived"]) for e in body["events"])
        assert kinds == [
            ("joined", "dies", False),
            ("joined", "elsewhere", False),
            ("joined", "leaves", False),
            ("left", "leaves", False),
            ("stale", "dies", True),
            ("stale", "elsewhere", True),
        ]
        assert body["more"] is False
        # Filtered by kind, queue, group; the cursor goes on from where the page stopped.
        left = client.get("/events", params={"kind": "left,pruned"}, headers=json_accept).json()
        assert [(e["kind"], e["group"]) for e in left["events"]] == [("left", HOSTILE)]
        assert left["read"] == 6
        of_q = client.get("/events", params={"queue": "q", "group": "g"}, headers=json_accept)
        assert [e["consumer"] for e in of_q.json()["events"]] == ["dies", "dies"]
        writer.heartbeat("q", "g", "late", now_ns=clock.now_ns)
        clock.advance_ms(1)
        after = client.get("/events", params={"cursor": body["cursor"]}, headers=json_accept).json()
        assert [(e["kind"], e["consumer"]) for e in after["events"]] == [("joined", "late")]
        assert after["since_ns"] is None
        # The page: names are text, each links to its own view, "go on" keeps the filters.
        page = client.get("/events", params={"kind": "left", "queue": "q"})
        assert page.status_code == 200
        assert HOSTILE not in page.text
        assert "&lt;img src=x onerror=alert(1)&gt;" in page.text
        assert 'rel="next" href="?cursor=' in page.text
        go_on = page.text.split('rel="next" href="?', 1)[1].split('"', 1)[0]
        assert go_on.endswith("&amp;kind=left&amp;queue=q")  # the filters kept, not since
        # Bad input names its parameter.
        for query, parameter in [
            ({"kind": "gone"}, "kind"),
            ({"since": "yesterday"}, "since"),
            ({"since": "1m", "cursor": body["cursor"]}, "since"),
            ({"cursor": "junk"}, "cursor"),
            ({"cursor": body["cursor"], "queue": "q"}, "cursor"),  # another filter's
        ]:
            bad = client.get("/events", params=query, headers=json_accept)
            assert bad.status_code == 400, query
            assert bad.json()["parameter"] == parameter


def test_the_events_page_past_a_trimmed_log(redis_url: str) -> None:
    import redis

    clock = near_server_clock()
    raw = redis.Redis.from_url(redis_url)
    trimming = RedisPresenceRegistry(raw, events_kept=50, max_future_ms=None)
    for i in range(200):
        trimming.heartbeat("q", "g", f"c{i}", now_ns=clock.now_ns)
        trimming.deregister("q", "g", f"c{i}", now_ns=clock.now_ns)
    raw.close()
    with make_client(redis_url, clock, ttl_ms=None) as client:
        gone = client.get("/events")
        assert gone.status_code == 410
        assert "the events since 15m cannot all be read" in gone.text
        assert "trimmed" in gone.text
        twin = client.get("/events", headers={"Accept": "application/json"})
        assert twin.status_code == 410
        assert twin.json()["error"] == "resync_required"


def test_a_stream_starts_at_since(redis_url: str, writer: RedisPresenceRegistry) -> None:
    import asyncio

    from redis_presence import AsyncRedisPresenceRegistry
    from redis_presence.web import feed as live_events
    from redis_presence.web.reads import PresenceData

    clock = near_server_clock()
    t0 = clock.now_ns
    writer.heartbeat("q", "g", "early", now_ns=t0)

    async def run() -> list[tuple[str, object]]:
        registry = AsyncRedisPresenceRegistry.from_url(redis_url)
        data = PresenceData(registry, ttl_ms=TTL_MS, clock=clock)
        cursor = await data.cursor_since(t0 - 5 * S, queue="q")
        messages = live_events.stream(data, cursor, queue="q", interval_s=0.01)
        seen: list[tuple[str, object]] = []
        try:
            while not any(event == "cursor" for event, _ in seen):
                message = await anext(messages)
                seen.append((message.event, message.data.get("consumer")))
        finally:
            await messages.aclose()
            await registry.aclose()
        return seen

    seen = asyncio.run(run())
    assert seen[:2] == [("hello", None), ("presence", "early")]  # from before it opened
    with make_client(redis_url, clock, ttl_ms=None) as client:
        bad = client.get(
            "/api/v1/events", params={"since": "soon"}, headers={"Accept": "text/event-stream"}
        )
        assert bad.status_code == 400
        assert bad.json()["parameter"] == "since"

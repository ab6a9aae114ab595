"""Events that stay true: after Redis lost its data, in bounded pages, against bad cursors.

* A server restarted empty (no persistence) under a reader: `changes` from a cursor of the
  data that was lost raises `PresenceResyncRequired` (the epoch marker is gone, or another
  one), and `follow` (sync and async) re-reads a snapshot instead of going on with ghosts.
* `changes(limit=...)` gives a long window in pages (``more``), and the pages together are
  the window read at once.
* Every malformed, forged or mismatched cursor is a `ValueError` naming `cursor`.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from servers import MakeRedisServer, RedisServer

from redis_presence import (
    AsyncRedisPresenceRegistry,
    FollowCursor,
    FollowSnapshot,
    PresenceConnectionError,
    PresenceEvent,
    PresenceResyncRequired,
    RedisPresenceRegistry,
)
from redis_presence.events import Changes, EventCursor

pytestmark = pytest.mark.timeout(120)

MS = 1_000_000


@pytest.fixture
def restartable(make_redis_server: MakeRedisServer) -> RedisServer:
    """A server of this test's own, without persistence: `restart()` brings it back empty."""
    return make_redis_server()


def test_changes_after_an_empty_restart_asks_for_a_resync(restartable: RedisServer) -> None:
    registry = RedisPresenceRegistry.from_url(restartable.url)
    try:
        for name in ("w1", "w2", "w3"):
            registry.heartbeat("orders", "billing", name, 2)
        _, cursor = registry.changes()
        restartable.restart()  # empty: --save "" and no AOF
        registry.heartbeat("orders", "billing", "w4")  # a new worker joins the empty server
        with pytest.raises(PresenceResyncRequired, match="lost the data"):
            registry.changes(cursor)
        # A restart before anyone writes again: the marker is gone, the same answer.
        _, cursor = registry.changes()
        restartable.restart()
        with pytest.raises(PresenceResyncRequired, match="epoch marker is gone"):
            registry.changes(cursor)
        # A fresh cursor goes on as before.
        _, cursor = registry.changes()
        registry.heartbeat("orders", "billing", "w5")
        events, _ = registry.changes(cursor)
        assert [(e.kind.value, e.consumer) for e in events] == [("joined", "w5")]
    finally:
        registry.close()


def test_a_restart_with_the_data_goes_on(make_redis_server: MakeRedisServer) -> None:
    """With persistence (AOF) the marker comes back with the data: no resync."""
    server = make_redis_server(appendonly=True)
    registry = RedisPresenceRegistry.from_url(server.url)
    try:
        registry.heartbeat("orders", "billing", "w1")
        _, cursor = registry.changes()
        registry.heartbeat("orders", "billing", "w2")
        with server.client() as client:
            assert client.save()  # on disk: the AOF (and the RDB) hold both beats
        server.restart()
        events, _ = registry.changes(cursor)
        assert [(e.kind.value, e.consumer) for e in events] == [("joined", "w2")]
    finally:
        registry.close()


def _consumers(message: FollowSnapshot) -> set[str]:
    return {row.consumer for row in message.rows}


def test_follow_rereads_a_snapshot_after_an_empty_restart(restartable: RedisServer) -> None:
    registry = RedisPresenceRegistry.from_url(restartable.url)
    try:
        registry.heartbeat("orders", "billing", "ghost")
        stream = registry.follow(interval_s=0.05)
        first = next(stream)
        assert isinstance(first, FollowSnapshot)
        assert _consumers(first) == {"ghost"}
        assert isinstance(next(stream), FollowCursor)
        restartable.restart()
        registry.heartbeat("orders", "billing", "alive")
        seen: list[Any] = []
        for message in stream:
            seen.append(message)
            if isinstance(message, FollowSnapshot):
                break
            assert len(seen) < 50, seen
        assert _consumers(seen[-1]) == {"alive"}  # the ghost is gone, not "active"
        assert not [m for m in seen if isinstance(m, PresenceEvent) and m.consumer == "ghost"]
    finally:
        registry.close()


def test_async_follow_rereads_a_snapshot_after_an_empty_restart(
    restartable: RedisServer,
) -> None:
    async def main() -> set[str]:
        registry = AsyncRedisPresenceRegistry.from_url(restartable.url)
        try:
            await registry.heartbeat("orders", "billing", "ghost")
            stream = registry.follow(interval_s=0.05)
            first = await anext(stream)
            assert isinstance(first, FollowSnapshot)
            assert _consumers(first) == {"ghost"}
            assert isinstance(await anext(stream), FollowCursor)
            restartable.restart()
            try:
                await registry.heartbeat("orders", "billing", "alive")
            except PresenceConnectionError:  # the pool's connection to the old process
                await registry.heartbeat("orders", "billing", "alive")
            for _ in range(50):
                message = await anext(stream)
                if isinstance(message, FollowSnapshot):
                    await stream.aclose()  # type: ignore[attr-defined]
                    return _consumers(message)
            raise AssertionError("no new snapshot")
        finally:
            await registry.aclose()

    assert asyncio.run(main()) == {"alive"}


# ------------------------------------------------------------------ bounded pages


@pytest.fixture
def registry(redis_server: RedisServer) -> Iterator[RedisPresenceRegistry]:
    with redis_server.client() as client:
        client.flushall()
    registry = RedisPresenceRegistry.from_url(redis_server.url)
    yield registry
    registry.close()


def _pages(
    registry: RedisPresenceRegistry, cursor: str, now_ns: int, limit: int, **filters: Any
) -> tuple[list[list[PresenceEvent]], str]:
    pages = []
    while True:
        page = registry.changes(cursor, now_ns=now_ns, limit=limit, **filters)
        assert isinstance(page, Changes)
        events, cursor = page
        pages.append(events)
        if not page.more:
            return pages, cursor
        assert len(pages) < 1_000


def _same_events(paged: list[PresenceEvent], whole: list[PresenceEvent]) -> None:
    """The same events, each consumer's in the same order (pages give a window's logged
    events, a log at a time, before its derived ones: across consumers the order differs)."""
    assert sorted(paged) == sorted(whole)
    for key in {e.key for e in whole}:
        assert [e for e in paged if e.key == key] == [e for e in whole if e.key == key]


def test_a_long_window_comes_in_pages_that_add_up_to_it(
    registry: RedisPresenceRegistry,
) -> None:
    """350 consumers of 3 queues join, 50 leave, and the rest go stale and expire: 1,000
    events in one window, given at most 64 at a time (a log entry is never split: each here
    holds at most 5 events), and the pages together are the window read at once."""
    _, start = registry.changes()
    base = int(EventCursor.decode(start).now_ns)
    _, start_q1 = registry.changes(queue="q1")  # a cursor goes with its own filter only
    names = [(f"q{i % 3}", f"g{i % 2}", f"w{i:03}") for i in range(350)]
    for i in range(0, len(names), 5):
        registry.heartbeat_many([(q, g, c, 1) for q, g, c in names[i : i + 5]], now_ns=base + MS)
    for q, g, c in names[:50]:
        registry.deregister(q, g, c, now_ns=base + 2 * MS)
    later = base + 3_600_000 * MS  # an hour on: every one left is stale, then expired
    whole, end = registry.changes(start, now_ns=later, limit=100_000)
    assert len(whole) == 350 + 50 + 2 * 300
    pages, paged_end = _pages(registry, start, later, 64)
    assert max(map(len, pages)) <= 64 + 4
    assert len(pages) >= 1_000 // 68
    _same_events([e for page in pages for e in page], whole)
    # Either end cursor goes on alike: nothing more, then what comes next.
    registry.heartbeat("q0", "g0", "new")
    for cursor in (end, paged_end):
        events, _ = registry.changes(cursor, now_ns=later + 2 * MS)
        assert [(e.kind.value, e.consumer) for e in events] == [("joined", "new")]
    # One queue's window, in pages, is that queue's part of it.
    pages, _ = _pages(registry, start_q1, later, 7, queue="q1")
    _same_events([e for page in pages for e in page], [e for e in whole if e.queue == "q1"])


def test_the_default_limit_bounds_a_poll(registry: RedisPresenceRegistry) -> None:
    _, start = registry.changes()
    base = int(EventCursor.decode(start).now_ns)
    registry.heartbeat_many([("q", "g", f"w{i}", 0) for i in range(1_500)], now_ns=base + MS)
    page = registry.changes(start, now_ns=base + 2 * MS)
    assert len(page.events) == 1_000
    assert page.more
    rest = registry.changes(page.cursor, now_ns=base + 2 * MS)
    assert len(rest.events) == 500
    assert not rest.more


@pytest.mark.parametrize("limit", [0, -1, 100_001, 1.5, True, "10"])
def test_a_bad_limit_is_refused(registry: RedisPresenceRegistry, limit: Any) -> None:
    with pytest.raises((ValueError, TypeError), match="limit"):
        registry.changes(None, limit=limit)


# ------------------------------------------------------------------ bad cursors


def _spell(document: Any) -> str:
    raw = json.dumps(document, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _forged(cursor: str, **changes: Any) -> str:
    document = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    document.update(changes)
    return _spell(document)


def test_a_deeply_nested_cursor_is_a_value_error(registry: RedisPresenceRegistry) -> None:
    for depth in (100, 100_000):
        nested = _spell({"v": 2, "t": "[" * depth + "]" * depth})
        nested_raw = base64.urlsafe_b64encode(b"[" * depth + b"]" * depth).decode()
        for cursor in (nested, nested_raw):
            with pytest.raises(ValueError, match="cursor"):
                registry.changes(cursor)
    with pytest.raises(ValueError, match="cursor"):
        registry.changes("A" * 2_000_000)


def test_a_forged_or_mismatched_cursor_is_refused(registry: RedisPresenceRegistry) -> None:
    registry.heartbeat("orders", "billing", "w1")
    _, of_orders = registry.changes(queue="orders")
    _, of_all = registry.changes()
    with pytest.raises(ValueError, match="cursor was returned for queue='orders'"):
        registry.changes(of_orders, queue="mail")
    with pytest.raises(ValueError, match="cursor was returned for queue=None"):
        registry.changes(of_all, queue="orders")  # a cursor goes with its own filter only
    with pytest.raises(ValueError, match="far from where it was read"):
        registry.changes(_forged(of_all, q={"orders": "0-0"}))  # would replay the whole log
    other = RedisPresenceRegistry(registry.client, prefix="other")
    with pytest.raises(ValueError, match="prefix"):
        other.changes(of_all)
    future = EventCursor.decode(of_all).server_ms + 3_600_000
    with pytest.raises(ValueError, match="ahead of the server clock"):
        registry.changes(_forged(of_all, s=future, q={}))
    with pytest.raises(ValueError, match="cursor"):
        registry.changes(_forged(of_orders, q={"mail": "1-0"}))
    for bad in ({"q": {"orders": "x-1"}}, {"t": -1}, {"e": 5}, {"f": ["presence", 1, None]}):
        with pytest.raises(ValueError, match="cursor"):
            registry.changes(_forged(of_all, **bad))
    with pytest.raises(ValueError, match="cursor"):
        registry.changes(_forged(of_all, w={"n": 1, "u": 1, "r": {}, "l": None, "d": None}))


def test_a_cursor_of_the_earlier_release_asks_for_a_resync(
    registry: RedisPresenceRegistry,
) -> None:
    _, cursor = registry.changes()
    now = EventCursor.decode(cursor)
    old = _spell({"v": 1, "t": now.now_ns, "s": now.server_ms, "q": {}})
    with pytest.raises(PresenceResyncRequired, match="earlier release"):
        registry.changes(old)


def test_on_a_cluster_the_loss_of_the_marker_node_asks_for_a_resync(
    cluster_client: Any,
) -> None:
    """On a cluster the caller writes the marker with the event index (the same slot):
    flushing the node that holds it (its data lost) makes `changes` ask for a resync."""
    registry = RedisPresenceRegistry(cluster_client)
    registry.heartbeat("orders", "billing", "w1")
    epoch = registry.plans.keys.epoch
    assert cluster_client.exists(epoch) == 1
    assert cluster_client.keyslot(epoch) == cluster_client.keyslot(registry.plans.keys.events)
    _, cursor = registry.changes()
    node = cluster_client.get_node_from_key(epoch)
    cluster_client.execute_command("FLUSHALL", target_nodes=node)
    registry.heartbeat("orders", "billing", "w2")
    with pytest.raises(PresenceResyncRequired, match="lost the data"):
        registry.changes(cursor)


def _document(cursor: str) -> dict[str, Any]:
    return dict(json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))))


def test_a_cursor_goes_on_only_with_the_filter_it_was_made_for(
    registry: RedisPresenceRegistry,
) -> None:
    """A cursor of queue=orders used for every queue replayed the other queues' events of
    the last LOG_LAG_MS (it holds no place in their logs): 50 'joined' of mail that came
    before the cursor. A cursor goes on only with its own filter, wider or narrower."""
    registry.heartbeat_many([("mail", "b", f"m{i}", 0) for i in range(50)])
    registry.heartbeat("orders", "billing", "w1")
    _, of_orders = registry.changes(queue="orders")
    _, of_billing = registry.changes(queue="orders", group="billing")
    _, of_all = registry.changes()
    registry.heartbeat("orders", "billing", "w2")
    events, of_orders = registry.changes(of_orders, queue="orders")
    assert [(e.kind.value, e.consumer) for e in events] == [("joined", "w2")]
    cases: list[tuple[str, dict[str, Any]]] = [
        (of_orders, {}),  # wider: the replay
        (of_orders, {"queue": "orders", "group": "billing"}),
        (of_billing, {"queue": "orders"}),
        (of_billing, {"group": "billing"}),
        (of_all, {"queue": "orders"}),  # narrower
        (of_all, {"group": "billing"}),
    ]
    for cursor, filters in cases:
        with pytest.raises(ValueError, match="cursor was returned for queue="):
            registry.changes(cursor, **filters)
    events, _ = registry.changes(of_all)
    assert [(e.kind.value, e.consumer) for e in events] == [("joined", "w2")]


YEAR_NS = 365 * 86_400 * 10**9


def test_a_cursor_ahead_of_the_server_clock_is_refused(registry: RedisPresenceRegistry) -> None:
    """A window instant moved a year ahead gave the stale and expired events of the whole
    year to come (600 here, all false); an instant a year ahead stopped every derived event
    for a year. Both are refused; an explicit now_ns at least as late goes on."""
    registry.heartbeat_many([("orders", "billing", f"w{i}", 0) for i in range(300)])
    _, cursor = registry.changes()
    document = _document(cursor)
    ahead = document["t"] + YEAR_NS
    window = {"n": ahead, "u": document["s"], "r": {}, "l": None, "d": ["", 0, 0, 0]}
    for forged in (_forged(cursor, w=window), _forged(cursor, t=ahead)):
        with pytest.raises(ValueError, match=r"cursor .*ahead of the server clock"):
            registry.changes(forged)
    events, _ = registry.changes(_forged(cursor, t=ahead), now_ns=ahead)
    assert events == []  # the caller's own clock: nothing between the cursor and it


def test_every_forged_window_field_is_a_value_error(registry: RedisPresenceRegistry) -> None:
    """Fields out of Redis's ranges reached Redis and came back as a `PresenceError` (a 502
    from the web service): a stream id past 2^64, an offset past 2^63, a millisecond past
    any clock; a group of another prefix or filter was read as a place to go on from."""
    registry.heartbeat("orders", "billing", "w1")
    registry.heartbeat("mail", "b", "m1")
    _, cursor = registry.changes()
    _, of_orders = registry.changes(queue="orders")
    document = _document(cursor)
    member = registry.plans.keys.group("orders", "billing").member
    mail = registry.plans.keys.group("mail", "b").member
    s, t = document["s"], document["t"]

    def derived(*place: Any, **more: Any) -> dict[str, Any]:
        return {"n": t + 1, "u": s, "r": {}, "l": None, "d": list(place), **more}

    def logged(queue: str, after: str, **more: Any) -> dict[str, Any]:
        return {"n": t + 1, "u": s, "r": {}, "l": [queue, after], "d": None, **more}

    forged = [
        _forged(cursor, w=derived(member, 0, 5, 2**63)),
        _forged(cursor, w=derived(member, 0, 2**63, 1)),
        _forged(cursor, w=derived(member, 2, 5, 1)),
        _forged(cursor, w=derived("presence:{x", 0, 5, 1)),
        _forged(cursor, w=derived("other:{orders}:billing:c", 0, 5, 1)),
        _forged(of_orders, w=derived(mail, 0, 5, 1)),
        _forged(cursor, w=logged("orders", "", u=10**25)),
        _forged(cursor, w=logged("orders", "", u=2**64)),
        _forged(cursor, w=logged("orders", f"{s}-{2**64}")),
        _forged(of_orders, w=logged("mail", "")),
        _forged(cursor, q={"orders": f"{s}-{2**64}"}),
        _forged(cursor, q={"orders": f"{s}-99999999999999999999"}),
    ]
    for cursor_text in forged:
        with pytest.raises(ValueError, match="cursor"):
            registry.changes(cursor_text, queue=_document(cursor_text)["f"][1])


def test_a_cursor_is_read_as_strictly_as_it_is_written(registry: RedisPresenceRegistry) -> None:
    """docs/protocol.md, section 6: a place is exactly ``ms-seq``, ``v`` an integer, the
    text base64url. What a lenient decoder would take (``ms`` alone or ``ms-``, which XRANGE
    takes; ``2.0`` or ``true`` for a version; characters outside the alphabet, which
    Python's base64 skips unless told to validate) is a `ValueError` naming `cursor`, as the
    Node client refuses it too (clients/node/test/changes.test.mjs)."""
    registry.heartbeat("orders", "billing", "w1")
    _, cursor = registry.changes()
    now = EventCursor.decode(cursor)
    place = f"{now.server_ms}-0"
    assert EventCursor.decode(_forged(cursor, q={"orders": place})).positions == {"orders": place}
    window = {"n": now.now_ns, "u": now.server_ms, "r": {}, "l": ["orders", place], "d": None}
    assert EventCursor.decode(_forged(cursor, w=window)).window is not None
    bad: list[dict[str, Any]] = [
        {"q": {"orders": str(now.server_ms)}},
        {"q": {"orders": f"{now.server_ms}-"}},
        {"q": {"orders": f"-{now.server_ms}"}},
        {"q": {"orders": f"+{now.server_ms}-0"}},
        {"v": 2.0},
        {"v": True},
        {"w": {**window, "l": ["orders", str(now.server_ms)]}},
    ]
    for changes in bad:
        with pytest.raises(ValueError, match="cursor is not one that changes"):
            EventCursor.decode(_forged(cursor, **changes))
    for spoilt in (cursor[:8] + "*" + cursor[8:], cursor[:8] + "\n" + cursor[8:], cursor + "!"):
        with pytest.raises(ValueError, match="cursor is not one that changes"):
            EventCursor.decode(spoilt)

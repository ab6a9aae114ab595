"""An event log entry another program wrote never crashes a reader (issue 30, loose end).

``P:{q}:events`` is a stream anyone with the broker's ACL can ``XADD`` to. Before, a
consumer field with a word among its numbers raised ``ValueError`` out of `changes()`,
`follow()`, a group's history and the web's event feed (500), and a ``g`` that is not a
group of this prefix raised `PresenceDataError` the same way. Now a reader sets such an
entry aside (a consumer field alone when the rest of the entry is sound) with one
`PresenceDataWarning` naming the log and how many it set aside, reads every other entry,
and skips without a word an entry whose kind it does not know (a later version's, as
docs/protocol.md section 6 says). On a real redis-server, the entries added with ``XADD``.
"""

from __future__ import annotations

import asyncio
import itertools
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from web_client import make_client

from redis_presence import (
    AsyncRedisPresenceRegistry,
    EventKind,
    PresenceDataWarning,
    PresenceEvent,
    RedisPresenceRegistry,
)
from redis_presence.keys import Keyspace

pytestmark = [pytest.mark.redis_server, pytest.mark.timeout(60)]

KEYS = Keyspace("presence")
LOG = KEYS.queue_events("q")
G = KEYS.group("q", "g").data
NS = "1796000000000000000"
SOUND = f"{NS} {NS} {NS} 1"

FOREIGN: list[dict[str, str]] = [
    {"k": "joined", "g": G, "cword": f"{NS} {NS} x 1"},  # a word among its numbers
    {"k": "joined", "g": "not-a-group", "cnot": SOUND},  # g: no member of this prefix
    {"k": "left", "g": KEYS.group("other", "g").data, "cother": SOUND},  # another queue's
    {"k": "joined", "g": G, "cthree": f"{NS} {NS} 1"},  # three numbers, not four
    {"k": "recovered", "g": G, "ctwo": f"{NS}  {NS} {NS} 1"},  # two spaces
    {"k": "joined"},  # no group at all
    {"k": "joined", "g": G, "cgood": SOUND, "cbad": "1 2 3 -4"},  # one field of two spoilt
]
"""Entries a client never writes: each set aside (cgood's event is read)."""

LATER: list[dict[str, str]] = [
    {"k": "drained", "g": G, "clater": SOUND},  # a kind of a later version: skipped, unsaid
    {"foo": "bar"},  # no kind at all: likewise
]

T = TypeVar("T")


def warned(read: Callable[[], T]) -> tuple[T, list[str]]:
    """`read()` and the `PresenceDataWarning`s it gave (any other warning fails)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        answer = read()
    assert all(issubclass(w.category, PresenceDataWarning) for w in caught), caught
    return answer, [str(w.message) for w in caught]


def plant(client: Any) -> None:
    for fields in [*FOREIGN, *LATER]:
        client.xadd(LOG, fields)


def seen(events: list[Any]) -> list[tuple[EventKind, str, str]]:
    return sorted((e.kind, e.group, e.consumer) for e in events if isinstance(e, PresenceEvent))


EXPECTED = [(EventKind.JOINED, "g", "b"), (EventKind.JOINED, "g", "good")]


@pytest.fixture
def registry(redis_url: str, redis_client: Any) -> RedisPresenceRegistry:
    return RedisPresenceRegistry(redis_client)


def test_changes_sets_foreign_entries_aside_and_reads_the_rest(
    registry: RedisPresenceRegistry, redis_client: Any
) -> None:
    registry.heartbeat("q", "g", "a")
    _, cursor = registry.changes()
    plant(redis_client)
    registry.heartbeat("q", "g", "b")
    (events, cursor), said = warned(lambda: registry.changes(cursor))
    assert seen(events) == EXPECTED
    assert len(said) == 1, said
    assert said[0].startswith(f"redis-presence set aside {LOG}: 7 entries"), said
    # The cursor went past them: the next read says nothing more.
    (events, _), said = warned(lambda: registry.changes(cursor))
    assert (events, said) == ([], [])
    # Paged (limit 1), every sound event still comes, each foreign entry set aside once.
    _, cursor = registry.changes()
    plant(redis_client)
    registry.heartbeat("q", "g", "c")
    found: list[PresenceEvent] = []
    warnings_seen: list[str] = []
    more = True
    while more:
        page, said = warned(lambda: registry.changes(cursor, limit=1))  # noqa: B023
        found += page.events
        cursor, more = page.cursor, page.more
        warnings_seen += said
    assert seen(found) == [(EventKind.JOINED, "g", "c"), (EventKind.JOINED, "g", "good")]
    assert warnings_seen
    assert all(LOG in w for w in warnings_seen), warnings_seen


def test_follow_goes_on_past_foreign_entries(
    registry: RedisPresenceRegistry, redis_client: Any
) -> None:
    registry.heartbeat("q", "g", "a")
    _, cursor = registry.changes()
    plant(redis_client)
    registry.heartbeat("q", "g", "b")

    def first_events() -> list[Any]:
        stream = registry.follow(cursor=cursor, interval_s=0.01)
        try:
            return list(itertools.islice(stream, 3))  # two events, then a FollowCursor
        finally:
            stream.close()  # type: ignore[attr-defined]

    messages, said = warned(first_events)
    assert seen(messages) == EXPECTED
    assert len(said) == 1, said


def test_async_follow_goes_on_past_foreign_entries(redis_url: str, redis_client: Any) -> None:
    writer = RedisPresenceRegistry(redis_client)
    writer.heartbeat("q", "g", "a")
    _, cursor = writer.changes()
    plant(redis_client)
    writer.heartbeat("q", "g", "b")

    async def run() -> list[Any]:
        reader = AsyncRedisPresenceRegistry.from_url(redis_url)
        stream = reader.follow(cursor=cursor, interval_s=0.01)
        try:
            return [await anext(stream) for _ in range(3)]
        finally:
            await stream.aclose()  # type: ignore[attr-defined]
            await reader.aclose()

    messages, said = warned(lambda: asyncio.run(run()))
    assert seen(messages) == EXPECTED
    assert len(said) == 1, said


def test_a_groups_history_sets_foreign_entries_aside(
    registry: RedisPresenceRegistry, redis_client: Any
) -> None:
    registry.heartbeat("q", "g", "a")
    plant(redis_client)
    registry.heartbeat("q", "g", "b")
    plan = registry.plans.group_logs([("q", "g")], since_ns=0)
    (log,), said = warned(lambda: registry.execute(plan))
    assert sorted(e.consumer for e in log.logged) == ["a", "b", "good"]
    assert len(said) == 1, said
    assert said[0].startswith(f"redis-presence set aside {LOG}: "), said


def test_the_web_feed_and_history_answer_past_foreign_entries(
    redis_url: str, redis_client: Any
) -> None:
    writer = RedisPresenceRegistry(redis_client)
    writer.heartbeat("q", "g", "a")
    _, cursor = writer.changes()
    plant(redis_client)
    writer.heartbeat("q", "g", "b")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PresenceDataWarning)  # the service's own log
        with make_client(redis_url, ttl_ms=None) as web:
            events = web.get("/api/v1/events", params={"cursor": cursor})
            assert events.status_code == 200, events.text
            got = sorted((e["kind"], e["consumer"]) for e in events.json()["events"])
            assert got == [("joined", "b"), ("joined", "good")]
            page = web.get("/group", params={"queue": "q", "group": "g"})
            assert page.status_code == 200, page.text[:300]

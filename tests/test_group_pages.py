"""Pages of groups cost what they show (issue 24 item 1), against a real redis-server.

`group_page` reads the index of groups from a cursor and counts only the groups it shows:
every page size walks to the same list as `groups()` (in the index's order), both ways;
cursors hold when groups come and go between pages; the web routes page the same way, and
a first page of 50 of 2,000 groups counts about 50 groups (the server's SLOWLOG, with a
threshold of 0, lists every command it ran).
"""

from __future__ import annotations

from typing import Any

import pytest
import redis
from test_bounded import logged

from redis_presence import GroupPresence, RedisPresenceRegistry
from redis_presence.plans import Limits

MS = 1_000_000
T0 = 1_796_000_000_000 * MS
TTL = 10_000
# Queues that extend one another ("a", "ab"), names that percent-encode, declared groups
# without consumers (one before, one among and one after the tracked ones).
QUEUES = ("a", "ab", "a b", "é", "z~")
DECLARED = {("a", "0-declared"): 2, ("ab", "m-declared"): 1, ("zz", "only"): 3, ("a", "g1"): 5}


def fill(registry: RedisPresenceRegistry) -> None:
    beats = [(q, f"g{g}", f"c{c}", 0) for q in QUEUES for g in range(4) for c in range(g + 1)]
    registry.heartbeat_many(beats, now_ns=T0)
    registry.heartbeat_many(
        [("a", "g2", "late", 0), ("é", "g3", "late", 0)], now_ns=T0 - 15 * TTL * MS // 10
    )
    registry.heartbeat_many([("ab", "g0", "gone", 0)], now_ns=T0 - 3 * TTL * MS)
    for (queue, group), least in DECLARED.items():
        registry.expect(queue, group, least)


def ordered(registry: RedisPresenceRegistry, groups: list[GroupPresence]) -> list[GroupPresence]:
    return sorted(groups, key=lambda g: registry.plans.group_order(g.queue, g.group))


@pytest.fixture
def small(redis_client: redis.Redis) -> RedisPresenceRegistry:
    """A registry reading the index 3 groups a command (pages cross index pages)."""
    registry = RedisPresenceRegistry(redis_client, limits=Limits(groups=3, consumers=2))
    fill(registry)
    return registry


def walk(registry: RedisPresenceRegistry, limit: int, **options: Any) -> list[list[GroupPresence]]:
    pages, after = [], None
    while True:
        page = registry.group_page(after=after, limit=limit, now_ns=T0, ttl_ms=TTL, **options)
        pages.append(page.groups)
        if not page.more:
            return pages
        after = page.groups[-1].key


def walk_back(registry: RedisPresenceRegistry, limit: int, **options: Any) -> list[GroupPresence]:
    out: list[GroupPresence] = []
    before = ("~" * 8, "~")  # after every group in the index's order ("~" encodes as itself)
    while True:
        page = registry.group_page(before=before, limit=limit, now_ns=T0, ttl_ms=TTL, **options)
        out = page.groups + out
        if not page.more:
            return out
        before = page.groups[0].key


def test_every_page_size_walks_to_the_groups_both_ways(small: RedisPresenceRegistry) -> None:
    everything = ordered(small, small.groups(now_ns=T0, ttl_ms=TTL))
    assert len(everything) == len(QUEUES) * 4 + 3  # ("a", "g1") is tracked and declared
    for limit in range(1, len(everything) + 2):
        pages = walk(small, limit)
        assert [g for page in pages for g in page] == everything, limit
        assert all(len(page) == limit for page in pages[:-1]), limit
        assert walk_back(small, limit) == everything, limit


@pytest.mark.parametrize(
    ("options", "keep"),
    [
        ({"queue": "a"}, lambda g: g.queue == "a"),
        ({"queue": "zz"}, lambda g: g.queue == "zz"),
        ({"names": lambda q, g: "2" in g}, lambda g: "2" in g.group),
        ({"match": lambda g: g.stale > 0}, lambda g: g.stale > 0),
        ({"match": lambda g: g.active == 0 or g.below}, lambda g: g.active == 0 or g.below),
        (
            {"queue": "ab", "match": lambda g: g.expired > 0},
            lambda g: g.queue == "ab" and g.expired,
        ),
    ],
)
def test_filters_pick_what_the_whole_list_holds(
    small: RedisPresenceRegistry, options: dict[str, Any], keep: Any
) -> None:
    wanted = [g for g in ordered(small, small.groups(now_ns=T0, ttl_ms=TTL)) if keep(g)]
    assert wanted or options.get("queue") == "nothing"
    for limit in (1, 2, 5, 100):
        assert [g for page in walk(small, limit, **options) for g in page] == wanted
        assert walk_back(small, limit, **options) == wanted


def test_cursors_hold_while_groups_come_and_go(small: RedisPresenceRegistry) -> None:
    first = small.group_page(limit=6, now_ns=T0, ttl_ms=TTL)
    cursor = first.groups[-1]
    order = small.plans.group_order
    before_it = [
        g for g in small.groups(now_ns=T0, ttl_ms=TTL) if order(*g.key) < order(*cursor.key)
    ]
    # Meanwhile: a group joins before the cursor and one after it; one after it leaves; the
    # cursor's own group leaves.
    small.heartbeat_many([("a b", "0-new", "c", 0), ("z~", "zz-new", "c", 0)], now_ns=T0)
    leaving = small.group_page(after=cursor.key, limit=1, now_ns=T0, ttl_ms=TTL).groups[0]
    for row in small.snapshot(now_ns=T0, queue=leaving.queue, group=leaving.group):
        small.deregister(row.queue, row.group, row.consumer)
    for row in small.snapshot(now_ns=T0, queue=cursor.queue, group=cursor.group):
        small.deregister(row.queue, row.group, row.consumer)
    rest = [g for page in walk_from(small, cursor.key, 4) for g in page]
    now = ordered(small, small.groups(now_ns=T0, ttl_ms=TTL))
    assert rest == [g for g in now if order(*g.key) > order(*cursor.key)]
    assert ("z~", "zz-new") in [g.key for g in rest]
    assert leaving.key not in [g.key for g in rest] or leaving.declared
    assert order("a b", "0-new") < order(*cursor.key)  # before the cursor: not on later pages
    assert ("a b", "0-new") not in [g.key for g in rest]
    assert {g.key for g in before_it} <= {g.key for g in now} | {cursor.key}


def walk_from(
    registry: RedisPresenceRegistry, after: tuple[str, str], limit: int
) -> list[list[GroupPresence]]:
    pages = []
    while True:
        page = registry.group_page(after=after, limit=limit, now_ns=T0, ttl_ms=TTL)
        pages.append(page.groups)
        if not page.more:
            return pages
        after = page.groups[-1].key


def test_bad_arguments_are_refused(small: RedisPresenceRegistry) -> None:
    with pytest.raises(ValueError, match="not both"):
        small.group_page(after=("a", "b"), before=("a", "c"))
    with pytest.raises(ValueError, match="limit"):
        small.group_page(limit=0)
    with pytest.raises(ValueError, match="queue"):
        small.group_page(after=("", "b"))


FLEET_GROUPS = 2_000


def test_a_first_page_counts_the_groups_it_shows(redis_client: redis.Redis) -> None:
    """2,000 groups: a page of 50 sends one index read and counts 51 groups (the one past
    the page says whether there is a next page); `groups()` counts all 2,000."""
    registry = RedisPresenceRegistry(redis_client)
    beats = [
        (f"q{g % 40:02d}", f"g{g:04d}", f"c{c}", 0) for g in range(FLEET_GROUPS) for c in range(3)
    ]
    registry.heartbeat_many(beats, now_ns=T0)
    redis_client.config_set("slowlog-max-len", 100_000)
    redis_client.config_set("slowlog-log-slower-than", 0)
    try:
        redis_client.slowlog_reset()
        page = registry.group_page(limit=50, now_ns=T0, ttl_ms=TTL)
        paged = [c for c in logged(redis_client) if c.args[0].upper() not in ("SLOWLOG", "CONFIG")]
        redis_client.slowlog_reset()
        everything = registry.groups(now_ns=T0, ttl_ms=TTL)
        whole = [c for c in logged(redis_client) if c.args[0].upper() not in ("SLOWLOG", "CONFIG")]
    finally:
        redis_client.config_set("slowlog-log-slower-than", 10_000)
    assert len(page.groups) == 50
    assert page.more
    assert page.groups == ordered(registry, everything)[:50]

    def tally(commands: list[Any], name: str) -> int:
        return sum(c.args[0].upper() == name for c in commands)

    assert tally(paged, "ZCARD") == 51
    assert tally(paged, "ZRANGEBYLEX") == 2  # the declared groups, then one index page
    assert tally(whole, "ZCARD") == FLEET_GROUPS
    assert len(paged) * 30 < len(whole)

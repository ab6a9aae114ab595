"""Pages of groups cost what they show (issue 24 item 1), against a real redis-server.

`group_page` reads the index of groups from a cursor and counts only the groups it shows:
every page size walks to the same list as `groups()` (in the index's order), both ways;
cursors hold when groups come and go between pages; the web routes page the same way, and
a first page of 50 of 2,000 groups counts about 50 groups (the server's SLOWLOG, with a
threshold of 0, lists every command it ran).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from test_bounded import logged

from redis_presence import GroupPresence, GroupsPage, RedisPresenceRegistry
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


# -- the routes -------------------------------------------------------------------------------


def api_walk(client: Any, path: str, limit: int, **params: Any) -> list[tuple[str, str]]:
    """Every group `path` lists, following `next_cursor`; each page checked as it goes."""
    found: list[tuple[str, str]] = []
    cursor = None
    while True:
        query = {**params, "limit": str(limit)} | ({"cursor": cursor} if cursor else {})
        body = client.get(path, params=query, headers={"Accept": "application/json"}).json()
        found += [(g["queue"], g["group"]) for g in body["groups"]]
        assert len(body["groups"]) <= limit
        if body["next_cursor"] is None:
            return found
        assert len(body["groups"]) == limit
        cursor = body["next_cursor"]


@pytest.fixture
def web(redis_url: str, redis_client: redis.Redis) -> Iterator[Any]:
    from web_client import Clock, make_client

    fill(RedisPresenceRegistry(redis_client))
    with make_client(redis_url, Clock(T0), ttl_ms=TTL) as client:
        yield client


def test_the_routes_page_through_every_group_for_every_page_size(
    web: Any, redis_client: redis.Redis
) -> None:
    registry = RedisPresenceRegistry(redis_client)
    everything = ordered(registry, registry.groups(now_ns=T0, ttl_ms=TTL))
    keys = [g.key for g in everything]
    for limit in range(1, len(keys) + 1):
        assert api_walk(web, "/api/v1/groups", limit) == keys, limit
        assert api_walk(web, "/", limit, sort="queue") == keys, limit
        first = api_walk(web, "/", limit)  # attention first: every group once, reordered
        assert sorted(first) == sorted(keys), limit
        assert len(first) == len(keys), limit

    # Back from the last page to the first, by prev_cursor.
    def get(cursor: str | None) -> Any:
        return web.get("/api/v1/groups", params={"limit": "4", "cursor": cursor or ""}).json()

    body = get(None)
    first = body["groups"]
    while body["next_cursor"]:
        body = get(body["next_cursor"])
    walked = [(g["queue"], g["group"]) for g in body["groups"]]
    while body["prev_cursor"]:
        body = get(body["prev_cursor"])
        walked = [(g["queue"], g["group"]) for g in body["groups"]] + walked
    assert walked == keys
    assert body["groups"] == first  # the first page, prev_cursor null


@pytest.mark.parametrize(
    ("params", "keep"),
    [
        ({"state": "stale"}, lambda g: g.stale > 0),
        ({"state": "expired,stale"}, lambda g: g.stale > 0 or g.expired > 0),
        ({"idle": "1"}, lambda g: g.active == 0 or g.below),
        ({"queue": "A"}, lambda g: "a" in g.queue),
        ({"group": "DECL", "queue": "a"}, lambda g: "decl" in g.group and "a" in g.queue),
    ],
)
def test_the_dashboard_filters_pick_what_the_whole_list_holds(
    web: Any, redis_client: redis.Redis, params: dict[str, str], keep: Any
) -> None:
    registry = RedisPresenceRegistry(redis_client)
    wanted = [g.key for g in ordered(registry, registry.groups(now_ns=T0, ttl_ms=TTL)) if keep(g)]
    assert wanted
    for limit in (1, 3, 200):
        assert api_walk(web, "/", limit, sort="queue", **params) == wanted
        first = api_walk(web, "/", limit, **params)  # attention first: the same groups
        assert sorted(first) == sorted(wanted)
        assert len(first) == len(wanted)


def test_the_api_filters_exactly_and_totals_cover_every_group(web: Any) -> None:
    assert api_walk(web, "/api/v1/groups", 2, queue="a") == [
        ("a", g) for g in ("0-declared", "g0", "g1", "g2", "g3")
    ]
    assert api_walk(web, "/api/v1/groups", 2, queue="a", group="g2") == [("a", "g2")]
    assert api_walk(web, "/api/v1/groups", 2, queue="nowhere") == []
    totals = web.get("/", params={"limit": "1"}, headers={"Accept": "application/json"}).json()
    assert totals["totals"] == {
        "groups": 23,
        "active": sum(g + 1 for g in range(4)) * len(QUEUES),
        "stale": 2,
        "expired": 1,
        "nobody_reading": 3,
        "below": 4,
        "read_at_ns": T0,
        "stuck": 0,
        "stuck_read_at_ns": T0,
        "leases": 0,
        "leases_expired": 0,
        "dead_leases_groups": 0,
    }


@pytest.mark.parametrize(
    "cursor",
    [
        "x",
        "W10",  # []
        # A consumer cursor of names no group has: an empty queue, a 600-byte group.
        "WyJhIiwgIiIsICJnIiwgIiJd",
        None,
    ],
)
def test_bad_group_cursors_are_400s(web: Any, cursor: str | None) -> None:
    import base64
    import json

    if cursor is None:
        raw = json.dumps(["a", "q", "g" * 600, ""]).encode()
        cursor = base64.urlsafe_b64encode(raw).decode().rstrip("=")
    for path in ("/api/v1/groups", "/"):
        response = web.get(path, params={"cursor": cursor}, headers={"Accept": "application/json"})
        assert response.status_code == 400, (path, response.text)
        assert response.json()["parameter"] == "cursor"


def test_route_cursors_hold_while_groups_come_and_go(web: Any, redis_client: redis.Redis) -> None:
    registry = RedisPresenceRegistry(redis_client)
    order = registry.plans.group_order
    body = web.get("/api/v1/groups", params={"limit": "5"}).json()
    seen = [(g["queue"], g["group"]) for g in body["groups"]]
    cursor_key = seen[-1]
    registry.heartbeat_many([("a b", "0-new", "c", 0), ("z~", "zz-new", "c", 0)], now_ns=T0)
    for row in registry.snapshot(now_ns=T0, queue="é"):
        registry.deregister(row.queue, row.group, row.consumer)
    while body["next_cursor"]:
        body = web.get("/api/v1/groups", params={"limit": "5", "cursor": body["next_cursor"]})
        body = body.json()
        seen += [(g["queue"], g["group"]) for g in body["groups"]]
    assert len(seen) == len(set(seen))  # nothing twice
    now = [g.key for g in ordered(registry, registry.groups(now_ns=T0, ttl_ms=TTL))]
    assert seen[5:] == [key for key in now if order(*key) > order(*cursor_key)]
    assert ("z~", "zz-new") in seen
    assert not any(q == "é" for q, _ in seen[5:])


def commandstats(client: redis.Redis, name: str) -> int:
    stats: dict[str, Any] = client.info("commandstats")
    return int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))


def test_a_dashboard_page_counts_its_groups_while_the_totals_are_fresh(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """2,000 groups: the first page reads the totals (every group) once; the next pages,
    while the totals are fresh, count their 50 groups and the two indexes' sizes (attention
    first: picked from the totals, which must still hold every group) or their 50 and one
    more (``sort=queue``: the index's order), INFO commandstats."""
    from web_client import Clock, make_client

    registry = RedisPresenceRegistry(redis_client)
    beats = [(f"q{g % 40:02d}", f"g{g:04d}", "c", 0) for g in range(FLEET_GROUPS)]
    registry.heartbeat_many(beats, now_ns=T0)
    with make_client(redis_url, Clock(T0), ttl_ms=TTL, totals_cache_s=3600.0) as client:
        json = {"Accept": "application/json"}
        before = commandstats(redis_client, "zcard")
        first = client.get("/", params={"limit": "50"}, headers=json).json()
        assert commandstats(redis_client, "zcard") - before == FLEET_GROUPS + 50 + 2 * 2
        assert first["totals"]["groups"] == FLEET_GROUPS
        for order, counted in (("attention", 50 + 2), ("queue", 51)):
            page = client.get("/", params={"limit": "50", "sort": order}, headers=json).json()
            for _ in range(3):
                before = commandstats(redis_client, "zcard")
                query = {"limit": "50", "sort": order, "cursor": page["next_cursor"]}
                page = client.get("/", params=query, headers=json).json()
                assert commandstats(redis_client, "zcard") - before == counted, order
                assert len(page["groups"]) == 50
        before = commandstats(redis_client, "zcard")
        client.get("/api/v1/groups", params={"limit": "100"})
        assert commandstats(redis_client, "zcard") - before == 101


def test_a_fleet_wide_consumer_page_reads_the_index_not_every_group(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """2,000 groups: a first page of 50 consumers of the whole fleet lists the groups from
    the index (20 pages of 100) and reads the groups it shows; no group is counted."""
    from web_client import Clock, make_client

    registry = RedisPresenceRegistry(redis_client)
    beats = [
        (f"q{g % 40:02d}", f"g{g:04d}", f"c{c}", 0) for g in range(FLEET_GROUPS) for c in (1, 2)
    ]
    registry.heartbeat_many(beats, now_ns=T0)
    everything = registry.snapshot(now_ns=T0, ttl_ms=TTL)
    with make_client(redis_url, Clock(T0), ttl_ms=TTL) as client:
        before = {name: commandstats(redis_client, name) for name in ("zcard", "zrangebylex")}
        page = client.get("/api/v1/consumers", params={"limit": "50"}).json()
        assert commandstats(redis_client, "zcard") == before["zcard"]
        assert commandstats(redis_client, "zrangebylex") - before["zrangebylex"] == 21
        assert [c["consumer"] for c in page["consumers"]] == [r.consumer for r in everything[:50]]
        nxt = client.get("/api/v1/consumers", params={"limit": "50", "cursor": page["next_cursor"]})
        assert [c["consumer"] for c in nxt.json()["consumers"]] == [
            r.consumer for r in everything[50:100]
        ]


def test_a_member_this_package_did_not_write_is_set_aside(small: RedisPresenceRegistry) -> None:
    """A foreign member of the index of groups is set aside (a warning), not a failed page,
    as `groups()` sets it aside."""
    from redis_presence.errors import PresenceDataWarning

    small.client.zadd(small.plans.keys.groups, {"presence:{a}:not-ours": 0})
    with pytest.warns(PresenceDataWarning, match="not-ours"):
        everything = ordered(small, small.groups(now_ns=T0, ttl_ms=TTL))
    with pytest.warns(PresenceDataWarning, match="not-ours"):
        pages = walk(small, 4)
    assert [g for page in pages for g in page] == everything
    tracked = sorted(g.key for g in everything if g.active + g.stale + g.expired)
    with pytest.warns(PresenceDataWarning, match="not-ours"):
        names = small.group_names()
    assert names == tracked


def test_a_page_and_its_groups_are_json_ready() -> None:
    group = GroupPresence.of("orders", "billing", 2, 1, 0, 3)
    assert group.to_dict()["below"] is True
    assert GroupsPage([group], True).to_dict() == {"groups": [group._asdict()], "more": True}

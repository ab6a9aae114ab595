"""The overview's attention order and leases as a fleet signal (issue 34 items 1 and 3),
against a real redis-server over Starlette's test client: the groups that need a look
first (STOPPED, STALLED, DEGRADED; within each, leases held by expired consumers first),
`sort=queue` the index's order, keyset pages both ways, leases per group and in total, the
``dead_leases=1`` filter on the page and its API twin, and the cards' links.

Consumers registered 10 minutes before the app's clock and beating at it with leases and no
progress are stuck (the default budget is 5 minutes); one that beat 10 minutes ago only is
expired (the TTL is a minute)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from web_client import MS, T0, Clock, TestClient, make_client

from redis_presence import RedisPresenceRegistry

pytestmark = pytest.mark.redis_server

JSON = {"Accept": "application/json"}
TTL = 60_000
AGO_10_MIN = T0 - 600_000 * MS
# (queue, group) -> (declared minimum, its consumers: (name, leases, how it beats))
FLEET: dict[tuple[str, str], tuple[int | None, list[tuple[str, int, str]]]] = {
    ("a", "dead"): (None, [("ok", 1, "progress"), ("gone", 3, "expired")]),  # OK, dead leases
    ("a", "ok"): (None, [("ok", 2, "progress")]),  # OK
    ("b", "declared"): (2, []),  # STOPPED: declared, nobody
    ("b", "stopped"): (None, [("gone", 2, "expired")]),  # STOPPED, dead leases
    ("c", "below"): (3, [("ok", 0, "progress")]),  # DEGRADED: below its minimum
    ("c", "stalled"): (None, [("hung", 4, "stuck")]),  # STALLED
    ("d", "fine"): (None, [("x", 0, "progress"), ("y", 1, "progress")]),  # OK
}
ATTENTION_FIRST = [
    ("b", "stopped"),  # STOPPED with dead leases
    ("b", "declared"),  # STOPPED
    ("c", "stalled"),  # STALLED
    ("c", "below"),  # DEGRADED
    ("a", "dead"),  # OK, but its expired consumer holds leases
    ("a", "ok"),
    ("d", "fine"),
]
LEASES = {
    ("a", "dead"): 4,
    ("a", "ok"): 2,
    ("b", "stopped"): 2,
    ("c", "stalled"): 4,
    ("d", "fine"): 1,
}
DEAD = {("a", "dead"): 3, ("b", "stopped"): 2}


def fill(registry: RedisPresenceRegistry) -> None:
    for (queue, group), (minimum, consumers) in FLEET.items():
        if minimum is not None:
            registry.expect(queue, group, minimum)
        for name, leases, how in consumers:
            registry.heartbeat(queue, group, name, leases, now_ns=AGO_10_MIN)
            if how != "expired":
                progressed = how == "progress"
                registry.heartbeat(queue, group, name, leases, now_ns=T0, progressed=progressed)


@pytest.fixture
def web(redis_url: str) -> Iterator[TestClient]:
    writer = RedisPresenceRegistry.from_url(redis_url, max_future_ms=None)
    try:
        fill(writer)
    finally:
        writer.close()
    with make_client(redis_url, Clock(T0), ttl_ms=TTL) as client:
        yield client


def walk(web: TestClient, path: str, limit: int, **params: str) -> list[dict[str, Any]]:
    """Every group of a list, page after page (`next_cursor`), then back by `prev_cursor`
    to the first page, which must give the same pages."""
    found, cursor = [], None
    while True:
        query = params | {"limit": str(limit), "cursor": cursor or ""}
        body = web.get(path, params=query, headers=JSON)
        assert body.status_code == 200, body.text
        model = body.json()
        assert len(model["groups"]) <= limit
        found += model["groups"]
        if model["next_cursor"] is None:
            break
        cursor = model["next_cursor"]
    back, walked = model["prev_cursor"], list(model["groups"])
    while back is not None:
        query = params | {"limit": str(limit), "cursor": back}
        model = web.get(path, params=query, headers=JSON).json()
        walked = model["groups"] + walked
        back = model["prev_cursor"]
    assert walked == found, (path, limit, params)
    return found


def keys(groups: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(g["queue"], g["group"]) for g in groups]


@pytest.mark.parametrize("limit", [1, 2, 3, 50])
def test_the_overview_lists_the_groups_that_need_a_look_first(web: TestClient, limit: int) -> None:
    assert keys(walk(web, "/", limit)) == ATTENTION_FIRST
    assert keys(walk(web, "/", limit, sort="attention")) == ATTENTION_FIRST
    assert keys(walk(web, "/", limit, sort="queue")) == sorted(ATTENTION_FIRST)
    # Filters keep the order: only queue c's groups, the stalled one first.
    assert keys(walk(web, "/", limit, queue="c")) == [("c", "stalled"), ("c", "below")]


def test_verdicts_leases_and_stuck_come_with_each_row(web: TestClient) -> None:
    groups = {(g["queue"], g["group"]): g for g in walk(web, "/", 50)}
    verdicts = {k: g["verdict"] for k, g in groups.items()}
    assert verdicts == {
        ("a", "dead"): "OK",
        ("a", "ok"): "OK",
        ("b", "declared"): "STOPPED",
        ("b", "stopped"): "STOPPED",
        ("c", "below"): "DEGRADED",
        ("c", "stalled"): "STALLED",
        ("d", "fine"): "OK",
    }
    assert {k: g["leases"] for k, g in groups.items() if g["leases"]} == LEASES
    assert {k: g["leases_expired"] for k, g in groups.items() if g["leases_expired"]} == DEAD


def test_lease_totals_are_counted_with_the_stuck_consumers(web: TestClient) -> None:
    totals = web.get("/", headers=JSON).json()["totals"]
    assert totals["leases"] == sum(LEASES.values()) == 13
    assert totals["leases_expired"] == sum(DEAD.values()) == 5
    assert totals["dead_leases_groups"] == 2
    assert totals["stuck"] == 1


@pytest.mark.parametrize("path", ["/", "/api/v1/groups"])
@pytest.mark.parametrize("limit", [1, 5])
def test_dead_leases_lists_the_groups_whose_expired_consumers_hold_leases(
    web: TestClient, path: str, limit: int
) -> None:
    found = walk(web, path, limit, dead_leases="1", **({"sort": "queue"} if path == "/" else {}))
    assert keys(found) == sorted(DEAD)  # the index's order
    if path == "/":  # the page's default: the STOPPED one first
        first = walk(web, path, limit, dead_leases="1")
        assert keys(first) == [("b", "stopped"), ("a", "dead")]
    assert {(g["queue"], g["group"]): g["leases_expired"] for g in found} == DEAD
    contains = "queue" if path == "/" else "queue_contains"
    both = walk(web, path, limit, dead_leases="1", **{contains: "B"})
    assert keys(both) == [("b", "stopped")]


def test_leases_sort_over_every_group(web: TestClient) -> None:
    most = keys(walk(web, "/", 2, sort="-leases"))
    assert most[:2] == [("a", "dead"), ("c", "stalled")]  # 4 each, ties by name
    assert keys(walk(web, "/", 2, sort="-dead_leases"))[:2] == [("a", "dead"), ("b", "stopped")]
    dead_sorted = keys(walk(web, "/", 1, sort="dead_leases", dead_leases="1"))
    assert dead_sorted == [("b", "stopped"), ("a", "dead")]


def test_each_red_card_links_to_its_filter(web: TestClient) -> None:
    html = web.get("/").text
    for query, label in [
        ("idle=1", "nobody reading"),
        ("idle=1", "groups below minimum"),
        ("stuck=1", "stuck consumers"),
        ("dead_leases=1", "leases held by expired consumers"),
    ]:
        assert f'/?{query}">{label}</a>' in html, label
    assert 'data-total="leases_expired"' in html
    assert 'data-total="leases"' in html
    # The headers: Leases and Dead leases sort over every group; Verdict is the default.
    assert 'href="?sort=-leases">Leases</a>' in html
    assert 'href="?sort=-dead_leases">Dead leases</a>' in html
    assert 'aria-sort="other"><a class="sort" href="?"' in html
    assert 'href="?sort=queue">Queue</a>' in html
    assert '<input type="hidden" name="sort"' not in html  # the default needs none
    by_queue = web.get("/?sort=queue").text
    assert '<input type="hidden" name="sort" value="queue">' in by_queue


@pytest.mark.parametrize("query", ["sort=-attention", "sort=leases-", "dead_leases=2"])
def test_a_bad_value_is_a_400_naming_it(web: TestClient, query: str) -> None:
    response = web.get(f"/?{query}", headers=JSON)
    assert response.status_code == 400
    assert response.json()["parameter"] == query.split("=", maxsplit=1)[0]


def test_a_page_picked_from_cached_totals_shows_a_group_that_came_since(redis_url: str) -> None:
    """The totals are cached for an hour; one group goes and another comes, which nobody
    reads (the indexes' sizes unchanged, and the page's group still there): the next first
    page shows the new one first, not the totals' old order, because its walk of the index
    passed a group the totals do not hold (and they are read again)."""
    writer = RedisPresenceRegistry.from_url(redis_url, max_future_ms=None)
    try:
        writer.heartbeat("q", "a", "c", now_ns=T0)
        writer.heartbeat("q", "b", "c", now_ns=T0)
        with make_client(redis_url, Clock(T0), ttl_ms=TTL, totals_cache_s=3600.0) as web:
            first = web.get("/?limit=1", headers=JSON).json()
            assert keys(first["groups"]) == [("q", "a")]
            writer.deregister("q", "b", "c")
            writer.heartbeat("q", "c", "gone", now_ns=AGO_10_MIN)  # expired: STOPPED
            model = web.get("/?limit=1", headers=JSON).json()
            assert keys(model["groups"]) == [("q", "c")]
            assert model["totals"]["nobody_reading"] == 1
    finally:
        writer.close()

"""Stuck consumers findable in the web service, a strict API, and papercuts (issue 34
items 2, 8 and 9), against a real redis-server over Starlette's test client.

A consumer is stuck when it is active, holds leases and made no progress within its
group's progress budget (`is_stuck`): here, consumers registered 10 minutes before the
app's clock, beating at it with leases and no progress (the default budget is 5 minutes).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from web_client import MS, T0, Clock, TestClient, group_path, make_client

from redis_presence import RedisPresenceRegistry
from redis_presence.web.params import QUERY, SHOWN_ONLY

pytestmark = pytest.mark.redis_server

JSON = {"Accept": "application/json"}
TTL = 60_000
AGO_10_MIN = T0 - 600_000 * MS
# (queue, group) -> its consumers: (name, leases, progressed at the clock's instant)
FLEET: dict[tuple[str, str], list[tuple[str, int, bool]]] = {
    ("a", "g0"): [("ok", 2, True)],
    ("a", "g1"): [("stuck-1", 3, False), ("idle", 0, False)],
    ("a", "g2"): [],  # declared only
    ("b", "g0"): [("stuck-2", 1, False), ("stuck-3", 4, False), ("busy", 5, True)],
    ("b", "g1"): [("gone", 2, False)],  # expired: not stuck
    ("c", "g0"): [("stuck-4", 1, False)],
}
STUCK = {("a", "g1"): 1, ("b", "g0"): 2, ("c", "g0"): 1}


def fill(registry: RedisPresenceRegistry) -> None:
    for (queue, group), consumers in FLEET.items():
        if not consumers:
            registry.expect(queue, group, 1)
        for name, leases, progressed in consumers:
            registry.heartbeat(queue, group, name, leases, now_ns=AGO_10_MIN)
            if name == "gone":
                continue  # its last beat 10 minutes ago: expired
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
    """Every group of a list, page after page (`next_cursor`), then checked back by
    `prev_cursor` to the first page."""
    found, cursor, pages = [], None, []
    while True:
        body = web.get(path, params=params | {"limit": str(limit), "cursor": cursor or ""})
        assert body.status_code == 200, body.text
        model = body.json()
        pages.append(model["groups"])
        found += model["groups"]
        if model["next_cursor"] is None:
            break
        cursor = model["next_cursor"]
    back = model["prev_cursor"]
    walked = list(model["groups"])
    while back is not None:
        model = web.get(path, params=params | {"limit": str(limit), "cursor": back}).json()
        walked = model["groups"] + walked
        back = model["prev_cursor"]
    assert walked == found, (path, limit)
    return found


# -- item 2: stuck, findable --------------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/v1/groups", "/"])
@pytest.mark.parametrize("limit", [1, 2, 200])
def test_stuck_groups_page_through_exactly_the_groups_with_a_stuck_consumer(
    web: TestClient, path: str, limit: int
) -> None:
    headers = JSON if path == "/" else {}
    web.headers.update(headers)
    order = {"sort": "queue"} if path == "/" else {}  # the page's default: attention first
    groups = walk(web, path, limit, stuck="1", **order)
    assert {(g["queue"], g["group"]): g["stuck"] for g in groups} == STUCK
    assert [(g["queue"], g["group"]) for g in groups] == sorted(STUCK)
    if path == "/":  # STALLED (every active one stuck), then DEGRADED, by name
        first = walk(web, path, limit, stuck="1")
        assert [(g["queue"], g["group"]) for g in first] == [("c", "g0"), ("a", "g1"), ("b", "g0")]


def test_stuck_combines_with_the_other_group_filters(web: TestClient) -> None:
    groups = walk(web, "/api/v1/groups", 1, stuck="1", queue_contains="B")
    assert [(g["queue"], g["group"], g["stuck"]) for g in groups] == [("b", "g0", 2)]
    assert walk(web, "/api/v1/groups", 5, stuck="1", queue="a") == [
        {"queue": "a", "group": "g1", "active": 2, "stale": 0, "expired": 0}
        | {"min_active": None, "below": False, "stuck": 1}
        | {"verdict": "DEGRADED", "reason": "1 of 2 active stuck"}
        | {"leases": None, "leases_expired": None}
        | {"capacity": None, "free": None, "draining": None, "conflicts": None}
    ]
    idle = walk(web, "/api/v1/groups", 5, idle="1")
    assert [(g["queue"], g["group"]) for g in idle] == [("a", "g2"), ("b", "g1")]
    stale_or_expired = walk(web, "/api/v1/groups", 5, state="expired")
    assert [(g["queue"], g["group"]) for g in stale_or_expired] == [("b", "g1")]


def test_the_overview_counts_stuck_per_group_and_in_total(web: TestClient) -> None:
    twin = web.get("/", headers=JSON).json()
    assert twin["totals"]["stuck"] == sum(STUCK.values())
    counts = {(g["queue"], g["group"]): g["stuck"] for g in twin["groups"]}
    assert counts == {key: STUCK.get(key, 0) for key in FLEET}
    # /api/v1/groups counts them only when asked (a read of consumers): null otherwise.
    plain = web.get("/api/v1/groups").json()["groups"]
    assert {g["stuck"] for g in plain} == {None}

    page = web.get("/").text
    assert 'data-total="stuck"' in page
    assert f'<span class="n">{sum(STUCK.values())}</span>' in page
    assert 'href="/?stuck=1">stuck consumers</a>' in page
    assert 'group=g0&amp;stuck=1">2</a>' in page  # b/g0's count links to its stuck ones


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/api/v1/consumers", {}),
        ("/consumers", {}),
        ("/api/v1/consumers", {"queue": "b"}),
        ("/consumers", {"search": "stuck"}),
    ],
)
def test_stuck_consumers_are_listed_alone(
    web: TestClient, path: str, params: dict[str, str]
) -> None:
    for limit in ("1", "100"):
        names, cursor = [], ""
        while True:
            query = params | {"stuck": "1", "limit": limit, "cursor": cursor}
            body = web.get(path, params=query, headers=JSON).json()
            names += [row["consumer"] for row in body["consumers"]]
            assert all(row["stuck"] for row in body["consumers"])
            if body["next_cursor"] is None:
                break
            cursor = body["next_cursor"]
        expected = [
            name
            for (queue, _), consumers in sorted(FLEET.items())
            for name, _, _ in consumers
            if name.startswith("stuck") and params.get("queue", queue) == queue
        ]
        assert names == expected, limit


def test_a_group_page_shows_its_stuck_consumers_and_for_how_long(web: TestClient) -> None:
    one = web.get(group_path("b", "g0"), params={"stuck": "1"}).json()
    assert [row["consumer"] for row in one["consumers"]] == ["stuck-2", "stuck-3"]
    assert one["group"]["stuck"] == 2
    page = web.get("/group", params={"queue": "b", "group": "g0"}).text
    assert page.count("no progress for 10 min") == 2  # registered 10 minutes before, none since
    assert 'data-total="stuck"><span class="n">2</span>' in page
    only = web.get("/group", params={"queue": "b", "group": "g0", "stuck": "1"}).text
    table = only.partition('id="consumers"')[2].partition("</table>")[0]
    assert "stuck-2" in table
    assert "busy" not in table
    assert 'name="stuck" value="1" checked' in only


def test_the_consumer_page_says_how_long_without_progress(web: TestClient) -> None:
    page = web.get("/consumer", params={"queue": "c", "group": "g0", "consumer": "stuck-4"}).text
    assert "no progress for 10 min" in page


# -- item 8: a strict API -----------------------------------------------------------------

API = {
    "/api/v1/groups": "/api/v1/groups",
    "/api/v1/groups/": group_path("b", "g0"),
    "/api/v1/consumers": "/api/v1/consumers",
    "/api/v1/consumers/": "/api/v1/consumers/b/g0/busy",
    "/api/v1/events": "/api/v1/events",
    "/api/v1/hosts": "/api/v1/hosts",
}
PAGES = {
    "/": "/",
    "/group": "/group?queue=b&group=g0",
    "/consumers": "/consumers",
    "/consumer": "/consumer?queue=b&group=g0&consumer=busy",
    "/hosts": "/hosts",
    "/events": "/events",
}


def test_every_route_with_parameters_is_listed() -> None:
    assert set(QUERY) == set(API) | set(PAGES)


@pytest.mark.parametrize("route", sorted(API))
@pytest.mark.parametrize("unknown", ["idle", "stuck", "Stuck", "x"])
def test_the_api_refuses_a_parameter_it_does_not_take(
    web: TestClient, route: str, unknown: str
) -> None:
    response = web.get(API[route], params={unknown: "1"})
    if unknown in QUERY[route]:
        assert response.status_code == 200, response.text
        return
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["error"] == "bad_request"
    assert body["parameter"] == unknown
    assert repr(unknown) in body["message"]
    assert "it takes:" in body["message"]


@pytest.mark.parametrize("route", sorted(PAGES))
def test_a_page_refuses_a_parameter_it_does_not_take_and_offers_itself_without(
    web: TestClient, route: str
) -> None:
    url = PAGES[route] + ("&" if "?" in PAGES[route] else "?") + "utm_source=mail"
    page = web.get(url)
    assert page.status_code == 400
    assert page.headers["content-type"].startswith("text/html")
    assert "takes no parameter &#39;utm_source&#39;" in page.text
    kept = PAGES[route].partition("?")[2].replace("&", "&amp;")
    assert f'<a id="error-see" href="?{kept}">Open this page without it</a>' in page.text
    twin = web.get(url, headers=JSON)
    assert twin.status_code == 400
    assert twin.json()["parameter"] == "utm_source"
    assert "see" not in twin.json()  # a JSON error names the parameter: no page to offer


def test_a_repeated_known_parameter_is_not_refused(web: TestClient) -> None:
    response = web.get("/api/v1/consumers", params=[("state", "active"), ("state", "stale")])
    assert response.status_code == 200


# -- item 9: papercuts --------------------------------------------------------------------


def test_a_missing_groups_404_links_to_its_queues_groups(web: TestClient) -> None:
    page = web.get("/group", params={"queue": "b c/d", "group": "nope"})
    assert page.status_code == 404
    assert '<a id="error-see" href="/?queue=b%20c%2Fd">The groups of b c/d</a>' in page.text
    api = web.get(group_path("b c/d", "nope"))
    assert api.status_code == 404
    assert api.json()["see"] == "/api/v1/groups?queue=b%20c%2Fd"


def test_the_group_pages_note_reads_as_a_sentence(web: TestClient) -> None:
    page = web.get("/group", params={"queue": "b", "group": "g0"}).text
    assert "Read when the page was" not in page
    assert "These transitions were read with the page: reload it for newer ones." in page


def test_stuck_groups_cost_the_groups_they_show(redis_url: str, redis_client: Any) -> None:
    """200 groups with an active consumer, 3 of them stuck: once the service has counted
    them (with the totals), ``stuck=1`` reads the stored values of those 3 groups alone,
    not of the 200 (INFO commandstats)."""
    writer = RedisPresenceRegistry.from_url(redis_url, max_future_ms=None)
    try:
        beats = [(f"q{g % 10}", f"g{g:03d}", "c", 1) for g in range(200)]
        writer.heartbeat_many(beats, now_ns=T0)  # registered now: none stuck
        for g in (7, 70, 170):
            writer.heartbeat(f"q{g % 10}", f"g{g:03d}", "hung", 2, now_ns=AGO_10_MIN)
            writer.heartbeat(f"q{g % 10}", f"g{g:03d}", "hung", 2, now_ns=T0)

        def values_read() -> int:
            info = redis_client.info("commandstats")
            return sum(
                int(info.get(f"cmdstat_{name}", {}).get("calls", 0))
                for name in ("hgetall", "hmget", "hscan", "hget")
            )

        with make_client(redis_url, Clock(T0), ttl_ms=TTL) as web:
            assert web.get("/", headers=JSON).json()["totals"]["stuck"] == 3  # the count
            before = values_read()
            groups = web.get("/api/v1/groups", params={"stuck": "1"}).json()["groups"]
            assert sorted((g["group"], g["stuck"]) for g in groups) == [
                ("g007", 1),
                ("g070", 1),
                ("g170", 1),
            ]
            assert values_read() - before <= 3 * 2, "stuck=1 read more groups than it shows"
    finally:
        writer.close()


def test_the_fleets_stuck_consumers_cost_the_groups_that_hold_them(
    redis_url: str, redis_client: Any
) -> None:
    """The stuck card's list (`/consumers?stuck=1`, no queue): once the service has counted
    them with the totals, it reads the consumers of the 3 groups that count found, not of
    the 200 (it streamed every consumer of the fleet: 9.5 s at 30,000 in issue 34's run)."""
    writer = RedisPresenceRegistry.from_url(redis_url, max_future_ms=None)
    try:
        beats = [(f"q{g % 10}", f"g{g:03d}", "c", 1) for g in range(200)]
        writer.heartbeat_many(beats, now_ns=T0)  # registered now: none stuck
        for g in (7, 70, 170):
            writer.heartbeat(f"q{g % 10}", f"g{g:03d}", "hung", 2, now_ns=AGO_10_MIN)
            writer.heartbeat(f"q{g % 10}", f"g{g:03d}", "hung", 2, now_ns=T0)

        def groups_read() -> int:
            info = redis_client.info("commandstats")
            return sum(
                int(info.get(f"cmdstat_{name}", {}).get("calls", 0))
                for name in ("hgetall", "hmget", "hscan", "hget", "hlen")
            )

        with make_client(redis_url, Clock(T0), ttl_ms=TTL) as web:
            assert web.get("/", headers=JSON).json()["totals"]["stuck"] == 3  # the count
            before = groups_read()
            rows = web.get("/consumers", params={"stuck": "1"}, headers=JSON).json()["consumers"]
            assert sorted((r["queue"], r["group"], r["consumer"]) for r in rows) == [
                ("q0", "g070", "hung"),
                ("q0", "g170", "hung"),
                ("q7", "g007", "hung"),
            ]
            assert groups_read() - before <= 3 * 2, "stuck=1 read more groups than hold one"
            page = web.get("/consumers", params={"stuck": "1"}).text
            assert page.count('class="pill stuck"') == 3
    finally:
        writer.close()


def test_every_filter_of_a_page_is_on_its_api_twin() -> None:
    """A page's filters (not its names in the path, nor its paging) are its API route's
    too: the dashboard's `queue` and `group` contain a text, spelled `*_contains` there."""
    twins = {"/": "/api/v1/groups", "/group": "/api/v1/groups/", "/consumers": "/api/v1/consumers"}
    spelled = {"/": {"queue": "queue_contains", "group": "group_contains"}}
    in_path = {"/group": {"queue", "group"}}
    for page, api in twins.items():
        filters = set(QUERY[page]) - in_path.get(page, set()) - SHOWN_ONLY
        named = {spelled.get(page, {}).get(name, name) for name in filters}
        assert named <= set(QUERY[api]), (page, named - set(QUERY[api]))

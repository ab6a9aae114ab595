"""The groups page sorted by a count over every group (``sort=``, `web/sorting.py`), over
Starlette's test client against a real redis-server: keyset pages in the count's order,
filters kept, rows read now, and a bad `sort` or cursor a 400 naming it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from web_client import MS, T0, Clock, make_client

from redis_presence import RedisPresenceRegistry

S = 1_000 * MS
JSON = {"Accept": "application/json"}
ACTIVE = {"g1": 1, "g2": 4, "g3": 2, "g4": 4, "g5": 0, "g6": 3, "g7": 5}
"""Active consumers per group (g5 has one expired consumer)."""


@pytest.fixture
def fleet(redis_url: str) -> Iterator[RedisPresenceRegistry]:
    with RedisPresenceRegistry.from_url(redis_url, max_future_ms=None) as writer:
        writer.set_ttl(10_000)
        for group, active in ACTIVE.items():
            for c in range(active):
                writer.heartbeat("q", group, f"c{c}", now_ns=T0 - S)
        writer.heartbeat("q", "g5", "gone", now_ns=T0 - 60 * S)
        writer.heartbeat("other", "g9", "c0", now_ns=T0 - S)
        yield writer


def names(model: dict[str, Any]) -> list[str]:
    return [g["group"] for g in model["groups"]]


def test_pages_follow_the_count_over_every_group(
    redis_url: str, fleet: RedisPresenceRegistry
) -> None:
    with make_client(redis_url, Clock(T0), ttl_ms=None) as client:
        first = client.get("/?queue=q&sort=-active&limit=3", headers=JSON).json()
        assert names(first) == ["g7", "g2", "g4"]  # ties in name order
        assert first["prev_cursor"] is None
        second = client.get(
            "/",
            params={"queue": "q", "sort": "-active", "limit": 3, "cursor": first["next_cursor"]},
            headers=JSON,
        ).json()
        assert names(second) == ["g6", "g3", "g1"]
        third = client.get(
            "/",
            params={"queue": "q", "sort": "-active", "limit": 3, "cursor": second["next_cursor"]},
            headers=JSON,
        ).json()
        assert names(third) == ["g5"]
        assert third["next_cursor"] is None
        back = client.get(
            "/",
            params={"queue": "q", "sort": "-active", "limit": 3, "cursor": third["prev_cursor"]},
            headers=JSON,
        ).json()
        assert names(back) == ["g6", "g3", "g1"]
        rising = client.get("/?queue=q&sort=active&limit=3", headers=JSON).json()
        assert names(rising) == ["g5", "g1", "g3"]
        expired = client.get("/?sort=-expired&limit=1", headers=JSON).json()
        assert names(expired) == ["g5"]  # every queue: the filter is the page's
        idle = client.get("/?sort=-active&idle=1", headers=JSON).json()
        assert names(idle) == ["g5"]
        html = client.get("/?queue=q&sort=-active").text
        assert (
            'aria-sort="descending"><a class="sort" href="?queue=q&amp;sort=active">Active' in html
        )
        assert '<input type="hidden" name="sort" value="-active">' in html


def test_the_rows_are_read_now_and_ordered_by_what_they_hold_now(
    redis_url: str, fleet: RedisPresenceRegistry
) -> None:
    with make_client(redis_url, Clock(T0), ttl_ms=None) as client:
        assert names(client.get("/?queue=q&sort=-active&limit=2", headers=JSON).json()) == [
            "g7",
            "g2",
        ]
        for c in range(4, 7):  # g2 passes g7 after the totals (cached) were read
            fleet.heartbeat("q", "g2", f"c{c}", now_ns=T0 - S)
        model = client.get("/?queue=q&sort=-active&limit=2", headers=JSON).json()
        assert names(model) == ["g2", "g7"]
        assert [g["active"] for g in model["groups"]] == [7, 5]


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("sort=busiest", "sort"),
        ("sort=--active", "sort"),
        ("sort=-active&cursor=WyJhIiwgInEiLCAiZzEiLCAiIl0", "cursor"),  # an unsorted cursor
    ],
)
def test_a_bad_sort_or_cursor_is_a_400_naming_it(
    redis_url: str, fleet: RedisPresenceRegistry, query: str, parameter: str
) -> None:
    with make_client(redis_url, Clock(T0), ttl_ms=None) as client:
        refused = client.get(f"/?{query}", headers=JSON)
        assert refused.status_code == 400
        assert refused.json()["parameter"] == parameter

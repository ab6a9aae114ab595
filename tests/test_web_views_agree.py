"""Views that never contradict themselves (issue 30 item 6), over Starlette's test client
against a real redis-server: the groups page's totals come from the epoch of its rows (or
say they are being recounted), a restore is a recount, the alarm cards stay true.

Time is the app's `clock`; the totals are cached as a service caches them by default (a
fresh read every 5 s, the last one served meanwhile for up to a minute).
"""

from __future__ import annotations

import itertools
import re
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from servers import MakeRedisServer

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

from redis_presence import RedisPresenceRegistry
from redis_presence.web import WebConfig, create_app
from redis_presence.web.reads import PresenceData

pytestmark = [pytest.mark.redis_server, pytest.mark.timeout(60)]

TTL_MS = 10_000
MS = 1_000_000
T0 = 1_796_000_000_000 * MS
JSON = {"Accept": "application/json"}


def make_client(url: str) -> TestClient:
    config = WebConfig(url=url, ttl_ms=TTL_MS, read_cache_s=0, totals_cache_s=60.0)
    return TestClient(
        create_app(config, clock=lambda: T0),
        base_url="http://127.0.0.1",
        raise_server_exceptions=False,
    )


@pytest.fixture
def writer(redis_url: str) -> Iterator[RedisPresenceRegistry]:
    registry = RedisPresenceRegistry.from_url(redis_url, max_future_ms=None)
    try:
        yield registry
    finally:
        registry.close()


def twin(client: TestClient) -> dict[str, Any]:
    response = client.get("/", headers=JSON)
    assert response.status_code == 200, response.text
    return dict(response.json())


def agree(model: dict[str, Any]) -> None:
    """The totals hold at least what the page's rows show, in every count (the rows are a
    page of the groups the totals count)."""
    totals, rows = model["totals"], model["groups"]
    assert totals is not None
    assert totals["groups"] >= len(rows)
    for name in ("active", "stale", "expired"):
        assert totals[name] >= sum(g[name] for g in rows), name
    assert totals["nobody_reading"] >= sum(g["nobody_reading"] for g in rows)
    assert totals["below"] >= sum(g["below"] for g in rows)


def test_totals_after_redis_lost_its_data_are_those_of_the_new_data(
    redis_url: str, writer: RedisPresenceRegistry
) -> None:
    """29 active consumers, the totals read (and cached); Redis loses its data (a flush:
    a restart without persistence, without the service seeing an outage) and one
    consumer beats again: the cards count the new data, never 29 above one row."""
    writer.heartbeat_many([("orders", f"g{i % 3}", f"w{i}", 0) for i in range(29)], now_ns=T0)
    with make_client(redis_url) as client:
        before = twin(client)
        assert before["totals"]["active"] == 29
        writer.client.flushall()
        writer.heartbeat("orders", "g0", "survivor", now_ns=T0)
        after = twin(client)
        assert [(g["group"], g["active"]) for g in after["groups"]] == [("g0", 1)]
        assert after["recounting"] is False
        assert (after["totals"]["groups"], after["totals"]["active"]) == (1, 1)
        agree(after)


def test_totals_read_before_an_outage_are_not_served_after_it(
    make_redis_server: MakeRedisServer,
) -> None:
    """Redis restarts empty under the service (its reads fail meanwhile), then one
    consumer beats: the first page after it counts what Redis holds now."""
    server = make_redis_server()
    writer = RedisPresenceRegistry.from_url(server.url, max_future_ms=None)
    writer.heartbeat_many([("orders", "g", f"w{i}", 0) for i in range(12)], now_ns=T0)
    with make_client(server.url) as client:
        assert twin(client)["totals"]["active"] == 12
        server.stop()
        assert client.get("/", headers=JSON).status_code == 503
        server.restart()  # the same port, no data
        writer.close()
        writer = RedisPresenceRegistry.from_url(server.url, max_future_ms=None)
        writer.heartbeat("orders", "g", "again", now_ns=T0)
        after = twin(client)
        assert after["totals"]["active"] == 1
        agree(after)
    writer.close()


def test_a_restore_after_empty_totals_is_a_recount_and_the_alarms_are_true(
    redis_url: str, writer: RedisPresenceRegistry
) -> None:
    """The totals were read from an empty Redis (0 groups, nobody reading: none); then 200
    consumers come back, none of them active, in 20 groups (a restore), first without the
    epoch marker, then with one: never "0 groups, 0 nobody reading" above those rows."""
    with make_client(redis_url) as client:
        empty = twin(client)
        assert (empty["totals"]["groups"], empty["totals"]["nobody_reading"]) == (0, 0)
        old = T0 - 3 * TTL_MS * MS  # expired: nobody reads these groups
        restored = [("orders", f"g{i % 20:02}", f"w{i:03}", 0) for i in range(200)]
        writer.heartbeat_many(restored, now_ns=old)
        writer.client.delete(writer.plans.keys.epoch)  # restored keys, without the marker
        first = twin(client)
        assert len(first["groups"]) == 20
        assert all(g["nobody_reading"] for g in first["groups"])
        assert (first["totals"]["groups"], first["totals"]["nobody_reading"]) == (20, 20)
        agree(first)
        html = client.get("/").text
        card = re.search(
            r'<div class="card alarm" data-total="nobody_reading">\s*<span class="n">20<', html
        )
        assert card is not None, html[:2_000]


def test_totals_of_another_epoch_than_the_rows_are_a_recount(
    redis_url: str, writer: RedisPresenceRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every read of the epoch marker finds another one (Redis keeps losing its data between
    the page's read and the totals'): the page says the totals are being recounted, shows
    no count it cannot vouch for, and its alarm cards count the page's own groups."""
    writer.heartbeat("orders", "busy", "w1", now_ns=T0)
    writer.heartbeat("orders", "idle", "w2", now_ns=T0 - 3 * TTL_MS * MS)  # nobody reads it
    epochs = itertools.count()

    async def epoch(self: PresenceData) -> str:
        return f"epoch-{next(epochs)}"

    monkeypatch.setattr(PresenceData, "epoch", epoch)
    with make_client(redis_url) as client:
        model = twin(client)
        assert model["totals"] is None
        assert model["recounting"] is True
        assert [g["group"] for g in model["groups"]] == ["busy", "idle"]
        html = client.get("/").text
        assert 'class="cards recounting" id="totals"' in html
        assert re.search(r'data-total="nobody_reading">\s*<span class="n">≥ 1<', html)
        assert re.search(r'class="card alarm" data-total="nobody_reading"', html)
        assert re.search(r'data-total="active"><span class="n">…<', html)
        assert "Recounting the totals" in html
        assert "of … (recounting)" in html


# -- charts: outages and changes of data are marked, not drawn as zero -------------------


class Clock:
    def __init__(self) -> None:
        self.now_ns = T0

    def __call__(self) -> int:
        return self.now_ns


def test_a_chart_marks_an_outage_and_an_empty_restart_instead_of_drawing_zero(
    make_redis_server: MakeRedisServer,
) -> None:
    """A group page read before Redis restarts empty, one that fails while it is down (at
    T0 + 10 min), then the group's consumer beats again (T0 + 12 min): the group's chart
    marks the outage (drawn over the line) and where the data changed, draws nothing
    before it (before: the new log made the whole hour before "surely 0"), and says so."""
    server = make_redis_server()
    clock = Clock()
    writer = RedisPresenceRegistry.from_url(server.url, max_future_ms=None)
    writer.heartbeat("orders", "billing", "w1", now_ns=T0)
    config = WebConfig(url=server.url, ttl_ms=TTL_MS, read_cache_s=0)
    app = create_app(config, clock=clock)
    page = {"queue": "orders", "group": "billing"}
    with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as client:
        first = client.get("/group", params=page).text
        assert 'class="outage"' not in first
        clock.now_ns = T0 + 10 * 60_000 * MS
        server.stop()
        assert client.get("/group", params=page).status_code == 503
        server.restart()  # empty
        writer.close()
        writer = RedisPresenceRegistry.from_url(server.url, max_future_ms=None)
        clock.now_ns = T0 + 12 * 60_000 * MS
        writer.heartbeat("orders", "billing", "w1", now_ns=clock.now_ns)
        html = client.get("/group", params=page).text
        model = client.get("/group", params=page, headers=JSON)
        assert model.status_code == 200
    writer.close()
    chart = html[html.index('id="active-chart"') :]
    chart = chart[: chart.index("</svg>")]
    outage = re.search(r'<rect class="outage" x="([\d.]+)" y="[^"]*" width="([\d.]+)"', chart)
    assert outage is not None, chart
    # The window is the hour to T0 + 12 min (600 wide): from T0 + 10 min (x = 580) to the
    # read that found Redis again, at T0 + 12 min (its right end).
    assert (float(outage.group(1)), float(outage.group(2))) == (580.0, 20.0)
    assert "Redis could not be reached from" in chart
    change = re.search(r'<line class="data-change" x1="([\d.]+)"', chart)
    assert change is not None
    assert float(change.group(1)) == 600.0  # seen at the first read of the new data
    nothing_before = re.search(r'<rect class="no-log" x="0" y="[^"]*" width="([\d.]+)"', chart)
    assert nothing_before is not None  # the hour before is not this data's past
    assert float(nothing_before.group(1)) == 600.0
    assert "Redis lost or replaced its data between" in html
    assert 'class="note outage-note"' in html


# -- a consumer that went keeps what it described itself with --------------------------


def test_a_consumer_that_left_or_was_pruned_keeps_its_host_pid_and_version(
    redis_url: str, writer: RedisPresenceRegistry
) -> None:
    """Its page said "describe stored none" once it left: the `left` (or `pruned`) entry of
    the event log now keeps its metadata, and the page shows it, saying it is from the log
    and when."""
    meta = {"host": "web-7", "pid": "4242", "version": "1.2.3"}
    writer.heartbeat("orders", "billing", "leaver", now_ns=T0 - 60_000 * MS)
    writer.describe("orders", "billing", "leaver", meta)
    writer.deregister("orders", "billing", "leaver", now_ns=T0 - 30_000 * MS)
    writer.heartbeat("orders", "billing", "crashed", now_ns=T0 - 3 * TTL_MS * MS)
    writer.describe("orders", "billing", "crashed", meta | {"host": "web-8"})
    assert writer.prune_expired(now_ns=T0, ttl_ms=TTL_MS) == 1
    with make_client(redis_url) as client:
        for consumer, host, how in (
            ("leaver", "web-7", "left"),
            ("crashed", "web-8", "was pruned"),
        ):
            params = {"queue": "orders", "group": "billing", "consumer": consumer}
            html = client.get("/consumer", params=params).text
            assert 'id="not-tracked"' in html
            assert "stored none" not in html
            assert f"From the event log: what it had described itself with when it {how}" in html
            shown = dict(re.findall(r'<dt class="k">([^<]+)</dt><dd class="v">([^<]+)</dd>', html))
            assert shown == meta | {"host": host}
            model = client.get(f"/api/v1/consumers/orders/billing/{consumer}").json()
            assert model["row"] is None
            assert model["meta"] == {}
            assert model["departed"]["meta"] == meta | {"host": host}
            assert model["departed"]["kind"] == ("left" if how == "left" else "pruned")


def test_the_log_keeps_no_metadata_another_program_wrote_too_long(
    redis_url: str, writer: RedisPresenceRegistry
) -> None:
    """Metadata longer than any this package writes (another program's) is not copied into
    the log: the `left` entry has its beat field only."""
    writer.heartbeat("orders", "billing", "odd", now_ns=T0)
    gk = writer.plans.keys.group("orders", "billing")
    writer.client.hset(gk.meta, "odd", "x" * 7_000)
    writer.deregister("orders", "billing", "odd", now_ns=T0)
    (_, fields), *_ = writer.client.xrevrange(gk.events, count=1)
    assert fields[b"k"] == b"left"
    assert sorted(fields) == [b"codd", b"g", b"k"]

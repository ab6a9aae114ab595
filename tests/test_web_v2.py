"""Protocol version 2 in the web service, against a real redis-server and the real scripts:
the four group metrics (only where known), the verdict DRAINING in /metrics and on the
pages, the consumer marks, and drain requests from the dashboard (``--drain-token`` only).

Time is the app's `clock` (every read is aged at it); beats are written at fixed instants.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from cli_invoke import invoke, one_error_line
from web_client import (
    HOSTILE,
    MS,
    T0,
    TTL_MS,
    Clock,
    TestClient,
    clock,
    make_client,
    metric_samples,
    writer,
)

from redis_presence import RedisPresenceRegistry
from redis_presence.web import WebConfig, create_app

__all__ = ["clock", "writer"]  # the fixtures, used by name below

STALE_NS = T0 - (TTL_MS + TTL_MS // 2) * MS  # stale at T0 under TTL_MS
DRAIN_TOKEN = "dr4in-t0ken"


def group_labels(queue: str, group: str) -> tuple[tuple[str, str], ...]:
    return (("group", group), ("queue", queue))


@pytest.fixture
def fleet(redis_url: str) -> Iterator[dict[str, RedisPresenceRegistry]]:
    """Two writers with their own instance tokens (a duplicate needs two processes)."""
    one = RedisPresenceRegistry.from_url(redis_url, max_future_ms=None, instance="proc-a")
    two = RedisPresenceRegistry.from_url(redis_url, max_future_ms=None, instance="proc-b")
    try:
        yield {"a": one, "b": two}
    finally:
        one.close()
        two.close()


def write_fleet(fleet: dict[str, RedisPresenceRegistry]) -> None:
    """orders/billing: capacity 10 + 6, leases 3 + 6, one stale consumer that drained
    (DRAINING); orders/shipping: no capacity reported, one crashed (stale) beside an
    active one (DEGRADED); emails/HOSTILE: one consumer two processes beat as (conflict)."""
    a, b = fleet["a"], fleet["b"]
    a.heartbeat("orders", "billing", "w1", 3, now_ns=T0 - 1_000 * MS, capacity=10)
    a.heartbeat("orders", "billing", "w2", 6, now_ns=T0 - 2_000 * MS, capacity=6)
    a.heartbeat("orders", "billing", "w3", 0, now_ns=STALE_NS - 1_000 * MS, capacity=4)
    a.heartbeat("orders", "billing", "w3", 0, now_ns=STALE_NS, draining=True)
    a.heartbeat("orders", "shipping", "s1", 1, now_ns=T0 - 1_000 * MS)
    a.heartbeat("orders", "shipping", "s2", 0, now_ns=STALE_NS)
    a.heartbeat("emails", HOSTILE, "twin", 0, now_ns=T0 - 3_000 * MS)
    b.heartbeat("emails", HOSTILE, "twin", 0, now_ns=T0 - 2_000 * MS)
    a.heartbeat("emails", HOSTILE, "twin", 0, now_ns=T0 - 1_000 * MS)


def scrape(client: TestClient) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    return metric_samples(response.text)


@pytest.mark.parametrize(
    "options",
    [{"capacity_metrics": True}, {"capacity_metrics": True, "stuck_metrics": True}],
    ids=["capacity", "capacity-stuck"],
)
def test_the_four_group_metrics_only_where_known(
    redis_url: str, clock: Clock, fleet: dict[str, RedisPresenceRegistry], options: Any
) -> None:
    write_fleet(fleet)
    with make_client(redis_url, clock, **options) as client:
        found = scrape(client)
    billing = group_labels("orders", "billing")
    shipping = group_labels("orders", "shipping")
    twins = group_labels("emails", HOSTILE)
    # Capacity of the active consumers that report one (w3 is stale): 16, 9 leases held.
    assert found["redis_presence_group_capacity"] == {billing: 16.0}
    assert found["redis_presence_group_free"] == {billing: 7.0}
    # Never a 0 that means "not reported": no capacity, no series; draining and conflicts
    # were read for every group (0 is what the values say).
    assert found["redis_presence_group_draining"] == {billing: 1.0, shipping: 0.0, twins: 0.0}
    assert found["redis_presence_group_conflicts"] == {billing: 0.0, shipping: 0.0, twins: 1.0}
    assert found["redis_presence_group_verdict"] == {
        (*billing, ("verdict", "DRAINING")): 1.0,
        (*shipping, ("verdict", "DEGRADED")): 1.0,
        (*twins, ("verdict", "OK")): 1.0,
    }


def test_the_default_scrape_reads_the_stale_values_only_and_guesses_nothing(
    redis_url: str, clock: Clock, fleet: dict[str, RedisPresenceRegistry]
) -> None:
    """Without ``--capacity-metrics`` the four families are absent (nothing guessed), and
    the scrape still reads the stale consumers' values: the drained consumer that left
    makes its group DRAINING, the crashed one its group DEGRADED."""
    write_fleet(fleet)
    with make_client(redis_url, clock) as client:
        found = scrape(client)
    for name in ("capacity", "free", "draining", "conflicts"):
        assert f"redis_presence_group_{name}" not in found
    assert found["redis_presence_group_verdict"] == {
        (*group_labels("orders", "billing"), ("verdict", "DRAINING")): 1.0,
        (*group_labels("orders", "shipping"), ("verdict", "DEGRADED")): 1.0,
        (*group_labels("emails", HOSTILE), ("verdict", "OK")): 1.0,
    }


def test_the_scrape_sends_two_commands_a_group_more_for_capacity(
    redis_url: str, clock: Clock, fleet: dict[str, RedisPresenceRegistry], redis_client: Any
) -> None:
    """What the service's scrape sends (``INFO commandstats`` around one scrape), with and
    without the live values: a ZRANGEBYSCORE and an HMGET a group more, but for the groups
    with stale consumers, whose values the default scrape reads already (the departures)."""
    write_fleet(fleet)

    def calls() -> dict[str, int]:
        stats = redis_client.info("commandstats")
        return {name: int(stat["calls"]) for name, stat in stats.items()}

    sent = {}
    for capacity in (False, True):
        with make_client(redis_url, clock, capacity_metrics=capacity) as client:
            client.get("/metrics")  # the settings' caches filled
            before = calls()
            scrape(client)
            after = calls()
        sent[capacity] = {
            k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)
        }
    extra = {k: sent[True].get(k, 0) - sent[False].get(k, 0) for k in sent[True] | sent[False]}
    extra = {k: n for k, n in extra.items() if n}
    # 3 groups; billing and shipping hold a stale consumer, read by either scrape.
    assert extra == {"cmdstat_zrangebyscore": 1, "cmdstat_hmget": 1}, sent


def test_the_group_page_shows_capacity_free_and_the_marks(
    redis_url: str, clock: Clock, fleet: dict[str, RedisPresenceRegistry]
) -> None:
    write_fleet(fleet)
    assert fleet["a"].request_drain("orders", "billing", "w1", now_ns=T0 - 500 * MS)
    with make_client(redis_url, clock) as client:
        page = client.get("/group", params={"queue": "orders", "group": "billing"})
        assert page.status_code == 200
        text = page.text
        # The cards: capacity 16, 7 free slots, 1 draining; no duplicates card shown.
        assert '<div class="card" data-total="capacity"' in text
        assert '<span class="n">16</span><span class="label">capacity</span>' in text
        assert '<span class="n">7</span><span class="label">free slots</span>' in text
        assert '<span class="n">1</span><span class="label">draining</span>' in text
        duplicates = text.split('data-total="conflicts"')[1].split(">")[0]
        assert duplicates.endswith(" hidden")
        table = text.split('id="consumers">')[1].split("</table>")[0]
        assert table.count('class="pill draining"') == 1  # w3
        assert table.count('class="pill drain-requested"') == 1  # w1
        # Its JSON twin: the group's fields, and each row's.
        twin = client.get(
            "/group",
            params={"queue": "orders", "group": "billing"},
            headers={"Accept": "application/json"},
        ).json()
        group = twin["group"]
        assert (group["capacity"], group["free"], group["draining"], group["conflicts"]) == (
            16,
            7,
            1,
            0,
        )
        assert group["verdict"] == "DRAINING"
        rows = {c["consumer"]: c for c in twin["consumers"]}
        assert rows["w1"]["drain_requested"]
        assert rows["w1"]["capacity"] == 10
        assert rows["w3"]["draining"]
        assert rows["w3"]["state"] == "stale"
        # A name is data: the conflict's group page shows the hostile name as text.
        other = client.get("/group", params={"queue": "emails", "group": HOSTILE})
        assert HOSTILE not in other.text
        assert "&lt;img src=x onerror=alert(1)&gt;" in other.text
        rows = other.text.split('id="consumers">')[1].split("</table>")[0]
        assert rows.count('class="pill conflict"') == 1
        assert '<span class="n">1</span><span class="label">duplicates</span>' in other.text


def test_a_drained_group_is_not_an_alarm_on_the_overview(
    redis_url: str, clock: Clock, fleet: dict[str, RedisPresenceRegistry]
) -> None:
    """Its only consumer drained and left (stale): nobody reads it, but the verdict is
    DRAINING, so it is neither red nor first; a crashed one (STOPPED) is both."""
    a = fleet["a"]
    a.heartbeat("jobs", "drained", "d1", 0, now_ns=STALE_NS, draining=True)
    a.heartbeat("jobs", "crashed", "c1", 0, now_ns=STALE_NS)
    a.heartbeat("jobs", "fine", "f1", 0, now_ns=T0 - 1_000 * MS)
    with make_client(redis_url, clock) as client:
        twin = client.get("/", headers={"Accept": "application/json"}).json()
        order = [(g["group"], g["verdict"]) for g in twin["groups"]]
        assert order[0] == ("crashed", "STOPPED")
        assert ("drained", "DRAINING") in order
        text = client.get("/").text
    rows = {part.split('data-group="')[1].split('"')[0]: part for part in text.split("<tr")[2:]}
    assert rows["crashed"].startswith(' class="idle"')
    assert rows["drained"].startswith(' class=""')
    assert '<span class="pill drained">nobody is reading</span>' in rows["drained"]


# -- drain requests -------------------------------------------------------------------------


def drain_client(redis_url: str, clock: Clock, **options: Any) -> TestClient:
    return make_client(redis_url, clock, drain_token=DRAIN_TOKEN, **options)


def post_drain(client: TestClient, body: Any, **headers: str) -> Any:
    sent = {"Content-Type": "application/json", "X-Presence-Drain-Token": DRAIN_TOKEN}
    sent |= headers
    data = body if isinstance(body, str | bytes) else json.dumps(body)
    return client.post("/api/v1/drain", content=data, headers=sent)


def test_drain_is_off_by_default(redis_url: str, clock: Clock, writer: Any) -> None:
    writer.heartbeat("orders", "billing", "w1", 0, now_ns=T0)
    with make_client(redis_url, clock) as client:
        answer = post_drain(client, {"queue": "orders", "group": "billing", "consumer": "w1"})
        assert answer.status_code == 403
        assert answer.json()["error"] == "drain_disabled"
        page = client.get(
            "/consumer", params={"queue": "orders", "group": "billing", "consumer": "w1"}
        )
        assert 'id="drain-form"' not in page.text
    assert not writer.consumer("orders", "billing", "w1", now_ns=T0).drain_requested


def test_a_drain_request_from_the_page(redis_url: str, clock: Clock, writer: Any) -> None:
    writer.heartbeat("orders", "billing", "w1", 0, now_ns=T0 - 1_000 * MS)
    cursor = writer.changes(None, now_ns=T0)[1]
    with drain_client(redis_url, clock) as client:
        page = client.get(
            "/consumer", params={"queue": "orders", "group": "billing", "consumer": "w1"}
        )
        assert 'id="drain-form"' in page.text
        assert DRAIN_TOKEN not in page.text  # typed by the person, never rendered
        names = {"queue": "orders", "group": "billing", "consumer": "w1"}
        answer = post_drain(
            client, names, Origin="http://127.0.0.1", **{"Sec-Fetch-Site": "same-origin"}
        )
        assert answer.status_code == 200, answer.text
        assert answer.json() == names | {"drain_requested": True}
        assert answer.headers["cache-control"] == "no-store"
    assert writer.consumer("orders", "billing", "w1", now_ns=T0).drain_requested
    events, _ = writer.changes(cursor, now_ns=T0 + 1_000 * MS)
    assert [(e.kind.value, e.consumer) for e in events] == [("drain_requested", "w1")]
    # The next beat's reply tells the consumer.
    assert writer.heartbeat("orders", "billing", "w1", 0, now_ns=T0).drain_requested


@pytest.mark.parametrize(
    ("headers", "body", "status", "code"),
    [
        ({"X-Presence-Drain-Token": "wrong"}, None, 403, "drain_forbidden"),
        ({"X-Presence-Drain-Token": ""}, None, 403, "drain_forbidden"),
        ({"Origin": "http://evil.example"}, None, 403, "cross_origin"),
        ({"Origin": "http://127.0.0.1:8080"}, None, 403, "cross_origin"),
        ({"Origin": "null"}, None, 403, "cross_origin"),
        ({"Sec-Fetch-Site": "cross-site"}, None, 403, "cross_origin"),
        ({"Sec-Fetch-Site": "same-site"}, None, 403, "cross_origin"),
        ({"Content-Type": "text/plain"}, None, 415, "unsupported_media_type"),
        (
            {"Content-Type": "application/x-www-form-urlencoded"},
            None,
            415,
            "unsupported_media_type",
        ),
        ({}, "{not json", 400, "bad_request"),
        ({}, ["orders", "billing", "w1"], 400, "bad_request"),
        ({}, {"queue": "orders", "group": "billing"}, 400, "bad_request"),
        ({}, {"queue": "orders", "group": "billing", "consumer": 7}, 400, "bad_request"),
        ({}, {"queue": "", "group": "billing", "consumer": "w1"}, 400, "bad_request"),
        ({}, "x" * 5_000, 413, "too_large"),
        ({}, {"queue": "orders", "group": "billing", "consumer": "nobody"}, 404, "not_tracked"),
    ],
)
def test_a_drain_request_is_refused_as_json(
    redis_url: str, clock: Clock, writer: Any, headers: Any, body: Any, status: int, code: str
) -> None:
    writer.heartbeat("orders", "billing", "w1", 0, now_ns=T0 - 1_000 * MS)
    sent = {"queue": "orders", "group": "billing", "consumer": "w1"} if body is None else body
    with drain_client(redis_url, clock) as client:
        answer = post_drain(client, sent, **headers)
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/json"
    found = answer.json()
    assert found["error"] == code
    assert isinstance(found["message"], str)
    assert "Traceback" not in answer.text
    assert DRAIN_TOKEN not in answer.text
    assert not writer.consumer("orders", "billing", "w1", now_ns=T0).drain_requested


def test_a_drain_request_needs_a_post(redis_url: str, clock: Clock) -> None:
    with drain_client(redis_url, clock) as client:
        answer = client.get("/api/v1/drain")
    assert answer.status_code == 405
    assert answer.json()["error"] == "method_not_allowed"


def test_a_drain_request_needs_the_read_token_too(
    redis_url: str, clock: Clock, writer: Any
) -> None:
    """With ``--auth-token``, the drain token alone is not enough (the 401 comes first)."""
    writer.heartbeat("orders", "billing", "w1", 0, now_ns=T0 - 1_000 * MS)
    names = {"queue": "orders", "group": "billing", "consumer": "w1"}
    with drain_client(redis_url, clock, auth_token="r3ad") as client:
        assert post_drain(client, names).status_code == 401
        answer = post_drain(client, names, Authorization="Bearer r3ad")
        assert answer.status_code == 200, answer.text


def test_a_drain_request_on_a_version_1_prefix_says_to_migrate(
    redis_url: str, clock: Clock, writer: Any, redis_client: Any
) -> None:
    writer.heartbeat("orders", "billing", "w1", 0, now_ns=T0 - 1_000 * MS)
    redis_client.set("presence:protocol", "1")
    with drain_client(redis_url, clock) as client:
        answer = post_drain(client, {"queue": "orders", "group": "billing", "consumer": "w1"})
    assert answer.status_code == 502, answer.text
    assert answer.json()["error"] == "other_protocol_version"
    assert "migrate" in answer.json()["message"]


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"read_only": True}, "drop --read-only"),
        ({"auth_token": DRAIN_TOKEN}, "must differ from the auth token"),
        ({"drain_token": " spaced "}, "whitespace"),
    ],
)
def test_a_drain_token_the_service_cannot_use_is_refused_at_start(
    redis_url: str, options: Any, words: str
) -> None:
    config = WebConfig(url=redis_url, **({"drain_token": DRAIN_TOKEN} | options))
    with pytest.raises(ValueError, match=words) as caught:
        create_app(config)
    assert DRAIN_TOKEN not in str(caught.value)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--read-only", "serve", "--drain-token", DRAIN_TOKEN], "drop --read-only"),
        (
            ["serve", "--auth-token", DRAIN_TOKEN, "--drain-token", DRAIN_TOKEN],
            "must differ from the auth token",
        ),
    ],
)
def test_serve_refuses_a_drain_token_it_cannot_use(argv: list[str], words: str) -> None:
    """One line, exit 2, before anything listens (and never the token itself)."""
    result = invoke(["--url", "redis://127.0.0.1:1/0", *argv])
    assert result.exit_code == 2, result.output
    line = one_error_line(result)
    assert words in line
    assert DRAIN_TOKEN not in line

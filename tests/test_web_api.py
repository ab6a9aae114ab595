"""The web service over Starlette's test client, against a real redis-server.

Time is controlled by the app's `clock` (every read is aged at it), never by sleeping.
"""

from __future__ import annotations

import base64
import re
import time

import redis
from clusters import RedisClusterProcesses
from servers import free_port
from web_client import (
    HOSTILE,
    MS,
    ODD,
    T0,
    TTL_MS,
    Clock,
    TestClient,
    client,
    clock,
    group_path,
    make_client,
    metric_samples,
    writer,
)

from redis_presence import RedisPresenceRegistry

__all__ = ["client", "clock", "writer"]  # the fixtures, used by name below


# -- routes -----------------------------------------------------------------------------------


def test_every_route_answers_from_the_snapshot(
    client: TestClient, writer: RedisPresenceRegistry, clock: Clock
) -> None:
    writer.heartbeat("orders", "billing", "w1", 3, now_ns=T0 - 1_000 * MS)
    writer.heartbeat("orders", "billing", "w2", 0, now_ns=T0 - 15_000 * MS)  # stale
    writer.heartbeat("orders", "shipping", "w3", 1, now_ns=T0 - 25_000 * MS)  # expired
    described = writer.snapshot(now_ns=T0, ttl_ms=TTL_MS, with_meta=True)
    # The plain listing reads no metadata: `meta` is null, not an empty mapping.
    snapshot = [row.to_dict() | {"meta": None} for row in described]

    consumers = client.get("/api/v1/consumers").json()
    assert consumers == {
        "now_ns": T0,
        "ttl_ms": TTL_MS,
        "ttl_source": "option",
        "consumers": snapshot,
        "next_cursor": None,
        "prev_cursor": None,
    }
    groups = client.get("/api/v1/groups").json()["groups"]
    # stuck, leases: not counted (the list's read; `stuck=1`, `dead_leases=1` count them)
    undeclared = {"min_active": None, "below": False, "stuck": None}
    undeclared |= {"leases": None, "leases_expired": None}
    # capacity, free slots, draining, conflicts: not read by the list (protocol version 2)
    undeclared |= {"capacity": None, "free": None, "draining": None, "conflicts": None}
    assert groups == [
        {"queue": "orders", "group": "billing", "active": 1, "stale": 1, "expired": 0}
        | undeclared
        | {"verdict": "DEGRADED", "reason": "1 consumer stale (missed beats without draining)"},
        {"queue": "orders", "group": "shipping", "active": 0, "stale": 0, "expired": 1}
        | undeclared
        | {"verdict": "STOPPED", "reason": "nobody reading: 0 active (1 expired)"},
    ]
    one = client.get("/api/v1/groups/orders/shipping").json()
    # Its consumers were read: counted (the expired one holds its lease)
    # (and who drains or is in conflict: nobody; no capacity reported: None)
    assert one["group"] == groups[1] | {"stuck": 0, "leases": 1, "leases_expired": 1} | {
        "draining": 0,
        "conflicts": 0,
    }
    assert one["consumers"] == [row.to_dict() for row in described[2:]]  # meta {} read
    assert one["stuck_after_ms"] == 300_000

    page = client.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    text = page.text
    # Attention first (shipping: STOPPED, before billing: DEGRADED), nobody reading marked.
    assert text.index("shipping") < text.index("billing")
    assert "nobody is reading" in text
    assert client.get("/group", params={"queue": "orders", "group": "billing"}).status_code == 200
    assert client.get("/consumers", params={"search": "w"}).status_code == 200
    twin = client.get("/", headers={"Accept": "application/json"}).json()
    assert twin["totals"] == {
        "groups": 2,
        "active": 1,
        "stale": 1,
        "expired": 1,
        "nobody_reading": 1,
        "below": 0,
        "read_at_ns": T0,
        "stuck": 0,
        "stuck_read_at_ns": T0,
        "leases": 4,
        "leases_expired": 1,  # w3's, expired
        "dead_leases_groups": 1,
    }
    assert [(g["group"], g["nobody_reading"]) for g in twin["groups"]] == [
        ("shipping", True),  # attention first
        ("billing", False),
    ]

    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json()["status"] == "ready"
    assert client.get("/static/dashboard.js").status_code == 200
    assert client.get("/static/dashboard.css").status_code == 200
    samples = metric_samples(client.get("/metrics").text)
    assert samples["redis_presence_up"] == {(): 1.0}
    assert samples["redis_presence_group_active"] == {
        (("group", "billing"), ("queue", "orders")): 1.0,
        (("group", "shipping"), ("queue", "orders")): 0.0,
    }


def test_below_minimum_says_which_number_it_is(
    client: TestClient, writer: RedisPresenceRegistry
) -> None:
    """'3 below minimum' read as 'minimum is 3' on one page and '3 groups' on another."""
    writer.expect("orders", "billing", min_active=3)
    writer.heartbeat("orders", "billing", "w1", now_ns=T0)
    overview = client.get("/").text
    assert "groups below minimum" in overview  # the totals card counts groups
    assert "below its minimum of 3" in overview  # the row's badge names the minimum
    page = client.get("/group", params={"queue": "orders", "group": "billing"}).text
    assert "below its minimum of 3" in page
    assert not re.search(r'class="n">\s*3\s*</span><span class="label">below', page)
    script = client.get("/static/dashboard.js").text
    assert "below its minimum of ${" in script
    assert "`below minimum ${" not in script


def test_error_pages_name_no_read_instant(client: TestClient) -> None:
    """A 404 page read nothing: it must not say 'Read at 1970-01-01'."""
    for path in ("/nowhere", "/group?queue=x&group=y"):
        page = client.get(path, headers={"Accept": "text/html"})
        assert page.status_code == 404
        assert "1970" not in page.text
        assert "Read at" not in page.text


def test_declared_groups_metadata_and_stuck_consumers(
    redis_url: str, client: TestClient, writer: RedisPresenceRegistry, clock: Clock
) -> None:
    writer.expect("payments", "ledger")  # declared, and nobody ever read it
    writer.expect("orders", "billing", min_active=3)
    # w1 registered 400 s ago and never made progress while holding leases: stuck (the
    # default budget is 300 s); w2 made progress a second ago.
    writer.heartbeat("orders", "billing", "w1", 2, now_ns=T0 - 400_000 * MS)
    writer.heartbeat("orders", "billing", "w1", 2, now_ns=T0 - 1_000 * MS)
    writer.heartbeat("orders", "billing", "w2", 1, now_ns=T0 - 400_000 * MS)
    writer.heartbeat("orders", "billing", "w2", 1, now_ns=T0 - 1_000 * MS, progressed=True)
    hostile_meta = {"host": HOSTILE, "note": "é\n<b>bold</b>"}
    assert writer.describe("orders", "billing", "w1", hostile_meta)

    groups = client.get("/api/v1/groups").json()["groups"]
    assert [(g["queue"], g["group"], g["active"], g["min_active"], g["below"]) for g in groups] == [
        ("orders", "billing", 2, 3, True),
        ("payments", "ledger", 0, 1, True),
    ]
    twin = client.get("/?sort=queue", headers={"Accept": "application/json"}).json()
    # Both below their minimum, marked: the one nobody reads and the one short of readers.
    assert [(g["group"], g["nobody_reading"], g["below"]) for g in twin["groups"]] == [
        ("billing", False, True),
        ("ledger", True, True),
    ]
    assert (twin["totals"]["below"], twin["totals"]["nobody_reading"]) == (2, 1)
    overview = client.get("/").text
    assert "nobody is reading" in overview
    assert "below its minimum of 3" in overview
    idle = client.get("/", params={"idle": "1"}, headers={"Accept": "application/json"}).json()
    assert [g["group"] for g in idle["groups"]] == ["ledger", "billing"]  # STOPPED first

    # A declared group without any consumer has a page (and an API answer), not a 404.
    empty = client.get(group_path("payments", "ledger")).json()
    assert empty["group"]["active"] == 0
    assert empty["group"]["below"] is True
    assert empty["consumers"] == []
    page = client.get("/group", params={"queue": "payments", "group": "ledger"})
    assert page.status_code == 200
    assert "nobody is reading" in page.text
    assert client.get(group_path("payments", "nope")).status_code == 404

    one = client.get(group_path("orders", "billing")).json()
    assert one["stuck_after_ms"] == 300_000
    rows = {c["consumer"]: c for c in one["consumers"]}
    assert (rows["w1"]["stuck"], rows["w1"]["last_progress_ns"]) == (True, None)
    assert (rows["w2"]["stuck"], rows["w2"]["last_progress_ns"]) == (False, T0 - 1_000 * MS)
    assert (rows["w1"]["meta"], rows["w2"]["meta"]) == (hostile_meta, {})
    # The plain listing reads no metadata (null: not read); ?meta=1 reads it.
    plain = client.get("/api/v1/consumers").json()["consumers"]
    assert [(c["consumer"], c["stuck"], c["meta"]) for c in plain] == [
        ("w1", True, None),
        ("w2", False, None),
    ]
    described = client.get("/api/v1/consumers", params={"meta": "1"}).json()["consumers"]
    assert [c["meta"] for c in described] == [hostile_meta, {}]
    bad = client.get("/api/v1/consumers", params={"meta": "maybe"})
    assert bad.status_code == 400
    assert bad.json()["error"] == "bad_request"
    group_page = client.get("/group", params={"queue": "orders", "group": "billing"}).text
    assert 'class="pill stuck"' in group_page
    assert group_page.count('class="pill stuck"') == 1
    assert "&lt;img src=x onerror=alert(1)&gt;" in group_page
    assert "&lt;b&gt;bold&lt;/b&gt;" in group_page
    assert "<b>bold" not in group_page
    assert HOSTILE not in group_page
    twin_group = client.get(
        "/group",
        params={"queue": "orders", "group": "billing"},
        headers={"Accept": "application/json"},
    ).json()
    assert twin_group["stuck_after_ms"] == 300_000
    assert [c["meta"] for c in twin_group["consumers"]] == [hostile_meta, {}]

    # Metrics: every declared group's minimum and below flag; stuck counts when asked.
    samples = metric_samples(client.get("/metrics").text)
    billing, ledger = (
        (("group", "billing"), ("queue", "orders")),
        (
            ("group", "ledger"),
            ("queue", "payments"),
        ),
    )
    assert samples["redis_presence_group_min_active"] == {billing: 3.0, ledger: 1.0}
    assert samples["redis_presence_group_below_min"] == {billing: 1.0, ledger: 1.0}
    assert samples["redis_presence_group_active"][ledger] == 0.0
    assert "redis_presence_consumers_stuck" not in samples
    writer.heartbeat("orders", "other", "calm", 0, now_ns=T0)
    with make_client(redis_url, clock, stuck_metrics=True) as counting:
        samples = metric_samples(counting.get("/metrics").text)
    other = (("group", "other"), ("queue", "orders"))
    assert samples["redis_presence_consumers_stuck"] == {billing: 1.0, ledger: 0.0, other: 0.0}
    assert samples["redis_presence_group_below_min"] == {billing: 1.0, ledger: 1.0}
    assert other not in samples["redis_presence_group_min_active"]

    # Enough readers: no longer below; unexpected: gone from every view.
    writer.heartbeat("orders", "billing", "w3", 0, now_ns=T0)
    assert writer.unexpect("payments", "ledger")
    groups = client.get("/api/v1/groups").json()["groups"]
    assert [(g["group"], g["below"]) for g in groups] == [("billing", False), ("other", False)]
    samples = metric_samples(client.get("/metrics").text)
    assert samples["redis_presence_group_below_min"] == {billing: 0.0}
    assert client.get(group_path("payments", "ledger")).status_code == 404


def test_metrics_export_oldest_heartbeat_and_leases_by_default(
    redis_url: str, client: TestClient, writer: RedisPresenceRegistry, clock: Clock
) -> None:
    """Issue 24 item 2: without --stuck-metrics, each group's oldest heartbeat age and the
    leases its expired consumers hold (work nobody will finish)."""
    writer.expect("payments", "ledger")  # declared, no consumer: no lease, no heartbeat
    writer.heartbeat("orders", "billing", "fresh", 2, now_ns=T0 - 1_000 * MS)
    writer.heartbeat("orders", "billing", "quiet", 3, now_ns=T0 - 15_000 * MS)  # stale
    writer.heartbeat("orders", "billing", "dead", 5, now_ns=T0 - 20_001 * MS)  # expired
    writer.heartbeat("orders", "billing", "edge", 7, now_ns=T0 - 20_000 * MS)  # stale, just
    # A group larger than one read command (500 consumers): read in HSCAN steps.
    writer.heartbeat_many([("bulk", "g", f"w{i:03d}", 1) for i in range(600)], now_ns=T0)
    writer.heartbeat_many(
        [("bulk", "g", f"x{i:03d}", 2) for i in range(50)], now_ns=T0 - 60_000 * MS
    )
    samples = metric_samples(client.get("/metrics").text)
    billing = (("group", "billing"), ("queue", "orders"))
    ledger = (("group", "ledger"), ("queue", "payments"))
    bulk = (("group", "g"), ("queue", "bulk"))
    assert samples["redis_presence_oldest_heartbeat_age_seconds"] == {
        billing: 20.001,
        bulk: 60.0,
    }
    assert samples["redis_presence_group_leases_expired"] == {
        billing: 5.0,
        ledger: 0.0,
        bulk: 100.0,
    }
    # A group's leases in total need every stored value: only where the scrape reads every
    # consumer anyway.
    assert "redis_presence_group_leases" not in samples
    with make_client(redis_url, clock, stuck_metrics=True) as counting:
        reading = metric_samples(counting.get("/metrics").text)
    assert reading["redis_presence_group_leases"] == {billing: 17.0, ledger: 0.0, bulk: 700.0}
    assert (
        reading["redis_presence_group_leases_expired"]
        == (samples["redis_presence_group_leases_expired"])
    )


def test_filters_and_search(client: TestClient, writer: RedisPresenceRegistry) -> None:
    for i in range(6):
        writer.heartbeat("q1" if i % 2 else "q2", "g", f"Worker-{i}", now_ns=T0 - i * 5_000 * MS)

    def get(**params: str | list[str]) -> list[str]:
        body = client.get("/api/v1/consumers", params=params).json()
        return [c["consumer"] for c in body["consumers"]]

    assert get(queue="q1") == ["Worker-1", "Worker-3", "Worker-5"]
    assert get(queue="q1", group="g", state="stale") == ["Worker-3"]
    assert get(state=["active", "expired"]) == ["Worker-1", "Worker-5", "Worker-0", "Worker-2"]
    assert get(state="stale,expired", queue="q2") == ["Worker-4"]
    assert get(search="worker-4") == ["Worker-4"]
    assert get(queue="nope") == []
    overview = client.get("/", params={"queue": "1"}, headers={"Accept": "application/json"}).json()
    assert [g["queue"] for g in overview["groups"]] == ["q1"]
    idle = client.get("/", params={"idle": "1"}, headers={"Accept": "application/json"}).json()
    assert idle["groups"] == []
    assert (
        client.get("/api/v1/consumers", params={"state": "asleep"}).json()["error"] == "bad_request"
    )


def test_names_are_percent_encoded_path_segments(
    client: TestClient, writer: RedisPresenceRegistry
) -> None:
    for queue, group in ODD:
        writer.heartbeat(queue, group, HOSTILE, now_ns=T0)
    for queue, group in ODD[:3]:  # "." and ".." segments are normalised away by clients
        body = client.get(group_path(queue, group)).json()
        assert (body["group"]["queue"], body["group"]["group"]) == (queue, group)
        assert body["consumers"][0]["consumer"] == HOSTILE
    for queue, group in ODD:  # every name works as query parameters
        got = client.get("/api/v1/groups", params={"queue": queue, "group": group}).json()
        assert [(g["queue"], g["group"]) for g in got["groups"]] == [(queue, group)]
        page = client.get("/group", params={"queue": queue, "group": group})
        assert page.status_code == 200
        assert HOSTILE not in page.text  # escaped, never markup
        assert "&lt;img src=x onerror=alert(1)&gt;" in page.text
    missing = client.get(group_path("a/b", "nope"))
    assert missing.status_code == 404
    assert missing.json()["error"] == "not_found"
    assert client.get("/api/v1/groups/a/b/c").status_code == 404
    assert client.get("/api/v1/groups/%FF/g").status_code == 400
    assert client.get("/group", params={"queue": "x", "group": "y"}).status_code == 404


def test_cursor_pagination(client: TestClient, writer: RedisPresenceRegistry) -> None:
    writer.heartbeat_many([("q", "g", f"c{i:03d}", 0) for i in range(250)], now_ns=T0)
    walked: list[str] = []
    params: dict[str, str] = {"limit": "100"}
    while True:
        body = client.get("/api/v1/consumers", params=params).json()
        walked += [c["consumer"] for c in body["consumers"]]
        if body["next_cursor"] is None:
            break
        params["cursor"] = body["next_cursor"]
    assert walked == [f"c{i:03d}" for i in range(250)]
    back = client.get("/api/v1/consumers", params={"cursor": body["prev_cursor"], "limit": "100"})
    assert [c["consumer"] for c in back.json()["consumers"]] == walked[100:200]
    for bad in [{"cursor": "nope"}, {"limit": "0"}, {"limit": "1001"}]:
        response = client.get("/api/v1/consumers", params=bad)
        assert response.status_code == 400
        assert response.json()["error"] == "bad_request"


def test_the_shared_ttl_when_no_ttl_is_given(
    redis_url: str, writer: RedisPresenceRegistry, clock: Clock
) -> None:
    writer.heartbeat("q", "g", "w", now_ns=T0 - 15_000 * MS)
    writer.heartbeat("q", "own", "w", now_ns=T0 - 15_000 * MS)
    with make_client(redis_url, clock, ttl_ms=None) as client:
        body = client.get("/api/v1/groups").json()
        assert (body["ttl_ms"], body["ttl_source"]) == (30_000, "default")
        assert body["groups"][0]["active"] == 1  # 15 s old: active under the default 30 s
        writer.set_ttl(TTL_MS)
        writer.set_ttl(20_000, queue="q", group="own")
        # A stored TTL shows within TTL_CACHE_MS; a fresh app reads it at once.
    with make_client(redis_url, clock, ttl_ms=None) as client:
        body = client.get("/api/v1/groups").json()
        assert (body["ttl_ms"], body["ttl_source"]) == (TTL_MS, "prefix")
        # Each group is counted under its own shared TTL: "own" (20 s) has w active.
        assert [(g["group"], g["active"], g["stale"]) for g in body["groups"]] == [
            ("g", 0, 1),
            ("own", 1, 0),
        ]
        one = client.get("/api/v1/groups/q/own").json()
        assert (one["ttl_ms"], one["ttl_source"]) == (20_000, "group")
        assert [c["state"] for c in one["consumers"]] == ["active"]
        page = client.get("/group", params={"queue": "q", "group": "own"}).text
        assert "20,000 ms" in page
        assert "stored for this group" in page
        assert "stored for the prefix" in client.get("/").text
        twin = client.get("/", headers={"Accept": "application/json"}).json()
        assert (twin["ttl_ms"], twin["ttl_source"]) == (TTL_MS, "prefix")
        assert [(g["group"], g["active"]) for g in twin["groups"]] == [
            ("g", 0),
            ("own", 1),
        ]
        samples = metric_samples(client.get("/metrics").text)
        assert samples["redis_presence_ttl_seconds"] == {(): TTL_MS / 1000}
        assert samples["redis_presence_group_active"] == {
            (("group", "g"), ("queue", "q")): 0.0,
            (("group", "own"), ("queue", "q")): 1.0,
        }
    with make_client(redis_url, clock, ttl_ms=5_000) as client:
        body = client.get("/api/v1/consumers").json()
        assert (body["ttl_ms"], body["ttl_source"]) == (5_000, "option")
        assert "(--ttl-ms)" in client.get("/").text


def test_per_consumer_metrics_only_when_asked(
    redis_url: str, writer: RedisPresenceRegistry, clock: Clock
) -> None:
    writer.heartbeat("q", "g", "old", now_ns=T0 - 4_000 * MS)
    writer.heartbeat("q", "g", "new", now_ns=T0 - 1_000 * MS)
    with make_client(redis_url, clock) as plain:
        samples = metric_samples(plain.get("/metrics").text)
    assert "redis_presence_consumer_last_seen_age_seconds" not in samples
    with make_client(redis_url, clock, per_consumer_metrics=True) as detailed:
        samples = metric_samples(detailed.get("/metrics").text)
    ages = samples["redis_presence_consumer_last_seen_age_seconds"]
    assert {dict(k)["consumer"]: v for k, v in ages.items()} == {"old": 4.0, "new": 1.0}
    oldest = samples["redis_presence_oldest_heartbeat_age_seconds"]
    assert list(oldest.values()) == [4.0]


def test_openmetrics_when_the_scraper_asks(client: TestClient) -> None:
    response = client.get(
        "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    assert response.headers["content-type"].startswith("application/openmetrics-text")
    assert response.text.endswith("# EOF\n")


# -- failures ---------------------------------------------------------------------------------


def test_redis_down_gives_503_json_and_up_0(clock: Clock) -> None:
    url = f"redis://:s3cret-pass@127.0.0.1:{free_port()}/0"
    sinces: set[int] = set()
    with make_client(url, clock) as down:
        for path in [
            "/api/v1/groups",
            "/api/v1/consumers",
            "/api/v1/groups/q/g",
            "/api/v1/events",
            "/readyz",
        ]:
            response = down.get(path)
            assert response.status_code == 503, path
            body = response.json()
            assert body["error"] == "redis_unavailable"
            assert "cannot reach Redis" in body["message"]
            assert "s3cret-pass" not in response.text
            assert "Traceback" not in response.text
            if path != "/readyz":  # one instant for the whole outage: since when
                sinces.add(body["since_ns"])
        # A page's JSON twin (the page's script refreshing itself) errs as JSON too.
        twin = down.get("/group?queue=q&group=g", headers={"Accept": "application/json"})
        assert (twin.status_code, twin.json()["error"]) == (503, "redis_unavailable")
        sinces.add(twin.json()["since_ns"])
        assert len(sinces) == 1
        assert abs(time.time_ns() - sinces.pop()) < 60 * 10**9
        page = down.get("/")
        assert page.status_code == 503
        assert "text/html" in page.headers["content-type"]
        assert "s3cret-pass" not in page.text
        assert "redis://:***@127.0.0.1" in page.text
        metrics = down.get("/metrics")
        assert metrics.status_code == 200
        assert metric_samples(metrics.text)["redis_presence_up"] == {(): 0.0}
        assert down.get("/healthz").status_code == 200


def test_wrong_password_is_503_without_the_password(make_redis_server) -> None:  # type: ignore[no-untyped-def]
    server = make_redis_server(requirepass="right-one")
    with make_client(f"redis://:wrong-one@127.0.0.1:{server.port}/0") as client:
        response = client.get("/api/v1/groups")
    assert response.status_code == 503
    assert response.json()["error"] == "redis_refused_access"
    assert "wrong-one" not in response.text


def test_unknown_routes_and_methods_are_json(client: TestClient) -> None:
    assert client.get("/api/v1/nope").json()["error"] == "not_found"
    for method in ["POST", "PUT", "DELETE", "PATCH"]:
        response = client.request(method, "/api/v1/consumers")
        assert response.status_code == 405
        assert response.json()["error"] == "method_not_allowed"


def test_no_route_writes_to_redis(
    client: TestClient, writer: RedisPresenceRegistry, redis_client: redis.Redis
) -> None:
    writer.heartbeat("q", "g", "c", now_ns=T0 - 30_000 * MS)  # expired: a prune would remove it
    before = {k: redis_client.dump(k) for k in redis_client.keys("*")}
    redis_client.config_resetstat()
    paths = [
        "/",
        "/consumers",
        "/group?queue=q&group=g",
        "/api/v1/groups",
        "/api/v1/groups/q/g",
        "/api/v1/consumers",
        "/api/v1/events",
        "/metrics",
        "/readyz",
        "/healthz",
    ]
    for path in paths:
        for method in ["GET", "POST", "DELETE"]:
            client.request(method, path)
    stats = redis_client.info("commandstats")
    written = {
        name
        for name in stats
        if name.removeprefix("cmdstat_")
        in {
            "hset",
            "zadd",
            "del",
            "zrem",
            "hdel",
            "srem",
            "sadd",
            "set",
            "unlink",
            "flushall",
            "flushdb",
        }
    }
    assert written == set()
    assert {k: redis_client.dump(k) for k in redis_client.keys("*")} == before


def test_a_read_only_registry_serves_everything(
    redis_url: str, writer: RedisPresenceRegistry
) -> None:
    writer.heartbeat("q", "g", "c")
    with make_client(redis_url, read_only=True) as client:
        assert client.get("/api/v1/groups").json()["groups"][0]["active"] == 1
        assert client.get("/api/v1/consumers").json()["consumers"][0]["consumer"] == "c"


# -- the token --------------------------------------------------------------------------------


def test_auth_token_protects_every_route_but_healthz(
    redis_url: str, writer: RedisPresenceRegistry
) -> None:
    writer.heartbeat("q", "g", "c")
    with make_client(redis_url, auth_token="t0ken") as client:
        for path in ["/", "/api/v1/groups", "/metrics", "/readyz", "/static/dashboard.js", "/nope"]:
            refused = client.get(path)
            assert refused.status_code == 401, path
            challenges = refused.headers.get_list("www-authenticate")
            assert any(c.startswith("Basic realm=") for c in challenges)
            assert any(c.startswith("Bearer realm=") for c in challenges)
            assert refused.json()["error"] == "unauthorized"
            assert client.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
            basic_wrong = "Basic " + base64.b64encode(b"ops:wrong").decode()
            assert client.get(path, headers={"Authorization": basic_wrong}).status_code == 401
        assert client.get("/healthz").status_code == 200
        assert (
            client.get("/api/v1/groups", headers={"Authorization": "Bearer t0ken"}).status_code
            == 200
        )
        basic = "Basic " + base64.b64encode(b"anyone:t0ken").decode()
        assert client.get("/", headers={"Authorization": basic}).status_code == 200
        assert client.get("/metrics", headers={"Authorization": basic}).status_code == 200


def test_the_page_embeds_no_outside_resource(
    client: TestClient, writer: RedisPresenceRegistry
) -> None:
    writer.heartbeat("q", "g", "c", now_ns=T0)
    for path in ["/", "/consumers", "/group?queue=q&group=g"]:
        html = client.get(path).text
        assert not re.search(r"(src|href)=\"(https?:)?//", html), path
    js = client.get("/static/dashboard.js").text
    assert "innerHTML" not in js
    assert "http://" not in js
    assert "https://" not in js


def test_a_redis_cluster_serves_every_read(redis_cluster: RedisClusterProcesses) -> None:
    redis_cluster.flushall()
    node = redis_cluster.nodes[0]
    url = f"redis+cluster://{node.host}:{node.port}"
    writer = RedisPresenceRegistry.from_url(url, max_future_ms=None)
    try:
        for queue in ("orders", "emails", "payments"):
            writer.heartbeat(queue, "g", "c1", now_ns=T0)
            writer.heartbeat(queue, "g", "c2", now_ns=T0 - 15_000 * MS)
    finally:
        writer.close()
    with make_client(url) as client:  # the server's clock: TIME from a cluster node
        assert client.get("/readyz").json()["status"] == "ready"
        groups = client.get("/api/v1/groups").json()["groups"]
        totals = [(g["queue"], g["active"] + g["stale"] + g["expired"]) for g in groups]
        assert totals == [("emails", 2), ("orders", 2), ("payments", 2)]
        assert len(client.get("/api/v1/consumers").json()["consumers"]) == 6
        assert "redis_presence_up 1.0" in client.get("/metrics").text
        polled = client.get("/api/v1/events").json()
        assert polled["events"] == []
        again = client.get("/api/v1/events", params={"cursor": polled["cursor"]})
        assert again.status_code == 200

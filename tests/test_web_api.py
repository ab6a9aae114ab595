"""The web service over Starlette's test client, against a real redis-server.

Time is controlled by the app's `clock` (every read is aged at it), never by sleeping.
"""

from __future__ import annotations

import base64
import re
import warnings
from collections.abc import Iterator
from urllib.parse import quote

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families
from servers import RedisClusterProcesses, free_port

with warnings.catch_warnings():
    # Starlette 1.x prefers the httpx2 fork for its test client; httpx, the well-known
    # project, still works and is what the test extra installs.
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

from redis_presence import RedisPresenceRegistry
from redis_presence.web import WebConfig, create_app

TTL_MS = 10_000
MS = 1_000_000
T0 = 1_796_000_000_000 * MS
HOSTILE = "<img src=x onerror=alert(1)>"
ODD = [("a/b", "c d"), ("50%", "line\ntwo"), ("é ü", HOSTILE), ("..", ".")]


class Clock:
    def __init__(self) -> None:
        self.now_ns = T0

    def __call__(self) -> int:
        return self.now_ns

    def advance_ms(self, ms: int) -> None:
        self.now_ns += ms * MS


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def writer(redis_url: str) -> Iterator[RedisPresenceRegistry]:
    registry = RedisPresenceRegistry.from_url(redis_url)
    try:
        yield registry
    finally:
        registry.close()


def make_client(url: str, clock: Clock | None = None, **options: object) -> TestClient:
    config = WebConfig(url=url, ttl_ms=TTL_MS, read_cache_s=0, **options)  # type: ignore[arg-type]
    return TestClient(create_app(config, clock=clock), raise_server_exceptions=False)


@pytest.fixture
def client(redis_url: str, clock: Clock) -> Iterator[TestClient]:
    with make_client(redis_url, clock) as test_client:
        yield test_client


def group_path(queue: str, group: str) -> str:
    return f"/api/v1/groups/{quote(queue, safe='')}/{quote(group, safe='')}"


def metric_samples(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    return {
        family.name: {tuple(sorted(s.labels.items())): s.value for s in family.samples}
        for family in text_string_to_metric_families(text)
    }


# -- routes -----------------------------------------------------------------------------------


def test_every_route_answers_from_the_snapshot(
    client: TestClient, writer: RedisPresenceRegistry, clock: Clock
) -> None:
    writer.heartbeat("orders", "billing", "w1", 3, now_ns=T0 - 1_000 * MS)
    writer.heartbeat("orders", "billing", "w2", 0, now_ns=T0 - 15_000 * MS)  # stale
    writer.heartbeat("orders", "shipping", "w3", 1, now_ns=T0 - 25_000 * MS)  # expired
    snapshot = [row.to_dict() for row in writer.snapshot(now_ns=T0, ttl_ms=TTL_MS)]

    consumers = client.get("/api/v1/consumers").json()
    assert consumers == {
        "now_ns": T0,
        "ttl_ms": TTL_MS,
        "consumers": snapshot,
        "next_cursor": None,
        "prev_cursor": None,
    }
    groups = client.get("/api/v1/groups").json()["groups"]
    assert groups == [
        {"queue": "orders", "group": "billing", "active": 1, "stale": 1, "expired": 0},
        {"queue": "orders", "group": "shipping", "active": 0, "stale": 0, "expired": 1},
    ]
    one = client.get("/api/v1/groups/orders/shipping").json()
    assert one["group"] == groups[1]
    assert one["consumers"] == snapshot[2:]

    page = client.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    text = page.text
    # The group nobody reads comes first, marked.
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
    }
    assert [(g["group"], g["nobody_reading"]) for g in twin["groups"]] == [
        ("shipping", True),
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


def test_a_dead_consumer_goes_stale_then_expired_and_a_deregistered_one_disappears(
    client: TestClient, writer: RedisPresenceRegistry, clock: Clock
) -> None:
    writer.heartbeat("q", "g", "dies", now_ns=T0)
    writer.heartbeat("q", "g", "leaves", now_ns=T0)
    cursor = client.get("/api/v1/events").json()["cursor"]

    def states() -> dict[str, float]:
        samples = metric_samples(client.get("/metrics").text)["redis_presence_consumers"]
        return {dict(labels)["state"]: value for labels, value in samples.items()}

    def events(**params: str) -> list[tuple[str, str, int]]:
        nonlocal cursor
        body = client.get("/api/v1/events", params={"cursor": cursor, **params}).json()
        cursor = body["cursor"]
        return [(e["kind"], e["consumer"], e["at_ns"]) for e in body["events"]]

    assert states() == {"active": 2.0, "stale": 0.0, "expired": 0.0}
    clock.advance_ms(TTL_MS)
    assert states() == {"active": 2.0, "stale": 0.0, "expired": 0.0}
    assert events() == []
    clock.advance_ms(1)
    assert states() == {"active": 0.0, "stale": 2.0, "expired": 0.0}
    stale_at = T0 + (TTL_MS + 1) * MS
    assert events() == [("stale", "dies", stale_at), ("stale", "leaves", stale_at)]
    writer.deregister("q", "g", "leaves")
    assert events(queue="q", group="g") == [("left", "leaves", clock.now_ns)]
    clock.advance_ms(TTL_MS - 1)
    assert states() == {"active": 0.0, "stale": 1.0, "expired": 0.0}
    clock.advance_ms(1)
    assert states() == {"active": 0.0, "stale": 0.0, "expired": 1.0}
    assert events() == [("expired", "dies", T0 + (2 * TTL_MS + 1) * MS)]
    writer.deregister("q", "g", "dies")
    assert metric_samples(client.get("/metrics").text)["redis_presence_consumers"] == {}
    # Gone while expired: the diff of two reads calls it pruned (the events issue's log will
    # tell a deregister from a prune).
    assert events() == [("pruned", "dies", clock.now_ns)]
    writer.heartbeat("q", "g", "elsewhere", now_ns=clock.now_ns)
    assert events(queue="other") == []
    writer.heartbeat("q", "g", "back", now_ns=clock.now_ns)
    assert [kind for kind, *_ in events()] == ["joined"]

    gone = client.get("/api/v1/events", params={"cursor": "0000.1"})
    assert gone.status_code == 410
    assert gone.json()["error"] == "resync_required"
    assert client.get("/api/v1/events", params={"cursor": "junk"}).status_code == 400


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
    writer = RedisPresenceRegistry.from_url(url)
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

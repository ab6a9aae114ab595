"""Hostile requests to every route of the web service (issue 22, item 5), against a real
redis-server: no 5xx while Redis is up, and every 4xx an error that says what is wrong.

Hypothesis draws, for each route, every query parameter it reads (and the path segments,
``Last-Event-ID``, ``Authorization`` and ``Accept``) from valid values and hostile ones:
over-long names, nested JSON cursors, NUL, lone surrogates (sent as their UTF-8-ish
percent escapes), raw percent escapes of any bytes, huge and odd numbers. A 400 names one
of the parameters the request sent (``parameter``, and its message); an API error is JSON;
a page asked for as HTML may answer its error as a page (it names the parameter too). The
app runs in-process (Starlette's test client) with an auth token, so the token check is
fuzzed too; it only reads, so one seeded store serves every example.
"""

from __future__ import annotations

import base64
import json
import logging
import warnings
from collections.abc import Iterator
from typing import Any, NamedTuple
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from web_client import T0, Clock, make_client

from redis_presence import RedisPresenceRegistry
from redis_presence.keys import Keyspace
from redis_presence.web.params import QUERY

with warnings.catch_warnings():  # as in test_web_api: httpx rather than its fork
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

pytestmark = [pytest.mark.redis_server, pytest.mark.slow, pytest.mark.timeout(180)]

TOKEN = "fuzz-token-1"
EXAMPLES_PER_ROUTE = 120
MS = 1_000_000

# Every route of `create_app` and the query parameters it reads; "{queue}/{group}" and
# "{name}" are path segments.
ROUTES: dict[str, tuple[str, ...]] = {
    "/": QUERY["/"],
    "/group": QUERY["/group"],
    "/consumers": QUERY["/consumers"],
    "/hosts": QUERY["/hosts"],
    "/events": QUERY["/events"],
    "/consumer": QUERY["/consumer"],
    "/api/v1/groups": QUERY["/api/v1/groups"],
    "/api/v1/groups/{queue}/{group}": QUERY["/api/v1/groups/"],
    "/api/v1/consumers": QUERY["/api/v1/consumers"],
    "/api/v1/consumers/{queue}/{group}/{consumer}": QUERY["/api/v1/consumers/"],
    "/api/v1/hosts": QUERY["/api/v1/hosts"],
    "/api/v1/events": QUERY["/api/v1/events"],
    "/metrics": (),
    "/healthz": (),
    "/readyz": (),
    "/static/{name}": (),
}


REQUIRED = {"/group": {"queue", "group"}, "/consumer": {"queue", "group", "consumer"}}
"""Parameters a route needs: a 400 may name one the request did not send."""


class Raw(str):
    """A value sent exactly as it is spelled (already percent-encoded, or not at all)."""

    __slots__ = ()


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


FIXED = [
    "",
    "\x00",
    "a\x00b",
    "\ud800",
    "\udfff x",
    "q" * 513,
    "é" * 257,
    "\U0001f600" * 129,
    "x" * 10_000,
    "9" * 5000,
    "-1",
    "0",
    "1e309",
    "0x10",
    " 5",
    "²",
    "\u0661\u0660",  # Arabic-Indic digits: str.isdigit() is true
    "NaN",
    "true",
    "%",
    "..",
    "/",
    "a/b",
    "<script>alert(1)</script>",
    '{"a":1}',
    "[[[[[[",
    b64(b"[" * 5000),
    b64(b'{"v":' * 2000),
    b64(b'["a","orders","billing"]'),
    b64(b'["z","q","g","c"]'),
    b64(json.dumps({"v": 1, "t": 1, "s": 1, "q": [[[1]]]}).encode()),
    b64(json.dumps({"v": 1, "t": 10**400, "s": -1, "q": {}}).encode()),
    b64(b"\xff\xfe"),
    "!!!",
    "active,sleeping",
    ",,,",
]
HOSTILE = st.one_of(
    st.sampled_from(FIXED),
    st.text(max_size=30),  # any code point, lone surrogates too
    st.text(min_size=500, max_size=700),
    st.integers(-(10**40), 10**40).map(str),
    st.integers(1, 6000).map(lambda n: b64(b"[" * n)),
    st.binary(max_size=24).map(lambda raw: Raw("".join(f"%{b:02X}" for b in raw))),
    st.text(alphabet="%0123456789ABCDEFGHzz/", max_size=12).map(Raw),
)
HEADER = st.one_of(
    st.sampled_from([b"", b"\x7f", "é".encode("latin-1"), b64(b"[" * 5000).encode()]),
    st.binary(max_size=60).map(lambda raw: raw.translate(None, b"\r\n\x00")),
)


class Seeded(NamedTuple):
    client: TestClient
    valid: dict[str, list[str]]


@pytest.fixture
def seeded(redis_url: str) -> Iterator[Seeded]:
    writer = RedisPresenceRegistry.from_url(redis_url, max_future_ms=None)
    try:
        writer.heartbeat_many(
            [("orders", "billing", f"w{i}", i) for i in range(3)], now_ns=T0 - 1_000 * MS
        )
        writer.heartbeat("orders", "shipping", "w9", 1, now_ns=T0 - 25_000 * MS)
        writer.heartbeat("a/b", "line\ntwo", "<img src=x>", 0, now_ns=T0 - 1_000 * MS)
        writer.heartbeat("bad", "g", "w", 0, now_ns=T0 - 1_000 * MS)
        writer.client.hset(Keyspace("presence").group("bad", "g").meta, "w", b"[" * 50_000)
        writer.describe("orders", "billing", "w1", {"host": "h1"})
        writer.expect("payments", "ledger")
    finally:
        writer.close()
    with make_client(redis_url, Clock(), auth_token=TOKEN) as client:
        client.headers["Authorization"] = f"Bearer {TOKEN}"
        pages = client.get("/api/v1/consumers", params={"limit": "1"}).json()
        groups = client.get("/api/v1/groups", params={"limit": "1"}).json()
        events = client.get("/api/v1/events").json()
        valid = {
            "queue": ["orders", "a/b", "bad", "payments"],
            "group": ["billing", "line\ntwo", "g", "ledger"],
            "state": ["active", "stale,expired", "EXPIRED"],
            "idle": ["1", "0"],
            "stuck": ["1", "0"],
            "dead_leases": ["1", "0"],
            "queue_contains": ["ord", "A"],
            "group_contains": ["bill", "\n"],
            "search": ["w", "<img"],
            "consumer": ["w1", "<img src=x>", "w", "w9"],
            "cursor": [pages["next_cursor"], groups["next_cursor"], events["cursor"]],
            "limit": ["1", "1000"],
            "meta": ["1", "0"],
            "sort": ["-active", "min", "expired", "attention", "queue", "-dead_leases", "leases"],
            "window": ["1h", "6h", "24h"],
            "name": ["dashboard.js", "favicon.svg"],
            "Last-Event-ID": [events["cursor"]],
            "since": ["15m", "2026-12-04T22:05:00Z", str(T0 - 1_000 * MS)],
            "by": ["host", "version", "pid"],
            "host": ["h1", "<img"],
            "version": ["1.2"],
            "field": ["host", "region"],
            "value": ["h1"],
            "kind": ["joined", "stale,expired"],
            "history": ["1", "0"],
        }
        yield Seeded(client, valid)


def encoded(value: str) -> str:
    """`value` percent-encoded as UTF-8 (a lone surrogate as its 3-byte spelling)."""
    if isinstance(value, Raw):
        return str(value)
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


@st.composite
def requests(draw: st.DrawFn, route: str, valid: dict[str, list[str]]) -> dict[str, Any]:
    """One request to `route`: each of its parameters absent, valid or hostile."""

    def value(name: str) -> str | None:
        kind = draw(st.sampled_from(["absent", "valid", "valid", "hostile"]))
        if kind == "absent":
            return None
        if kind == "valid":
            return draw(st.sampled_from(valid[name]))
        hostile: str = draw(HOSTILE)
        return hostile

    sent: set[str] = set()
    path = route
    for name in ("queue", "group", "consumer", "name"):
        if "{" + name + "}" in path:
            segment = value(name) or draw(st.sampled_from(valid[name]))
            path = path.replace("{" + name + "}", encoded(segment))
            sent.add(name)
    query = []
    for name in ROUTES[route]:
        found = value(name)
        if found is not None:
            query.append(f"{name}={encoded(found)}")
            sent.add(name)
    stranger = draw(st.booleans())
    if stranger:  # one a page or API route refuses, naming it; the others ignore it
        query.append(f"{encoded(draw(HOSTILE))}={encoded(draw(HOSTILE))}")
    headers: dict[str, bytes] = {}
    accept = draw(st.sampled_from([b"application/json", b"text/html", b"*/*", None, b"?"]))
    if accept == b"?":
        accept = draw(HEADER).replace(b"event-stream", b"")
    if accept is not None:
        headers["Accept"] = accept
    last = value("Last-Event-ID") if route == "/api/v1/events" else None
    if last is not None:
        headers["Last-Event-ID"] = last.encode("utf-8", "surrogatepass")
        sent.add("Last-Event-ID")
    auth = draw(st.sampled_from(["bearer", "bearer", "bearer", "basic", "none", "hostile"]))
    if auth == "basic":
        headers["Authorization"] = b"Basic " + base64.b64encode(f"u:{TOKEN}".encode())
    elif auth == "none":
        headers["Authorization"] = b""
    elif auth == "hostile":
        headers["Authorization"] = draw(HEADER)
    return {
        "url": path + ("?" + "&".join(query) if query else ""),
        "headers": headers,
        "sent": sent,
        "authorized": auth in ("bearer", "basic"),
        "named": sent | REQUIRED.get(route, set()),
        "stranger": stranger,
    }


def check(response: Any, request: dict[str, Any]) -> None:
    """No 5xx; a 4xx says what is wrong: JSON naming the parameter (or a page naming it)."""
    status, text = response.status_code, response.text
    where = f"{request['url'][:300]!r} {request['headers']!r:.300} -> {status} {text[:300]!r}"
    assert status < 500, where
    assert "Traceback" not in text, where
    if status < 400:
        return
    kind = response.headers.get("content-type", "")
    if not kind.startswith("application/json"):
        # A page asked for as HTML answers its error as a page; the API always as JSON.
        assert kind.startswith("text/html"), where
        assert not request["url"].startswith("/api/"), where
        if status == 400 and not (request["stranger"] and "takes no parameter" in text):
            assert any(name in text for name in request["named"]), where
        return
    body = response.json()
    assert isinstance(body.get("error"), str), where
    assert isinstance(body.get("message"), str), where
    if status == 401:
        assert body["error"] == "unauthorized", where
        assert not request["authorized"], where
    elif status == 400:
        stranger = request["stranger"] and "takes no parameter" in body["message"]
        assert stranger or body["parameter"] in request["named"], where
        assert stranger or body["parameter"] in body["message"], where
    elif status == 410:  # the service's fixed clock is days from the server's: logs gone
        assert body["error"] == "resync_required", where
        assert "since" in request["sent"] or request["url"].startswith("/events"), where
    else:
        assert status in (404, 405), where


@pytest.mark.parametrize("route", list(ROUTES))
def test_no_hostile_request_is_a_5xx_and_every_4xx_names_what_is_wrong(
    seeded: Seeded, route: str, caplog: pytest.LogCaptureFixture
) -> None:
    client, valid = seeded

    @settings(
        max_examples=EXAMPLES_PER_ROUTE,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(request=requests(route, valid))
    def one(request: dict[str, Any]) -> None:
        response = client.get(request["url"], headers=request["headers"])
        check(response, request)

    caplog.set_level(logging.WARNING, logger="redis_presence")
    one()
    # The service logged no failure of its own (the catch-all's line, a Redis error).
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], [
        r.getMessage()[:200] for r in caplog.records
    ]

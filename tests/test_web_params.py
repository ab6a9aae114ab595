"""Bad input to the web service (issue 22, item 5): every route checks its path and query
parameters and answers a 400 JSON error naming the one it cannot use, never a 500; an
exception nothing expected is one JSON 500, logged once, never a traceback.

Against a real redis-server, over Starlette's test client (`test_web_api.make_client`).
"""

from __future__ import annotations

import base64
import json
import logging
import time
import warnings
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from web_client import BASE_URL, T0, Clock, group_path, make_client
from webservers import ServeProcess

with warnings.catch_warnings():  # as in test_web_api: httpx rather than its fork
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

from redis_presence import RedisPresenceRegistry

pytestmark = pytest.mark.redis_server

LONG = "q" * 513  # one byte over MAX_NAME_BYTES
NESTED = base64.urlsafe_b64encode(b"[" * 20_000).decode().rstrip("=")
NESTED_OBJECT = base64.urlsafe_b64encode(b'{"v":' * 5_000).decode().rstrip("=")
JSON = {"Accept": "application/json"}

NAME_ROUTES = [
    ("/", "queue"),
    ("/", "group"),
    ("/group", "queue"),
    ("/group", "group"),
    ("/consumers", "queue"),
    ("/consumers", "group"),
    ("/consumers", "search"),
    ("/api/v1/groups", "queue"),
    ("/api/v1/groups", "group"),
    ("/api/v1/groups/orders/billing", "search"),
    ("/api/v1/consumers", "queue"),
    ("/api/v1/consumers", "group"),
    ("/api/v1/consumers", "search"),
    ("/api/v1/events", "queue"),
    ("/api/v1/events", "group"),
]
CURSOR_ROUTES = [
    "/group",
    "/consumers",
    "/api/v1/groups",
    "/api/v1/groups/orders/billing",
    "/api/v1/consumers",
    "/api/v1/events",
]


@pytest.fixture
def client(redis_url: str) -> Iterator[TestClient]:
    writer = RedisPresenceRegistry.from_url(redis_url, max_future_ms=None)
    try:
        writer.heartbeat("orders", "billing", "w1", 1, now_ns=T0)
    finally:
        writer.close()
    with make_client(redis_url, Clock()) as test_client:
        yield test_client


def assert_names(response: object, parameter: str) -> None:
    """A 400 JSON error whose `parameter` and message name `parameter`."""
    status = getattr(response, "status_code", None)
    text = getattr(response, "text", "")
    assert status == 400, (status, text[:300])
    body = response.json()  # type: ignore[attr-defined]
    assert body["error"] == "bad_request", body
    assert body["parameter"] == parameter, body
    assert parameter in body["message"], body
    assert "Traceback" not in text


def no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR], [
        r.getMessage()[:200] for r in caplog.records
    ]


@pytest.mark.parametrize(("path", "parameter"), NAME_ROUTES)
def test_a_name_over_512_bytes_is_a_400_naming_the_parameter(
    client: TestClient, caplog: pytest.LogCaptureFixture, path: str, parameter: str
) -> None:
    params = {parameter: LONG}
    if path in ("/", "/group", "/consumers"):
        params = {"queue": "orders", "group": "billing"} | params
    assert_names(client.get(path, params=params, headers=JSON), parameter)
    no_tracebacks(caplog)


@pytest.mark.parametrize("parameter", ["queue", "group"])
def test_a_name_over_512_bytes_in_the_path_is_a_400_naming_it(
    client: TestClient, caplog: pytest.LogCaptureFixture, parameter: str
) -> None:
    names = {"queue": "orders", "group": "billing"} | {parameter: LONG}
    assert_names(client.get(group_path(names["queue"], names["group"])), parameter)
    assert_names(client.get(GROUP_RAW + quote(LONG) + "/%FF"), "queue")
    no_tracebacks(caplog)


GROUP_RAW = "/api/v1/groups/"


@pytest.mark.parametrize("path", CURSOR_ROUTES)
@pytest.mark.parametrize("cursor", [NESTED, NESTED_OBJECT, "A" * 20_000])
def test_a_nested_or_oversized_cursor_is_a_400_naming_cursor(
    client: TestClient, caplog: pytest.LogCaptureFixture, path: str, cursor: str
) -> None:
    params = {"cursor": cursor}
    if not path.startswith("/api/v1/groups/"):  # there the names are the path's
        params = {"queue": "orders", "group": "billing"} | params
    assert_names(client.get(path, params=params, headers=JSON), "cursor")
    no_tracebacks(caplog)


@pytest.mark.parametrize("cursor", [NESTED, NESTED_OBJECT])
@pytest.mark.parametrize("accept", ["application/json", "text/event-stream"])
def test_a_nested_last_event_id_is_a_400_naming_it(
    client: TestClient, caplog: pytest.LogCaptureFixture, cursor: str, accept: str
) -> None:
    response = client.get("/api/v1/events", headers={"Last-Event-ID": cursor, "Accept": accept})
    assert_names(response, "Last-Event-ID")
    no_tracebacks(caplog)


def _forged(cursor: str, **fields: object) -> str:
    document = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    document.update(fields)
    raw = json.dumps(document, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize("accept", ["application/json", "text/event-stream"])
@pytest.mark.parametrize("header", [False, True])
def test_a_forged_or_foreign_event_cursor_is_a_400_naming_it(
    client: TestClient, caplog: pytest.LogCaptureFixture, accept: str, header: bool
) -> None:
    """A cursor of queue=orders used without the filter replayed the other queues' events; a
    window moved a year ahead gave a year of false stale and expired events; fields past
    what Redis takes answered 502. Each is a 400 naming where the cursor came from."""
    of_orders = client.get("/api/v1/events", params={"queue": "orders"}).json()["cursor"]
    of_all = client.get("/api/v1/events").json()["cursor"]
    document = json.loads(base64.urlsafe_b64decode(of_all + "=" * (-len(of_all) % 4)))
    s, t = document["s"], document["t"]
    member = "presence:{orders}:billing:c"
    year = 365 * 86_400 * 10**9
    cases = [
        (of_orders, {}),
        (of_all, {"queue": "orders"}),
        (_forged(of_all, w={"n": t + year, "u": s, "r": {}, "l": None, "d": ["", 0, 0, 0]}), {}),
        (_forged(of_all, t=time.time_ns() + year), {}),
        (_forged(of_all, w={"n": t, "u": s, "r": {}, "l": None, "d": [member, 0, 5, 2**63]}), {}),
        (_forged(of_all, w={"n": t, "u": 10**25, "r": {}, "l": ["orders", ""], "d": None}), {}),
        (_forged(of_all, q={"orders": f"{s}-{2**64}"}), {}),
    ]
    for cursor, filters in cases:
        if header:
            headers, name = {"Accept": accept, "Last-Event-ID": cursor}, "Last-Event-ID"
            params = filters
        else:
            headers, name = {"Accept": accept}, "cursor"
            params = {**filters, "cursor": cursor}
        assert_names(client.get("/api/v1/events", params=params, headers=headers), name)
    no_tracebacks(caplog)


@pytest.mark.parametrize(
    ("path", "parameter", "value"),
    [
        ("/", "limit", "9" * 5000),
        ("/", "cursor", "x"),
        ("/", "state", "gone"),
        ("/", "idle", "maybe"),
        ("/consumers", "limit", "9" * 5000),
        ("/consumers", "limit", "0"),
        ("/consumers", "meta", "perhaps"),
        ("/api/v1/consumers", "limit", "²"),
        ("/api/v1/consumers", "state", "x" * 1000),
        ("/api/v1/groups", "limit", "-1"),
    ],
)
def test_other_parameters_are_checked_and_named(
    client: TestClient, path: str, parameter: str, value: str
) -> None:
    assert_names(client.get(path, params={parameter: value}, headers=JSON), parameter)


def test_a_page_route_answers_html_errors_to_a_browser(client: TestClient) -> None:
    response = client.get("/consumers", params={"queue": LONG})
    assert response.status_code == 400
    assert response.headers["content-type"].startswith("text/html")
    assert "queue must be at most 512 UTF-8 bytes" in response.text


def test_an_unexpected_exception_is_one_json_500_logged_once(
    redis_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug, not bad input")

    # raise_server_exceptions: an exception that escapes the app fails the request here.
    config_client = make_client(redis_url, Clock())
    with TestClient(config_client.app, base_url=BASE_URL, raise_server_exceptions=True) as client:
        service = client.app.state.service
        monkeypatch.setattr(service.reads, "group_page", broken)  # the index's order
        monkeypatch.setattr(service.reads, "groups_named", broken)  # attention first
        caplog.clear()
        for path in ("/api/v1/groups", "/"):
            response = client.get(path)
            assert response.status_code == 500
            body = response.json()
            assert body["error"] == "internal", body
            assert "RuntimeError" not in body["message"]
        # Each logged once, on one line: what and where, no traceback.
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 2, [r.getMessage() for r in errors]
        for record in errors:
            message = record.getMessage()
            assert "RuntimeError: a bug, not bad input (at " in message, message
            assert "\n" not in message
            assert not record.exc_info


@pytest.mark.slow
def test_a_real_serve_process_answers_400s_and_logs_no_traceback(redis_url: str) -> None:
    """Over uvicorn: the long names and nested cursors of the issue are 400s naming their
    parameter, and the service's log holds one access line each, no traceback."""
    writer = RedisPresenceRegistry.from_url(redis_url, max_future_ms=None)
    writer.heartbeat("orders", "billing", "w1", 1)
    writer.close()
    with ServeProcess(redis_url) as serve, serve.client() as client:
        for path, params, headers, parameter in [
            (group_path(LONG, "billing"), {}, {}, "queue"),
            ("/api/v1/consumers", {"queue": LONG}, {}, "queue"),
            ("/api/v1/groups", {"group": LONG}, {}, "group"),
            ("/consumers", {"queue": LONG}, JSON, "queue"),
            ("/api/v1/consumers", {"cursor": NESTED}, {}, "cursor"),
            ("/api/v1/events", {}, {"Last-Event-ID": NESTED}, "Last-Event-ID"),
            (
                "/api/v1/events",
                {},
                {"Last-Event-ID": NESTED, "Accept": "text/event-stream"},
                "Last-Event-ID",
            ),
        ]:
            assert_names(client.get(path, params=params, headers=headers), parameter)
        assert client.get("/healthz").status_code == 200
    log = serve.stderr
    assert "Traceback" not in log, log[-2000:]
    assert " 400 " in log

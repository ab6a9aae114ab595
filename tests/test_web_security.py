"""The service's own defences, on the ASGI app against a real redis-server: which ``Host``
it answers to (DNS rebinding), the headers every response carries, and the token over
Bearer and Basic alike."""

from __future__ import annotations

import base64
import os
import re
import subprocess
import warnings
from collections.abc import Iterator

import pytest

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

from webservers import ROOT, cli_argv

from redis_presence import RedisPresenceRegistry
from redis_presence.web import WebConfig, create_app
from redis_presence.web.security import CONTENT_SECURITY_POLICY, host_of

pytestmark = pytest.mark.redis_server

ROUTES = [
    "/",
    "/consumers",
    "/hosts",
    "/events",
    "/api/v1/groups",
    "/api/v1/consumers",
    "/api/v1/hosts",
    "/metrics",
    "/readyz",
]
ROUTES += ["/healthz", "/static/dashboard.js", "/static/dashboard.css", "/nope"]


def client_for(redis_url: str, base_url: str = "http://127.0.0.1", **options: object) -> TestClient:
    config = WebConfig(url=redis_url, read_cache_s=0, **options)  # type: ignore[arg-type]
    return TestClient(create_app(config), base_url=base_url, raise_server_exceptions=False)


@pytest.fixture
def client(redis_url: str) -> Iterator[TestClient]:
    writer = RedisPresenceRegistry.from_url(redis_url)
    writer.heartbeat("q", "g", "c")
    writer.close()
    with client_for(redis_url) as test_client:
        yield test_client


# -- Host -------------------------------------------------------------------------------------


def test_a_foreign_host_is_refused_with_421_on_every_route(client: TestClient) -> None:
    for path in ROUTES:
        for host in ["evil.example", "evil.example:8321", "localhost.evil.example", "127.0.0.2"]:
            refused = client.get(path, headers={"Host": host})
            assert refused.status_code == 421, (path, host)
            body = refused.json()
            assert body["error"] == "misdirected_request"
            assert repr(host) in body["message"]
            assert "--allowed-host" in body["message"]
            assert "REDIS_PRESENCE_ALLOWED_HOSTS" in body["message"]
        for host in ["localhost", "LOCALHOST:8321", "localhost.", "127.0.0.1:80", "[::1]:8321"]:
            answered = client.get(path, headers={"Host": host})
            assert answered.status_code != 421, (path, host)
    for bad in ["", "a b", "[::1", "::1", "x:y", "a/b", "u@localhost"]:
        assert client.get("/healthz", headers={"Host": bad}).status_code == 421, bad


def test_the_event_stream_refuses_a_foreign_host_before_it_opens(client: TestClient) -> None:
    refused = client.get(
        "/api/v1/events", headers={"Host": "evil.example", "Accept": "text/event-stream"}
    )
    assert refused.status_code == 421
    assert refused.headers["content-type"] == "application/json"


def test_more_hosts_bound_addresses_and_the_address_a_request_arrived_at(redis_url: str) -> None:
    allowed = ("presence.internal", "*.example.com", "10.0.0.7", "[fd00::7]")
    with client_for(redis_url, allowed_hosts=allowed) as client:
        for host in ["presence.internal:8321", "a.example.com", "b.a.example.com", "10.0.0.7"]:
            assert client.get("/healthz", headers={"Host": host}).status_code == 200, host
        assert client.get("/healthz", headers={"Host": "[fd00:0::7]:1"}).status_code == 200
        for host in ["example.com", "presence.internal.evil", "10.0.0.8"]:
            assert client.get("/healthz", headers={"Host": host}).status_code == 421, host
    # Bound to every address (0.0.0.0): a request to the IP it arrived at is answered.
    with client_for(redis_url, base_url="http://10.1.2.3:8321") as client:
        assert client.get("/healthz").status_code == 200  # Host: 10.1.2.3:8321
        assert client.get("/healthz", headers={"Host": "10.9.9.9"}).status_code == 421
    with client_for(redis_url, base_url="http://testserver") as client:  # a name, not an IP
        assert client.get("/healthz").status_code == 421
    with client_for(redis_url, allowed_hosts=("*",)) as client:
        assert client.get("/healthz", headers={"Host": "anything.example"}).status_code == 200


def test_a_foreign_host_is_refused_before_the_token_is_asked_for(redis_url: str) -> None:
    with client_for(redis_url, auth_token="t0ken") as client:
        refused = client.get("/", headers={"Host": "evil.example"})
        assert refused.status_code == 421
        assert "www-authenticate" not in refused.headers
        assert client.get("/", headers={"Host": "localhost"}).status_code == 401


def test_host_names_are_parsed_strictly() -> None:
    assert host_of("Example.COM.:80") == "example.com"
    assert host_of("[::1]:8321") == "::1"
    assert host_of("[0:0::1]") == "::1"
    assert host_of("127.0.0.1") == "127.0.0.1"
    for bad in ["", " ", "::1", "[::1", "[::1]x", "a:b:c", "a:port", "a b", "a/b", "a@b"]:
        assert host_of(bad) is None, bad


# -- headers ----------------------------------------------------------------------------------


def test_every_response_carries_the_security_headers(redis_url: str) -> None:
    with client_for(redis_url, auth_token="t0ken") as client:
        auth = {"Authorization": "Bearer t0ken"}
        responses = [client.get(path, headers=auth) for path in ROUTES]
        responses += [
            client.get("/", headers={"Host": "evil.example"}),  # 421
            client.get("/"),  # 401
            client.get("/group?queue=q&group=none", headers=auth),  # 404 page
            client.post("/api/v1/groups", headers=auth),  # 405
        ]
        for response in responses:
            where = (response.request.url.path, response.status_code)
            headers = response.headers
            assert headers["content-security-policy"] == CONTENT_SECURITY_POLICY, where
            assert headers["x-content-type-options"] == "nosniff", where
            assert headers["x-frame-options"] == "DENY", where
            assert headers["referrer-policy"] == "no-referrer", where
    policy = dict(part.strip().split(" ", 1) for part in CONTENT_SECURITY_POLICY.split(";"))
    assert policy["default-src"] == "'self'"
    assert policy["script-src"] == "'self'"  # no 'unsafe-inline', no 'unsafe-eval'
    assert policy["style-src"] == "'self'"
    assert policy["frame-ancestors"] == "'none'"


def test_the_templates_hold_no_inline_script_or_style(client: TestClient) -> None:
    for path in [
        "/",
        "/consumers",
        "/hosts",
        "/group?queue=q&group=g",
        "/group?queue=q&group=none",
    ]:
        html = client.get(path).text
        assert " style=" not in html, path
        assert "<style" not in html, path
        assert not re.search(r"\son[a-z]+=", html), path  # no inline event handler
        for attributes, body in re.findall(r"<script([^>]*)>(.*?)</script>", html, re.S):
            # Only the page's JSON data (never run) and the static script.
            assert 'type="application/json"' in attributes or (
                "src=" in attributes and not body.strip()
            ), (path, attributes)


# -- the token: Bearer and Basic agree --------------------------------------------------------

UNICODE_TOKEN = "pässwörd-ключ-🔑"


def basic(password: str, user: str = "ops") -> bytes:
    return b"Basic " + base64.b64encode(f"{user}:{password}".encode())


def test_a_non_ascii_token_works_over_bearer_and_basic_alike(redis_url: str) -> None:
    utf8 = UNICODE_TOKEN.encode()
    with client_for(redis_url, auth_token=UNICODE_TOKEN) as client:
        for authorization in [b"Bearer " + utf8, b"bearer  " + utf8 + b" ", basic(UNICODE_TOKEN)]:
            answered = client.get("/api/v1/groups", headers={"Authorization": authorization})
            assert answered.status_code == 200, authorization
        for wrong in [
            b"Bearer " + utf8.decode("latin-1").encode(),  # its UTF-8 read as Latin-1, re-sent
            b"Bearer " + utf8[:-1],
            "Bearer pässwörd".encode("latin-1"),
            basic(UNICODE_TOKEN[:-1]),
        ]:
            refused = client.get("/api/v1/groups", headers={"Authorization": wrong})
            assert refused.status_code == 401, wrong


BAD_TOKENS = [" s3cret", "s3cret ", "s3cret\n", "\ts3cret", "s3\x00cret", "s3\x7fcret", "   "]


@pytest.mark.parametrize("token", BAD_TOKENS)
def test_a_token_only_basic_could_carry_is_refused(redis_url: str, token: str) -> None:
    with pytest.raises(ValueError, match="auth token"):
        create_app(WebConfig(url=redis_url, auth_token=token))


def test_serve_refuses_such_a_token_at_startup_in_one_line(redis_url: str) -> None:
    for token in ["s3cret\n", " s3cret"]:
        done = subprocess.run(
            cli_argv("--url", redis_url, "serve", "--port", "0"),
            cwd=ROOT,
            env={**os.environ, "REDIS_PRESENCE_AUTH_TOKEN": token},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1, done.stderr
        assert "--auth-token" in done.stderr
        assert "whitespace" in done.stderr
        assert "s3cret" not in done.stderr  # the secret is not shown
        assert "Traceback" not in done.stderr

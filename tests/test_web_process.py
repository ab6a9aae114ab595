"""`redis-presence serve` as a real process on uvicorn: the API at 100,000 consumers, the
event stream, outages of Redis, shutdown, and what it prints."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from servers import HOST, RedisServer, free_port
from waiting import wait_until
from webservers import ROOT, ServeProcess, cli_argv

from redis_presence import RedisPresenceRegistry
from redis_presence.cli.commands.serve import is_loopback

MS = 1_000_000
NOW_NS = 1_796_000_000_000 * MS

pytestmark = [pytest.mark.slow, pytest.mark.redis_server, pytest.mark.timeout(240)]


def sse_messages(lines: Iterator[str]) -> Iterator[dict[str, str]]:
    """Server-sent event messages (`event`, `data`, `id`) from a stream of lines."""
    message: dict[str, str] = {}
    for line in lines:
        if not line:
            if message:
                yield message
            message = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            message[name] = value.removeprefix(" ")


def test_pagination_at_100000_consumers(redis_url: str) -> None:
    writer = RedisPresenceRegistry.from_url(redis_url, max_future_ms=None)
    beats = [
        (f"q{g // 10:03d}", f"g{g % 10}", f"c{i:05d}", i % 7)
        for g in range(1000)
        for i in range(100)
    ]
    for start in range(0, len(beats), 1000):
        writer.heartbeat_many(beats[start : start + 1000], now_ns=NOW_NS)
    expected = sorted((q, g, c) for q, g, c, _ in beats)
    with (
        ServeProcess(
            redis_url,
            global_options=["--now-ns", str(NOW_NS + 1_000 * MS)],
            serve_options=["--read-cache-ms", "2000"],
        ) as serve,
        serve.client() as client,
    ):
        walked: list[tuple[str, str, str]] = []
        params = {"limit": "1000"}
        pages = 0
        while True:
            body = client.get("/api/v1/consumers", params=params).json()
            walked += [(c["queue"], c["group"], c["consumer"]) for c in body["consumers"]]
            pages += 1
            if body["next_cursor"] is None:
                break
            params["cursor"] = body["next_cursor"]
        assert pages == 100
        assert walked == expected
        one = client.get("/api/v1/groups/q042/g7", params={"limit": "1000"}).json()
        assert one["group"] == {
            "queue": "q042",
            "group": "g7",
            "active": 100,
            "stale": 0,
            "expired": 0,
            "min_active": None,
            "below": False,
            "stuck": 0,  # its consumers were read: counted
            "leases": sum(i % 7 for i in range(100)),  # and their leases
            "leases_expired": 0,
            "capacity": None,  # nobody reports one
            "free": None,
            "draining": 0,
            "conflicts": 0,
            "verdict": "OK",
            "reason": "100 active",
        }
        assert [c["consumer"] for c in one["consumers"]] == [f"c{i:05d}" for i in range(100)]
        groups = client.get("/api/v1/groups").json()
        assert len(groups["groups"]) == 1000
        assert groups["next_cursor"] is None
        assert sum(g["active"] for g in groups["groups"]) == 100_000
        page = client.get("/group", params={"queue": "q099", "group": "g9"})
        assert page.status_code == 200
        assert page.text.count('<tr class="state-active"') == 50
        assert client.get("/").status_code == 200
    writer.close()


def test_the_event_stream_over_uvicorn(redis_url: str) -> None:
    writer = RedisPresenceRegistry.from_url(redis_url)
    writer.set_ttl(400)  # no --ttl-ms: the service and its events use the shared TTL
    with (
        ServeProcess(
            redis_url, serve_options=["--live-interval-ms", "100", "--read-cache-ms", "0"]
        ) as serve,
        serve.client() as client,
    ):
        assert "TTL shared" in serve.stderr
        body = client.get("/api/v1/groups").json()
        assert (body["ttl_ms"], body["ttl_source"]) == (400, "prefix")
        headers = {"Accept": "text/event-stream"}
        seen: list[dict[str, str]] = []
        cursors: list[str] = []
        with client.stream(
            "GET", "/api/v1/events", params={"queue": "q"}, headers=headers
        ) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            messages = sse_messages(stream.iter_lines())
            hello = next(m for m in messages if "event" in m)
            assert hello["event"] == "hello"
            assert json.loads(hello["data"])["cursor"] == hello["id"]
            writer.heartbeat("q", "g", "joins", 2)
            writer.heartbeat("other", "g", "filtered-out")
            for message in messages:
                if message.get("event") == "cursor":
                    assert json.loads(message["data"])["cursor"] == message["id"]
                    cursors.append(message["id"])
                if message.get("event") != "presence":
                    continue
                seen.append(message)
                event = json.loads(message["data"])
                if (event["kind"], event["consumer"]) == ("expired", "joins"):
                    # Polling from the first cursor after "joined" gives what came after it.
                    # (Stale and expired are derived from the heartbeats that are still
                    # there: a consumer removed since has none to replay.)
                    resumed = client.get(
                        "/api/v1/events", params={"cursor": cursors[0], "queue": "q"}
                    ).json()
                    after = [(e["kind"], e["consumer"]) for e in resumed["events"]]
                    assert after == [("stale", "joins"), ("expired", "joins")]
                    writer.deregister("q", "g", "joins")
                if event["kind"] == "left":
                    break
        kinds = [(json.loads(m["data"])["kind"], json.loads(m["data"])["consumer"]) for m in seen]
        assert kinds == [
            ("joined", "joins"),
            ("stale", "joins"),
            ("expired", "joins"),
            ("left", "joins"),
        ]
        joined = next(
            json.loads(m["data"]) for m in seen if json.loads(m["data"])["kind"] == "joined"
        )
        assert joined["lease_count"] == 2
        assert "id" not in seen[0]  # events carry no id: the cursor messages do
        # A stream that reconnects with the last cursor before "left" (EventSource sends it
        # as Last-Event-ID) goes on from there.
        before_left = cursors[-1]
        with client.stream(
            "GET",
            "/api/v1/events",
            params={"queue": "q"},
            headers={**headers, "Last-Event-ID": before_left},
        ) as stream:
            messages = sse_messages(stream.iter_lines())
            again = next(m for m in messages if "event" in m)
            assert (again["event"], again["id"]) == ("hello", before_left)
            replayed = []
            for message in messages:
                if message.get("event") == "presence":
                    event = json.loads(message["data"])
                    replayed.append((event["kind"], event["consumer"]))
                if message.get("event") == "cursor":
                    break
            assert replayed == [("left", "joins")]
    writer.close()


def test_serve_starts_without_redis_and_recovers(tmp_path: Path) -> None:
    port = free_port()
    url = f"redis://:pass-w0rd@{HOST}:{port}/0"
    with ServeProcess(url) as serve, serve.client() as client:
        assert "redis://:***@" in serve.stderr
        assert client.get("/healthz").status_code == 200
        ready = client.get("/readyz")
        assert ready.status_code == 503
        assert ready.json()["error"] == "redis_unavailable"
        assert client.get("/api/v1/groups").status_code == 503
        polled = client.get("/api/v1/events")
        assert polled.status_code == 503
        assert polled.json()["error"] == "redis_unavailable"
        assert "redis_presence_up 0.0" in client.get("/metrics").text
        opened = contextlib.ExitStack()
        stream_client = opened.enter_context(serve.client())
        stream = opened.enter_context(
            stream_client.stream("GET", "/api/v1/events", headers={"Accept": "text/event-stream"})
        )
        messages = sse_messages(stream.iter_lines())
        down = next(m for m in messages if "event" in m)
        assert down["event"] == "status"
        assert json.loads(down["data"])["redis_up"] is False
        server = RedisServer(dir=tmp_path / "redis", port=port, requirepass="pass-w0rd").start()
        try:
            # The open stream sees Redis come back, and starts.
            back = next(m for m in messages if "event" in m)
            assert (back["event"], json.loads(back["data"])["redis_up"]) == ("status", True)
            assert next(m for m in messages if "event" in m)["event"] == "hello"
            opened.close()
            wait_until(
                lambda: client.get("/readyz").status_code == 200, timeout_s=20, what="readyz"
            )
            assert client.get("/api/v1/groups").json()["groups"] == []
            assert "redis_presence_up 1.0" in client.get("/metrics").text
            server.kill()
            wait_until(lambda: client.get("/readyz").status_code == 503, timeout_s=20, what="503")
            server.restart()
            wait_until(
                lambda: client.get("/api/v1/groups").status_code == 200, timeout_s=20, what="back"
            )
        finally:
            server.stop()
        bodies = client.get("/api/v1/consumers").text + client.get("/").text
    assert "pass-w0rd" not in serve.stderr + bodies
    assert "Traceback" not in serve.stderr


def test_sigterm_ends_the_service_with_a_stream_open(redis_url: str) -> None:
    serve = ServeProcess(redis_url).start()
    try:
        with (
            serve.client() as client,
            client.stream(
                "GET", "/api/v1/events", headers={"Accept": "text/event-stream"}
            ) as stream,
        ):
            hello = next(m for m in sse_messages(stream.iter_lines()) if "event" in m)
            assert hello["event"] == "hello"
            started = time.monotonic()
            assert serve.stop(timeout_s=20) == 0
            assert time.monotonic() - started < 10
    finally:
        serve.stop()
    assert "Traceback" not in serve.stderr
    assert "Application shutdown complete" in serve.stderr


def test_serve_refuses_a_bad_url_and_a_taken_port_in_one_line() -> None:
    bad = subprocess.run(
        cli_argv("--url", "redis://:hunter2@h:port/0", "serve"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1
    assert "hunter2" not in bad.stderr
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = subprocess.run(
            cli_argv("--url", "redis://127.0.0.1:1/0", "serve", "--port", str(port)),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert busy.returncode == 1
    assert busy.stderr.startswith(f"Error: cannot listen on 127.0.0.1:{port}:")
    assert busy.stderr.count("\n") == 1


def test_loopback_is_the_default_and_named_hosts_are_judged() -> None:
    assert all(is_loopback(h) for h in ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
    assert not any(is_loopback(h) for h in ["0.0.0.0", "::", "10.0.0.5", "example.org"])
    help_text = subprocess.run(
        cli_argv("serve", "--help"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    help_text = " ".join(help_text.split())
    assert "[default: 127.0.0.1]" in help_text
    assert "[default: 8321;" in help_text


def test_serve_without_the_web_extra_says_what_to_install(tmp_path: Path) -> None:
    # starlette hidden, as in an install without the extra
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; sys.modules['starlette'] = None; "
            "from redis_presence.cli import main; sys.argv = ['redis-presence', 'serve']; main()",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "pip install 'redis-presence[web]'" in done.stderr
    assert done.stderr.count("\n") == 1


def test_routes_names_and_the_token_over_uvicorn(redis_url: str) -> None:
    odd = [("a/b", "c d"), ("50%", "line\ntwo"), ("é", "<img src=x onerror=alert(1)>")]
    writer = RedisPresenceRegistry.from_url(redis_url, max_future_ms=None)
    for queue, group in odd:
        writer.heartbeat(queue, group, "c", now_ns=NOW_NS)
    writer.close()
    token = "uvic0rn"
    with ServeProcess(
        redis_url,
        global_options=["--now-ns", str(NOW_NS)],
        env={"REDIS_PRESENCE_AUTH_TOKEN": token},
        token=token,
    ) as serve:
        with serve.client() as client:
            for queue, group in odd:
                path = f"/api/v1/groups/{quote(queue, safe='')}/{quote(group, safe='')}"
                body = client.get(path).json()
                assert (body["group"]["queue"], body["group"]["group"]) == (queue, group)
                page = client.get("/group", params={"queue": queue, "group": group})
                assert page.status_code == 200
            for path in [
                "/",
                "/consumers",
                "/api/v1/consumers",
                "/api/v1/events",
                "/metrics",
                "/readyz",
            ]:
                assert client.get(path).status_code == 200, path
            # The event stream with the token; without it, 401 for the stream and the poll.
            cursor = client.get("/api/v1/events").json()["cursor"]
            polled = client.get("/api/v1/events", params={"cursor": cursor})
            assert polled.status_code == 200
            with client.stream(
                "GET", "/api/v1/events", headers={"Accept": "text/event-stream"}
            ) as stream:
                hello = next(m for m in sse_messages(stream.iter_lines()) if "event" in m)
                assert hello["event"] == "hello"
        for headers in [{}, {"Accept": "text/event-stream"}, {"Authorization": "Bearer wrong"}]:
            refused = httpx.get(serve.base_url + "/api/v1/events", headers=headers, timeout=10)
            assert refused.status_code == 401
            assert refused.json()["error"] == "unauthorized"
        anonymous = httpx.get(serve.base_url + "/api/v1/groups", timeout=10)
        assert anonymous.status_code == 401
        assert anonymous.headers.get_list("www-authenticate")
        assert httpx.get(serve.base_url + "/healthz", timeout=10).status_code == 200
    assert token not in serve.stderr
    assert "%0Atwo" in serve.stderr  # the access log keeps the raw, percent-encoded path
    assert "\ntwo" not in serve.stderr


def test_the_hosts_it_answers_to_over_uvicorn(redis_url: str) -> None:
    def status(serve: ServeProcess, host: str) -> int:
        response = httpx.get(serve.base_url + "/healthz", headers={"Host": host}, timeout=10)
        return response.status_code

    with ServeProcess(
        redis_url,
        serve_options=["--host", "127.0.0.2", "--allowed-host", "presence.internal"],
        env={"REDIS_PRESENCE_ALLOWED_HOSTS": "ignored.internal"},  # the option wins
    ) as serve:
        port = serve.base_url.rsplit(":", 1)[1]
        for host in [f"127.0.0.2:{port}", "presence.internal", f"localhost:{port}", "[::1]"]:
            assert status(serve, host) == 200, host
        for host in ["ignored.internal", "evil.example", f"127.0.0.3:{port}"]:
            assert status(serve, host) == 421, host
        refused = httpx.get(serve.base_url + "/", headers={"Host": "evil.example"}, timeout=10)
        assert refused.json()["error"] == "misdirected_request"
        assert refused.headers["x-frame-options"] == "DENY"
    with ServeProcess(
        redis_url, env={"REDIS_PRESENCE_ALLOWED_HOSTS": "a.internal, b.internal *.c.internal"}
    ) as serve:
        for host in ["a.internal", "b.internal:80", "x.c.internal"]:
            assert status(serve, host) == 200, host
        assert status(serve, "d.internal") == 421

"""The dashboard's pictures of the recent past (`redis_presence.web.history`) over
Starlette's test client, against a real redis-server: the consumer page and its JSON twin,
the group page's timeline and chart, the groups page's sparklines.

Time is the app's fixed `clock` and the writes' `now_ns`, never a sleep.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from html import unescape as html_unescape
from urllib.parse import quote

import pytest
from web_client import HOSTILE, MS, T0, Clock, make_client

from redis_presence import RedisPresenceRegistry
from redis_presence.web import history

TTL_MS = 10_000
S = 1_000 * MS


@pytest.fixture
def writer(redis_url: str) -> Iterator[RedisPresenceRegistry]:
    with RedisPresenceRegistry.from_url(redis_url, max_future_ms=None) as registry:
        registry.set_ttl(TTL_MS)  # what the service (no --ttl-ms) and the events use
        yield registry


def q(name: str) -> str:
    return quote(name, safe="")


def consumer_url(queue: str, group: str, consumer: str) -> str:
    return f"/consumer?queue={q(queue)}&group={q(group)}&consumer={q(consumer)}"


def test_consumer_page_shows_state_metadata_and_history(
    redis_url: str, writer: RedisPresenceRegistry
) -> None:
    queue, group, name = "orders", HOSTILE, f"w-{HOSTILE}"
    writer.heartbeat(queue, group, name, 3, now_ns=T0 - 1_200 * S)
    writer.describe(queue, group, name, {"host": f"h-{HOSTILE}", "pid": "4242", "version": "1.2"})
    writer.heartbeat(queue, group, name, 5, now_ns=T0 - 2 * S, progressed=True)  # recovered
    with make_client(redis_url, Clock(T0), ttl_ms=None) as client:
        page = client.get(consumer_url(queue, group, name))
        assert page.status_code == 200, page.text
        html = page.text
        assert HOSTILE not in html
        assert "&lt;img src=x onerror=alert(1)&gt;" in html
        assert "4242" in html
        assert "h-&lt;img" in html
        assert "leases held" in html
        rows = re.findall(r'data-kind="(\w+)"', html)
        assert rows == ["recovered", "joined"]  # when it went stale before: not logged
        assert "not active just before" in html
        model = client.get(f"/api/v1/consumers/{q(queue)}/{q(group)}/{q(name)}").json()
        assert model["row"]["state"] == "active"
        assert model["row"]["lease_count"] == 5
        assert model["meta"] == {"host": f"h-{HOSTILE}", "pid": "4242", "version": "1.2"}
        assert [t["kind"] for t in model["timeline"]] == rows
        assert model["reaches_back"] is True
        twin = client.get(consumer_url(queue, group, name), headers={"Accept": "application/json"})
        assert twin.json() == model
        # linked from the group page's rows
        group_page = client.get(f"/group?queue={q(queue)}&group={q(group)}").text
        assert f'href="/consumer?queue={q(queue)}&amp;group={q(group)}&amp;consumer={q(name)}"' in (
            group_page
        )


def test_consumer_that_left_keeps_its_history_and_an_unknown_one_is_404(
    redis_url: str, writer: RedisPresenceRegistry
) -> None:
    writer.heartbeat("q", "g", "gone", now_ns=T0 - 100 * S)
    writer.deregister("q", "g", "gone", now_ns=T0 - 50 * S)
    with make_client(redis_url, Clock(T0), ttl_ms=None) as client:
        page = client.get(consumer_url("q", "g", "gone"))
        assert page.status_code == 200
        assert 'id="not-tracked"' in page.text
        # it went stale and expired (by the rule, from its last beat) before it left
        kinds = re.findall(r'data-kind="(\w+)"', page.text)
        assert kinds == ["left", "expired", "stale", "joined"]
        missing = client.get("/api/v1/consumers/q/g/nobody")
        assert missing.status_code == 404
        assert missing.json()["error"] == "not_found"
        assert client.get("/api/v1/consumers/q/g").status_code == 404
        assert client.get("/consumer?queue=q&group=g").status_code == 400
        too_long = client.get(consumer_url("q", "g", "x" * 600))
        assert too_long.status_code == 400
        assert "512" in too_long.text  # the page says which limit the name broke


def group_url(queue: str, group: str) -> str:
    return f"/group?queue={q(queue)}&group={q(group)}"


def test_group_page_lists_its_newest_transitions_bounded(
    redis_url: str, writer: RedisPresenceRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(60):  # 60 joined, of which the page lists the newest TIMELINE_LIMIT
        writer.heartbeat("q", HOSTILE, f"{HOSTILE}-{i:02}", now_ns=T0 - 600 * S + i * S)
    writer.heartbeat("q", "other", "elsewhere", now_ns=T0 - S)  # another group's: not listed
    writer.deregister("q", HOSTILE, f"{HOSTILE}-59", now_ns=T0 - 60 * S)
    with make_client(redis_url, Clock(T0), ttl_ms=None) as client:
        html = client.get(group_url("q", HOSTILE)).text
        assert HOSTILE not in html
        section = html[html.index('id="timeline"') :]
        kinds = re.findall(r'data-kind="(\w+)"', section)
        assert len(kinds) == history.TIMELINE_LIMIT
        # newest first: the left, then the crossings of the consumers still there, ...
        assert kinds[0] == "left"
        assert "elsewhere" not in section
        assert "&lt;img src=x onerror=alert(1)&gt;-58" in section
        assert 'id="log-reach"' not in html
        monkeypatch.setattr(history, "GROUP_ENTRIES", 10)  # a read that cannot reach back
        html = client.get(group_url("q", HOSTILE)).text
        assert 'id="log-reach"' in html
        assert "does not reach back an hour" in html


def test_groups_page_sparklines_and_group_chart_walk_back_from_now(
    redis_url: str, writer: RedisPresenceRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    for beat in range(T0 - 3_700 * S, T0 - 3_000 * S, 5 * S):  # from before the hour on
        writer.heartbeat("q", HOSTILE, "old", now_ns=beat)  # ... to stale 50 min ago
    for name in ("a", "b"):  # joined 20 min ago, active now (beat a second ago)
        writer.heartbeat("q", HOSTILE, name, now_ns=T0 - 1_200 * S)
        writer.heartbeat("q", HOSTILE, name, now_ns=T0 - 1_200 * S + 5 * S)
    for name in ("a", "b"):
        for beat in range(T0 - 1_200 * S + 10 * S, T0, 5 * S):
            writer.heartbeat("q", HOSTILE, name, now_ns=beat)
    with make_client(redis_url, Clock(T0), ttl_ms=None) as client:
        html = client.get("/").text
        assert HOSTILE not in html
        cells = re.findall(r'<td class="spark"[^>]*>.*?</td>', html, re.S)
        assert len(cells) == 1  # the row's only: no second copy of the chart in the page
        for cell in cells:  # the key history.js keeps the row's cell by
            key = re.search(r"data-key='([^']*)'", cell)
            assert key is not None
            assert json.loads(html_unescape(key.group(1))) == ["q", HOSTILE]
        label = re.search(r"<title>([^<]*)</title>", cells[0])  # its accessible name
        assert label is not None
        assert "1 then, 2 now, at most 2" in label.group(1)
        page = client.get(group_url("q", HOSTILE)).text
        chart = page[page.index('id="active-chart"') :]
        points = re.search(r'class="sure" points="([^"]*)"', chart)
        assert points is not None
        ys = [float(p.split(",")[1]) for p in points.group(1).split()]
        assert len(ys) == history.CHART_POINTS
        # one consumer (old) for the first ten minutes, none until a and b joined, two now
        assert ys[0] == ys[5] < ys[15]  # y grows downwards
        assert ys[-1] < ys[0]
        scale = re.search(r'data-scale="(\d+)"', chart)
        assert scale is not None  # the counts, exactly, from the drawing: y = scale - count
        counts = [int(scale.group(1)) - int(y) for y in ys]
        assert (counts[0], counts[15], counts[-1]) == (1, 0, 2)
        assert "no-log" not in chart
        monkeypatch.setattr(history, "SPARK_PAGE_ENTRIES", 0)  # at least 20 a queue: enough
        assert 'class="trimmed"' not in client.get("/").text
        monkeypatch.setattr(history, "SPARK_ENTRIES", 2)  # the log read cannot reach back
        html = client.get("/").text
        assert 'class="trimmed"' in html
        assert "the event log does not reach back an hour" in html
        monkeypatch.setattr(history, "SPARK_GROUPS", 0)  # past the page's bound: not drawn
        assert 'class="no-spark"' in client.get("/").text
        model = client.get("/", headers={"Accept": "application/json"}).json()
        assert "sparks" not in model  # the page's JSON twin (its script's refresh) reads none


def test_consumer_page_with_another_programs_metadata_is_shown_without_it(
    redis_url: str, writer: RedisPresenceRegistry
) -> None:
    writer.heartbeat("q", "g", "w", 1, now_ns=T0 - S)
    writer.client.hset(writer.plans.keys.group("q", "g").meta, "w", b"[" * 50_000)
    with make_client(redis_url, Clock(T0), ttl_ms=None) as client:
        page = client.get(consumer_url("q", "g", "w"))
        assert page.status_code == 200
        assert 'id="meta-unreadable"' in page.text
        model = client.get("/api/v1/consumers/q/g/w").json()
        assert model["meta"] == {}
        assert "did not write" in model["meta_error"]
        assert model["row"]["lease_count"] == 1


def test_every_row_has_a_sparkline_on_one_scale_and_no_second_copy(
    redis_url: str, writer: RedisPresenceRegistry
) -> None:
    # 60 groups (the first 50 had one before): group i has i % 7 consumers now (none: not
    # a group), and g03 had 9 others twenty minutes ago (one scale: 9 for every row)
    for i in range(70):
        for c in range(i % 7):
            writer.heartbeat("q", f"g{i:02d}", f"c{c}", now_ns=T0 - 2 * S)
    for c in range(9):
        writer.heartbeat("q", "g03", f"gone{c}", now_ns=T0 - 1_200 * S)
        writer.deregister("q", "g03", f"gone{c}", now_ns=T0 - 1_100 * S)
    with make_client(redis_url, Clock(T0), ttl_ms=None) as client:
        html = client.get("/").text
        cells = re.findall(r'<td class="spark"[^>]*>.*?</td>', html, re.S)
        assert len(cells) == 60
        assert html.count("<svg") == 60  # one drawing per row, and no other copy
        scales = {re.search(r'data-scale="(\d+)"', cell).group(1) for cell in cells}  # type: ignore[union-attr]
        assert scales == {"9"}  # g03's, 20 minutes ago
        assert 'id="spark-scale">9<' in html
        (busy,) = [cell for cell in cells if "g03" in cell]
        line = re.search(r'class="sure" points="([^"]*)"', busy)
        assert line is not None
        counts = [9 - int(p.split(",")[1]) for p in line.group(1).split()]
        assert (counts[0], max(counts), counts[-1]) == (0, 9, 3)
        quiet = re.search(r'class="sure" points="([^"]*)"', cells[0])  # g01: 1 now, on 0-9
        assert quiet is not None
        assert quiet.group(1).split()[-1] == "30,8"


def test_the_window_is_chosen_by_a_parameter_and_checked(
    redis_url: str, writer: RedisPresenceRegistry
) -> None:
    writer.heartbeat("q", "g", "old", now_ns=T0 - 5 * 3_600 * S)  # joined 5 h ago
    for name in ("a", "b"):
        writer.heartbeat("q", "g", name, now_ns=T0 - 2 * S)
    with make_client(redis_url, Clock(T0), ttl_ms=None) as client:
        hour = client.get(group_url("q", "g")).text
        assert "Active consumers over the last hour" in hour
        assert "<span>-60 min</span>" in hour
        six = client.get(group_url("q", "g") + "&window=6h").text
        assert "Active consumers over the last 6 hours" in six
        ticks = re.findall(r"<span>(-\d+ (?:min|h)|now)</span>", six)
        assert ticks == ["-6 h", "-5 h", "-4 h", "-3 h", "-2 h", "-60 min", "now"]
        assert "5 joined" not in six
        assert re.search(r'<line class="ev"[^>]*><title>1 joined between', six)
        assert 'aria-current="true">6h<' in six
        assert 'href="?queue=g' not in six
        day = client.get("/?window=24h").text
        assert "active consumers over the last 24 hours" in day
        for path in ("/?window=2h", group_url("q", "g") + "&window=1d"):
            refused = client.get(path, headers={"Accept": "application/json"})
            assert refused.status_code == 400
            assert "window must be one of 1h, 6h, 24h" in refused.json()["message"]

"""The dashboard stays true in a real browser (Debian's chromium driven by Playwright,
against a real `redis-presence serve` and a real redis-server) when what it reads changes
under it: Redis unreachable, restarted empty, restored from a dump, or written by another
protocol version; its cards, table and charts never contradict each other, and a consumer
that left keeps what it described itself with."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser_pages import (  # noqa: F401 (the fixtures, used by name)
    _SERVICES,
    HOSTILE,
    MS,
    TOKEN,
    beating,
    browser,
    card,
    keep_screenshot,
    live,
    open_page,
    page,
    redis_url_module,
    row,
    same_document,
    service,
    settled,
    writer,
)
from playwright.sync_api import (
    Browser,
    Page,
    expect,
)
from servers import RedisServer
from webservers import ServeProcess

from redis_presence import RedisPresenceRegistry

pytestmark = [pytest.mark.slow, pytest.mark.redis_server, pytest.mark.timeout(120)]


# -- Redis going away under an open page, and coming back empty ------------------------------


@pytest.fixture(scope="module")
def outage_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A server of its own that the outage tests stop and start again (empty: no
    persistence) under an open page, on the same port."""
    with RedisServer(dir=tmp_path_factory.mktemp("redis-outage")) as server:
        yield server


@pytest.fixture(scope="module")
def outage_service(outage_server: RedisServer) -> Iterator[ServeProcess]:
    with ServeProcess(outage_server.url, env={"REDIS_PRESENCE_AUTH_TOKEN": TOKEN}) as serve:
        _SERVICES.append(serve)
        yield serve


@pytest.fixture
def outage(outage_server: RedisServer) -> Iterator[RedisPresenceRegistry]:
    """A writer on the outage server, which is running (and empty) again afterwards."""
    if not outage_server.is_running:
        outage_server.restart()
    outage_server.client().flushall()
    registry = RedisPresenceRegistry.from_url(outage_server.url, max_future_ms=None)
    try:
        yield registry
    finally:
        registry.close()
        if not outage_server.is_running:
            outage_server.restart()


def ghosts(writer: RedisPresenceRegistry) -> None:
    """Two consumers beating from the future (active however long the test takes)."""
    future = 4_000_000_000_000 * MS
    writer.heartbeat("orders", "ghosts", "ghost-1", 2, now_ns=future)
    writer.heartbeat("orders", "ghosts", "ghost-2", 0, now_ns=future)


UNREACHABLE = re.compile(r"Redis unreachable since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def test_a_page_never_shows_rows_as_live_while_redis_is_unreachable(
    browser: Browser,
    outage_server: RedisServer,
    outage_service: ServeProcess,
    outage: RedisPresenceRegistry,
    tmp_path: Path,
) -> None:
    ghosts(outage)
    with (
        open_page(browser, outage_service.base_url) as group,
        open_page(browser, outage_service.base_url) as overview,
    ):
        live(group, "/group?queue=orders&group=ghosts")
        live(overview, "/")
        expect(row(group, "ghost-1").locator(".pill")).to_have_text("active")
        settled(group)
        outage_server.stop()
        for page in (group, overview):
            expect(page.locator("#banner")).to_be_visible()
            expect(page.locator("#banner")).to_have_text(UNREACHABLE)
            expect(page.locator("#live")).to_have_attribute("data-state", "down")
            expect(page.locator("#live")).not_to_have_text("live")
        # No row, pill or count still claims to be active: each is marked unknown.
        for consumer in ("ghost-1", "ghost-2"):
            expect(row(group, consumer)).to_have_class(re.compile(r"\bunknown\b"))
            expect(row(group, consumer).locator(".pill")).to_have_text("unknown")
        expect(group.locator("#consumers .pill.active")).to_have_count(0)
        expect(group.locator("#group-stats")).to_have_class(re.compile(r"\bunknown\b"))
        ghosts_row = overview.locator("#groups tbody tr").filter(has_text="ghosts")
        expect(ghosts_row).to_have_class(re.compile(r"\bunknown\b"))
        expect(overview.locator("#totals")).to_have_class(re.compile(r"\bunknown\b"))
        keep_screenshot(group, tmp_path, "dashboard-unreachable.png")
        # The page's own reads (503: Redis is down) keep it so.
        group.reload()
        expect(group.locator("#banner")).to_have_text(UNREACHABLE)
        expect(group.locator("#live")).to_have_attribute("data-state", "down")


OTHER_VERSION = re.compile(
    r"Cannot read this prefix since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(presence:protocol says "
    r'this prefix was written by protocol version "3"'
)


def test_a_page_says_which_protocol_version_wrote_the_prefix_not_that_redis_is_down(
    browser: Browser,
    outage_server: RedisServer,
    outage_service: ServeProcess,
    outage: RedisPresenceRegistry,
) -> None:
    """A newer release claims the prefix under an open page (issue 30, item 4): the page
    says so, not "Redis unreachable", and claims nothing live; back to version 2, it is
    live again."""
    ghosts(outage)
    path = "/group?queue=orders&group=ghosts"
    with open_page(browser, outage_service.base_url) as group, outage_server.client() as admin:
        live(group, path)
        expect(row(group, "ghost-1").locator(".pill")).to_have_text("active")
        settled(group)
        admin.set("presence:protocol", "3")
        # The feed reads the version again within TTL_CACHE_MS.
        expect(group.locator("#banner")).to_have_text(OTHER_VERSION, timeout=20_000)
        expect(group.locator("#banner")).not_to_have_text(UNREACHABLE)
        expect(group.locator("#live")).to_have_attribute("data-state", "down")
        expect(row(group, "ghost-1")).to_have_class(re.compile(r"\bunknown\b"))
        expect(group.locator("#consumers .pill.active")).to_have_count(0)
        group.reload()  # the page's own read: a 502 page naming the version
        expect(group.locator(".message")).to_contain_text('written by protocol version "3"')
        admin.set("presence:protocol", "2")
        live(group, path)
        expect(row(group, "ghost-1").locator(".pill")).to_have_text("active")


def test_a_page_drops_consumers_lost_in_an_empty_restart(
    browser: Browser,
    outage_server: RedisServer,
    outage_service: ServeProcess,
    outage: RedisPresenceRegistry,
) -> None:
    ghosts(outage)
    outage.heartbeat("orders", "ghosts", "survivor", 0, now_ns=4_000_000_000_000 * MS)
    outage.heartbeat("orders", "vanished", "ghost-3", 0, now_ns=4_000_000_000_000 * MS)
    with (
        open_page(browser, outage_service.base_url) as group,
        open_page(browser, outage_service.base_url) as gone,
        open_page(browser, outage_service.base_url) as overview,
    ):
        live(group, "/group?queue=orders&group=ghosts")
        live(gone, "/group?queue=orders&group=vanished")
        live(overview, "/")
        expect(row(group, "ghost-1")).to_have_count(1)
        expect(row(gone, "ghost-3")).to_have_count(1)
        ghosts_row = overview.locator("#groups tbody tr").filter(has_text="ghosts")
        expect(ghosts_row.locator("td.num.active")).to_have_text("3")
        settled(group)
        outage_server.stop()
        for page in (group, gone, overview):
            expect(page.locator("#banner")).to_have_text(UNREACHABLE)
        expect(row(gone, "ghost-3").locator(".pill")).to_have_text("unknown")
        outage_server.restart()  # the same port, no data: every consumer is gone
        again = RedisPresenceRegistry.from_url(outage_server.url, max_future_ms=None)
        try:
            again.heartbeat("orders", "ghosts", "survivor", 0, now_ns=4_000_000_000_000 * MS)
        finally:
            again.close()
        deadline_ms = 10_000
        for page in (group, overview):
            expect(page.locator("#live")).to_have_attribute(
                "data-state", "live", timeout=deadline_ms
            )
            expect(page.locator("#banner")).to_be_hidden(timeout=deadline_ms)
        expect(row(group, "ghost-1")).to_have_count(0, timeout=deadline_ms)
        expect(row(group, "ghost-2")).to_have_count(0)
        expect(row(group, "survivor").locator(".pill")).to_have_text("active")
        expect(group.locator(".unknown")).to_have_count(0)
        expect(ghosts_row.locator("td.num.active")).to_have_text("1", timeout=deadline_ms)
        expect(overview.locator(".unknown")).to_have_count(0)
        # A group that lost every consumer: its page empties (it no longer exists).
        expect(row(gone, "ghost-3")).to_have_count(0, timeout=deadline_ms)
        expect(gone.locator("#consumers-empty")).to_be_visible()
        expect(gone.locator('[data-total="nobody_reading"]')).to_be_visible()
        expect(gone.locator("#live")).to_have_attribute("data-state", "live")
        expect(overview.locator("#groups tbody tr").filter(has_text="vanished")).to_have_count(0)
        for page in (group, gone, overview):
            assert same_document(page)


def test_a_charts_now_follows_the_cards_and_rows(page: Page, writer: RedisPresenceRegistry) -> None:
    """Issue 30 item 6: a chart kept "2 now" under a "0 active" card. Here: two consumers
    of a group leave under its open page, then one comes back: the chart's caption, label
    and last point say what the card says; the groups page's sparkline follows its row."""
    future = 4_000_000_000_000 * MS
    for name in ("a", "b"):
        writer.heartbeat("charts", "now", name, 0, now_ns=future)
    live(page, "/group?queue=charts&group=now")
    chart = page.locator("#active-chart svg")
    now = page.locator("#active-chart figcaption")
    active = page.locator('#group-stats [data-total="active"] .n')
    expect(active).to_have_text("2")
    expect(now).to_have_text(re.compile(r"\b2 now\b"))
    expect(chart).to_have_accessible_name(re.compile(r"\b2 now\b"))
    for name in ("a", "b"):
        writer.deregister("charts", "now", name)
    expect(active).to_have_text("0", timeout=5_000)
    expect(now).to_have_text(re.compile(r"\b0 now\b"))
    expect(chart).to_have_accessible_name(re.compile(r"\b0 now\b"))
    last = page.evaluate(
        "() => document.querySelector('#active-chart polyline.sure')"
        ".getAttribute('points').trim().split(' ').pop()"
    )
    assert last == f"600,{chart.get_attribute('data-scale')}"  # y = scale - count: 0
    writer.heartbeat("charts", "now", "a", 0, now_ns=future)
    expect(now).to_have_text(re.compile(r"\b1 now\b"), timeout=5_000)
    assert same_document(page)
    page.goto("/?group=now")
    spark = page.locator("#groups tbody tr").filter(has_text="charts").locator("svg.spark")
    expect(spark).to_have_accessible_name(re.compile(r"\b1 now\b"))
    writer.heartbeat("charts", "now", "b", 0, now_ns=future)
    row = page.locator("#groups tbody tr").filter(has_text="charts")
    expect(row.locator("td.num.active")).to_have_text("2", timeout=5_000)
    expect(spark).to_have_accessible_name(re.compile(r"\b2 now\b"))
    writer.deregister("charts", "now", "a")
    writer.deregister("charts", "now", "b")


def test_a_consumer_that_left_shows_what_it_described_itself_with(
    page: Page, writer: RedisPresenceRegistry
) -> None:
    """Issue 30 item 6: a consumer that left said "stored none" on its page. Its host, pid
    and version now come from its `left` entry of the event log, as text (a hostile host
    included), with when it left."""
    writer.heartbeat("gone", "away", "w1", 0)
    writer.describe("gone", "away", "w1", {"host": HOSTILE, "pid": "4242", "version": "9.9"})
    writer.deregister("gone", "away", "w1")
    page.goto("/consumer?queue=gone&group=away&consumer=w1")
    expect(page.locator("#not-tracked")).to_be_visible()
    expect(page.locator("#meta-from-log")).to_contain_text("From the event log")
    expect(page.locator("#meta-from-log")).to_contain_text("when it left, at 20")
    facts = page.locator("#consumer-meta dd.v")
    expect(facts).to_have_text([HOSTILE, "4242", "9.9"])
    expect(page.locator("#meta-empty")).to_have_count(0)


def test_the_cards_never_contradict_the_table_after_an_empty_restart(
    browser: Browser,
    outage_server: RedisServer,
    outage_service: ServeProcess,
    outage: RedisPresenceRegistry,
) -> None:
    """Issue 30 item 6: the groups page's cards said 29,148 active above an empty table
    after an empty restart. Here: 3 active, Redis restarts empty under the open page, one
    consumer beats again: the cards say 1 (or that they are recounting), never 3."""
    ghosts(outage)
    outage.heartbeat("orders", "ghosts", "survivor", 0, now_ns=4_000_000_000_000 * MS)
    with open_page(browser, outage_service.base_url) as overview:
        live(overview, "/")
        expect(card(overview, "active").locator(".n")).to_have_text("3")
        outage_server.stop()
        expect(overview.locator("#banner")).to_have_text(UNREACHABLE)
        outage_server.restart()
        again = RedisPresenceRegistry.from_url(outage_server.url, max_future_ms=None)
        try:
            again.heartbeat("orders", "ghosts", "survivor", 0, now_ns=4_000_000_000_000 * MS)
        finally:
            again.close()
        ghosts_row = overview.locator("#groups tbody tr").filter(has_text="ghosts")
        expect(ghosts_row.locator("td.num.active")).to_have_text("1", timeout=10_000)
        expect(overview.locator("#live")).to_have_attribute("data-state", "live")
        expect(card(overview, "active").locator(".n")).to_have_text("1")
        expect(card(overview, "groups").locator(".n")).to_have_text("1")
        expect(overview.locator("#recounting")).to_be_hidden()
        assert same_document(overview)


def test_a_restore_is_recounted_and_its_idle_groups_raise_the_alarm(
    browser: Browser,
    outage_server: RedisServer,
    outage_service: ServeProcess,
    outage: RedisPresenceRegistry,
) -> None:
    """Issue 30 item 6: after a restore the cards said 0 groups and 0 nobody reading, with
    no alarm colour, above 200 restored rows. Here: the page is open on an empty Redis;
    Redis restarts with 200 consumers nobody reads in 20 groups (their keys, the epoch
    marker among them, restored as a backup would restore them): the alarm card counts the
    20 groups, red."""
    old = 1_700_000_000_000 * MS  # long expired: nobody reads these groups
    outage.heartbeat_many(
        [("restored", f"g{i % 20:02}", f"w{i:03}", 0) for i in range(200)], now_ns=old
    )
    client = outage_server.client()
    backup = {key: dumped for key in client.keys("*") if (dumped := client.dump(key))}
    client.flushall()
    with open_page(browser, outage_service.base_url) as overview:
        live(overview, "/")
        expect(card(overview, "groups").locator(".n")).to_have_text("0")
        outage_server.stop()
        expect(overview.locator("#banner")).to_have_text(UNREACHABLE)
        outage_server.restart()
        restoring = outage_server.client()
        for key, value in backup.items():
            restoring.restore(key, 0, value)
        restoring.close()
        expect(overview.locator("#groups tbody tr")).to_have_count(20, timeout=10_000)
        nobody = card(overview, "nobody_reading")
        expect(nobody).to_have_class(re.compile(r"\balarm\b"))
        expect(nobody.locator(".n")).to_have_text(re.compile(r"^(20|≥ 20)$"))
        expect(card(overview, "groups").locator(".n")).to_have_text(re.compile(r"^(20|…)$"))
        expect(card(overview, "groups").locator(".n")).to_have_text("20", timeout=10_000)
        assert same_document(overview)
    client.close()

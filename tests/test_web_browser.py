"""The dashboard in a real browser: Debian's chromium driven by Playwright, against a real
`redis-presence serve` and a real redis-server with demo broker processes beating.

One server, one service and one browser serve the whole module; every test opens its own
browser context (fresh cookies and credentials) and uses groups no other test touches.
Waits are Playwright's auto-retrying expectations with a deadline, never fixed sleeps.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from playwright.sync_api import (
    Browser,
    ConsoleMessage,
    Dialog,
    Error,
    Locator,
    Page,
    expect,
    sync_playwright,
)
from servers import RedisServer
from waiting import wait_until
from webservers import ROOT, Broker, ServeProcess, need_tool

from redis_presence import PresenceState, RedisPresenceRegistry
from redis_presence.web.security import CONTENT_SECURITY_POLICY

TTL_MS = 2_000
MS = 1_000_000
TOKEN = "browser-t0ken"
HOSTILE = "<img src=x onerror=alert(1)>"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
_SERVICES: list[ServeProcess] = []
SCREENSHOT_ENV = "REDIS_PRESENCE_SCREENSHOTS"
"""Set to a directory (e.g. docs) to keep the screenshots the tests take."""

pytestmark = [pytest.mark.slow, pytest.mark.redis_server, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def redis_url_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with RedisServer(dir=tmp_path_factory.mktemp("redis-browser")) as server:
        yield server.url


@pytest.fixture(scope="module")
def writer(redis_url_module: str) -> Iterator[RedisPresenceRegistry]:
    # Some rows are stamped far in the future so that they stay active for the whole test:
    # the clock guard, which would refuse them, is off for this writer.
    registry = RedisPresenceRegistry.from_url(redis_url_module, max_future_ms=None)
    registry.set_ttl(TTL_MS)  # what the brokers, the service and its events share
    try:
        yield registry
    finally:
        registry.close()


@pytest.fixture(scope="module")
def service(redis_url_module: str, writer: RedisPresenceRegistry) -> Iterator[ServeProcess]:
    with ServeProcess(
        redis_url_module,  # no --ttl-ms: the shared TTL
        env={"REDIS_PRESENCE_AUTH_TOKEN": TOKEN},
        token=TOKEN,
    ) as serve:
        _SERVICES.append(serve)
        yield serve


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    executable = need_tool("chromium", "chromium")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        try:
            yield chromium
        finally:
            chromium.close()


@contextlib.contextmanager
def open_page(browser: Browser, base_url: str) -> Iterator[Page]:
    """A page in a fresh browser context on `base_url` that fails its test when a name ran
    as code, the page's script failed, or the browser refused anything under the page's
    Content-Security-Policy."""
    context = browser.new_context(
        base_url=base_url,
        http_credentials={"username": "ops", "password": TOKEN},
        viewport={"width": 1280, "height": 860},
    )
    context.set_default_timeout(10_000)
    page = context.new_page()
    dialogs: list[str] = []
    errors: list[str] = []
    refused: list[str] = []

    def refuse(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    def console(message: ConsoleMessage) -> None:
        if message.type == "error" and "Content Security Policy" in message.text:
            refused.append(message.text)

    page.on("dialog", refuse)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", console)
    reads: list[str] = []
    page.on(
        "request",
        lambda request: (
            reads.append(request.url)
            if request.headers.get("accept") == "application/json"
            else None
        ),
    )
    page.__dict__["json_reads"] = reads
    page.__dict__["csp_refused"] = refused
    try:
        yield page
    finally:
        context.close()
    assert dialogs == [], "a name ran as code"
    assert errors == [], "the page's script failed"
    assert refused == [], "the browser refused something under the page's CSP"


@pytest.fixture
def page(browser: Browser, service: ServeProcess) -> Iterator[Page]:
    with open_page(browser, service.base_url) as opened:
        yield opened


def live(page: Page, path: str) -> None:
    """Open `path` and wait until its event stream is connected; mark the document so a
    reload would show."""
    page.goto(path)
    try:
        expect(page.locator("#live")).to_have_attribute("data-state", "live", timeout=10_000)
    except AssertionError as exc:
        log = _SERVICES[-1].stderr[-4000:] if _SERVICES else ""
        raise AssertionError(f"{exc}\nservice log:\n{log}") from None
    page.evaluate("window.__same_document = true")


def same_document(page: Page) -> bool:
    return bool(page.evaluate("window.__same_document === true"))


def json_reads(page: Page) -> int:
    """How many times the page's script read its JSON twin (a read of what it shows)."""
    return len(page.__dict__["json_reads"])


def settled(page: Page) -> int:
    """Wait for the one read a page takes when its stream opens; how many reads so far."""
    wait_until(lambda: json_reads(page) >= 1, timeout_s=10, what="the page's catch-up read")
    page.wait_for_load_state("networkidle")
    return json_reads(page)


def row(page: Page, consumer: str) -> Locator:
    return page.locator("#consumers tbody tr").filter(
        has=page.locator("td.consumer", has_text=consumer)
    )


def beating(writer: RedisPresenceRegistry, *consumers: str) -> None:
    """Wait until every named consumer has beaten (broker processes take a moment)."""
    wait_until(
        lambda: set(consumers) <= {r.consumer for r in writer.snapshot(ttl_ms=TTL_MS)},
        timeout_s=20,
        what=f"{consumers} to beat",
    )


def keep_screenshot(page: Page, tmp_path: Path, name: str) -> Path:
    shot = tmp_path / name
    page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 10_000
    keep = os.environ.get(SCREENSHOT_ENV)
    if keep:
        shutil.copyfile(shot, ROOT / keep / name)
    return shot


def test_the_page_asks_for_the_token(browser: Browser, service: ServeProcess) -> None:
    context = browser.new_context(base_url=service.base_url)
    try:
        response = context.request.get("/")
        assert response.status == 401
        assert "Basic" in (response.headers.get("www-authenticate") or "")
        # Headless, the browser's credentials prompt has nobody to ask: it gives up.
        with pytest.raises(Error, match="ERR_INVALID_AUTH_CREDENTIALS"):
            context.new_page().goto("/")
    finally:
        context.close()


def test_groups_and_consumers_from_real_brokers(
    page: Page,
    service: ServeProcess,
    redis_url_module: str,
    writer: RedisPresenceRegistry,
    tmp_path: Path,
) -> None:
    brokers = [
        Broker(redis_url_module, name, consumers=n, ttl_ms=TTL_MS, offset=offset).start()
        for name, n, offset in [("broker-a", 4, 0), ("broker-b", 3, 1), ("broker-c", 2, 2)]
    ]
    try:
        beating(writer, "broker-a-c4", "broker-b-c3", "broker-c-c2")
        writer.heartbeat("reports", "nightly", "cron-1", 0, now_ns=1_700_000_000_000 * MS)
        writer.heartbeat("orders", "billing", HOSTILE, 1)
        live(page, "/")
        groups = page.locator("#groups tbody tr")
        expect(groups).to_have_count(5)
        # In the index's order; the group nobody reads marked.
        reports = groups.filter(has_text="reports")
        expect(reports.locator(".badge")).to_have_text("nobody is reading")
        expect(reports).to_have_class("idle")
        billing = groups.filter(has_text="billing")
        expect(billing.locator("td.num.active")).not_to_have_text("0")
        keep_screenshot(page, tmp_path, "dashboard.png")

        billing.get_by_role("link", name="billing").click()
        expect(page.locator(".crumbs")).to_contain_text("orders")
        expect(row(page, "broker-a-c1")).to_have_count(1)
        expect(row(page, "broker-a-c1").locator(".pill")).to_have_text("active")
        # broker_consumers deals a broker's consumers onto the demo groups from its offset.
        expect(row(page, "broker-b-c1")).to_have_count(0)
        expect(row(page, HOSTILE)).to_have_count(1)
        expect(page.locator("#live")).to_have_attribute("data-state", "live")
        keep_screenshot(page, tmp_path, "dashboard-group.png")
    finally:
        for broker in brokers:
            broker.stop()


def test_a_killed_consumer_turns_stale_then_expired_live(
    page: Page, redis_url_module: str, writer: RedisPresenceRegistry
) -> None:
    broker = Broker(redis_url_module, "doomed", consumers=1, ttl_ms=TTL_MS, offset=3).start()
    try:
        beating(writer, "doomed-c1")
        live(page, "/group?queue=payments&group=ledger")
        expect(page.locator("#ttl")).to_have_attribute("data-source", "prefix")
        doomed = row(page, "doomed-c1")
        expect(doomed.locator(".pill")).to_have_text("active")
        ages = doomed.locator("td.age")
        nobody = page.locator('[data-total="nobody_reading"]')
        expect(nobody).to_be_hidden()
        reads = settled(page)
        broker.kill()
        # The stale event is due TTL + 1 ms after the last beat: within a second of it.
        expect(doomed).to_have_class("state-stale changed", timeout=TTL_MS + 1_000)
        expect(doomed.locator(".pill")).to_have_text("stale")
        expect(page.locator('[data-total="stale"] .n')).to_have_text("1")
        expect(doomed).to_have_class("state-expired changed", timeout=TTL_MS + 1_000)
        expect(page.locator('[data-total="expired"] .n')).to_have_text("1")
        expect(page.locator('[data-total="active"] .n')).to_have_text("0")
        expect(nobody).to_be_visible()
        shown = ages.inner_text()
        assert int(shown.removesuffix("s ago")) >= 2 * TTL_MS // 1000
        expect(ages).not_to_have_text(shown, timeout=3_000)  # the age keeps ticking
        assert same_document(page)
        assert json_reads(page) == reads  # applied from the events, nothing read again
    finally:
        broker.stop()


def test_the_overview_follows_the_events(page: Page, writer: RedisPresenceRegistry) -> None:
    writer.heartbeat("audit", "trail", "lonely", 0)
    live(page, "/")
    trail = page.locator("#groups tbody tr").filter(has_text="audit")
    expect(trail.locator("td.num.active")).to_have_text("1")
    reads = settled(page)
    stale = page.locator('#totals [data-total="stale"] .n')
    before = int(stale.inner_text().replace(",", ""))
    # Nobody beats for "lonely": stale, then expired, and its group is nobody's.
    expect(trail.locator("td.num.stale")).to_have_text("1", timeout=TTL_MS + 1_000)
    expect(trail.locator("td.num.active")).to_have_text("0")
    expect(trail.locator(".badge")).to_have_text("nobody is reading")
    expect(trail.locator("td.num.expired")).to_have_text("1", timeout=TTL_MS + 1_000)
    expect(stale).to_have_text(str(before))
    writer.deregister("audit", "trail", "lonely")
    expect(trail).to_have_count(0, timeout=3_000)
    writer.heartbeat("audit", "fresh", "newcomer", 0)
    fresh = page.locator("#groups tbody tr").filter(has_text="fresh")
    expect(fresh.locator("td.num.active")).to_have_text("1", timeout=3_000)
    assert same_document(page)
    # The events of the groups it shows moved the page; a group it did not show (joined)
    # made it read its page once more (the page holds no other group's counts).
    assert json_reads(page) == reads + 1
    writer.deregister("audit", "fresh", "newcomer")


def test_a_deregistered_consumer_disappears_live(page: Page, writer: RedisPresenceRegistry) -> None:
    future = 4_000_000_000_000 * MS  # beats from the future stay active however long this takes
    writer.heartbeat("orders", "shipping", "leaver", 2, now_ns=future)
    writer.heartbeat("orders", "shipping", "stayer", 1, now_ns=future)
    live(page, "/group?queue=orders&group=shipping")
    expect(row(page, "leaver")).to_have_count(1)
    reads = settled(page)
    writer.deregister("orders", "shipping", "leaver")
    expect(row(page, "leaver")).to_have_count(0, timeout=3_000)
    expect(row(page, "stayer")).to_have_count(1)
    expect(page.locator('[data-total="active"] .n')).to_have_text("1")
    # Events carry no metadata: the group page reads itself once for the newcomer's.
    with page.expect_request(lambda r: r.headers.get("accept") == "application/json"):
        writer.heartbeat("orders", "shipping", "arrives", 5, now_ns=future)
        expect(row(page, "arrives")).to_have_count(1, timeout=3_000)
    expect(row(page, "arrives").locator("td.num")).to_have_text("5")
    expect(page.locator('[data-total="active"] .n')).to_have_text("2")
    # The rows stay in order: "arrives" before "stayer".
    assert page.locator("#consumers td.consumer").all_inner_texts() == ["arrives", "stayer"]
    assert same_document(page)
    page.wait_for_load_state("networkidle")
    assert json_reads(page) == reads + 1  # that one read, nothing else
    writer.deregister("orders", "shipping", "arrives")
    writer.deregister("orders", "shipping", "stayer")


def test_a_hostile_name_is_shown_as_text(page: Page, writer: RedisPresenceRegistry) -> None:
    evil_queue, evil_group = "<b>q</b>", "g\"'><script>alert(2)</script>"
    writer.heartbeat(evil_queue, evil_group, HOSTILE, 0, now_ns=4_000_000_000_000 * MS)
    live(page, "/")
    expect(page.locator("#groups td.name", has_text="<b>q</b>")).to_have_count(1)
    page.get_by_role("link", name=evil_group).click()
    expect(row(page, HOSTILE)).to_have_count(1)
    assert page.locator("#consumers td.consumer").all_inner_texts() == [HOSTILE]
    assert page.locator("main img").count() == 0
    assert page.locator("main b").count() == 0
    page.locator("#live").wait_for()
    # The script's own rendering (a row built from a joined event) keeps it text too.
    page.evaluate("window.__same_document = true")
    writer.heartbeat(evil_queue, evil_group, HOSTILE + "2", 0, now_ns=4_000_000_000_000 * MS)
    expect(row(page, HOSTILE + "2")).to_have_count(1, timeout=8_000)
    assert page.locator("main img").count() == 0
    assert same_document(page)


def test_filters_and_pagination(page: Page, writer: RedisPresenceRegistry) -> None:
    future = 4_000_000_000_000 * MS  # a beat from the future stays active
    writer.heartbeat_many(
        [("big", "fleet", f"c-{i:03d}", i % 3) for i in range(120)], now_ns=future
    )
    writer.heartbeat("big", "fleet", "zz-expired", 0, now_ns=1_700_000_000_000 * MS)
    live(page, "/group?queue=big&group=fleet")
    rows = page.locator("#consumers tbody tr")
    expect(rows).to_have_count(50)
    expect(rows.first.locator("td.consumer")).to_have_text("c-000")
    page.get_by_role("link", name="Next →").click()
    expect(rows.first.locator("td.consumer")).to_have_text("c-050")
    page.get_by_role("link", name="Next →").click()
    expect(rows).to_have_count(21)
    expect(rows.last.locator("td.consumer")).to_have_text("zz-expired")
    expect(page.get_by_role("link", name="Next →")).to_have_count(0)
    page.get_by_role("link", name="← Previous").click()
    expect(rows.first.locator("td.consumer")).to_have_text("c-050")
    expect(rows).to_have_count(50)

    page.get_by_label("expired").check()
    page.get_by_role("button", name="Filter").click()
    expect(rows).to_have_count(1)
    expect(rows.first.locator("td.consumer")).to_have_text("zz-expired")

    page.goto("/group?queue=big&group=fleet")
    page.get_by_placeholder("name contains…").fill("c-11")
    page.get_by_role("button", name="Filter").click()
    expect(rows).to_have_count(10)

    page.goto("/")
    page.get_by_placeholder("contains…").first.fill("bi")
    page.get_by_role("button", name="Filter").click()
    expect(page.locator("#groups tbody tr")).to_have_count(1)
    page.get_by_placeholder("consumer name contains…").fill("zz-exp")
    page.get_by_role("button", name="Search").click()
    expect(page.locator("#consumers tbody tr")).to_have_count(1)


def test_declared_groups_stuck_consumers_and_metadata(
    page: Page, writer: RedisPresenceRegistry
) -> None:
    future = 4_000_000_000_000 * MS  # a beat from the future stays active
    now = writer.clock_ns()
    writer.expect("vault", "keepers")  # declared, and nobody has ever read it
    writer.expect("vault", "porters")
    writer.heartbeat("vault", "porters", "p1", 0, now_ns=future)
    # Registered 400 s ago holding leases, never progressed: stuck (budget 300 s).
    writer.heartbeat("vault", "guards", "slow", 2, now_ns=now - 400_000 * MS)
    writer.heartbeat("vault", "guards", "slow", 2, now_ns=future)
    writer.heartbeat("vault", "guards", "quick", 1, now_ns=future, progressed=True)
    hostile = {"host": HOSTILE, "cmd": "<script>alert(3)</script>", "zone": "é\nß"}
    assert writer.describe("vault", "guards", "slow", hostile)

    live(page, "/?queue=vault")
    groups = page.locator("#groups tbody tr")
    expect(groups).to_have_count(3)
    # In the index's order; below its minimum (nobody reads it), shown though it has no
    # consumer at all.
    keepers = groups.filter(has_text="keepers")
    expect(keepers.locator("td.num.active")).to_have_text("0")
    expect(keepers.locator("td.num.min")).to_have_text("1")
    expect(keepers.locator(".badge")).to_have_text("nobody is reading")
    porters = groups.filter(has_text="porters")
    expect(porters.locator("td.num.active")).to_have_text("1")
    expect(porters.locator(".badge")).to_have_count(0)
    reads = settled(page)
    # A declared group's last consumer leaves: the row stays, nobody is reading it.
    writer.deregister("vault", "porters", "p1")
    expect(porters.locator(".badge")).to_have_text("nobody is reading", timeout=3_000)
    expect(porters.locator("td.num.active")).to_have_text("0")
    expect(groups).to_have_count(3)
    assert groups.locator("td:nth-child(2)").all_inner_texts() == ["guards", "keepers", "porters"]
    assert same_document(page)
    assert json_reads(page) == reads

    page.goto("/group?queue=vault&group=keepers")
    expect(page.locator('#group-stats [data-total="nobody_reading"]')).to_be_visible()
    expect(page.locator("#consumers tbody tr")).to_have_count(0)

    live(page, "/group?queue=vault&group=guards")
    slow, quick = row(page, "slow"), row(page, "quick")
    expect(slow.locator(".pill.stuck")).to_have_text("stuck")
    expect(quick.locator(".pill.stuck")).to_have_count(0)
    meta = slow.locator("td.meta")
    expect(meta).to_contain_text(HOSTILE)
    expect(meta).to_contain_text("<script>alert(3)</script>")
    assert meta.locator(".k").all_inner_texts() == ["cmd", "host", "zone"]
    assert page.locator("main img").count() == 0
    assert page.locator("main script").count() == 0
    # A newcomer's metadata comes from a read (events carry none), also as text; the
    # stuck mark and the others' metadata stay across the events.
    reads = settled(page)
    writer.heartbeat("vault", "guards", "late", 0, now_ns=future)
    assert writer.describe("vault", "guards", "late", {"note": HOSTILE + "!"})
    expect(row(page, "late").locator("td.meta")).to_have_text(f"note={HOSTILE}!", timeout=5_000)
    expect(slow.locator(".pill.stuck")).to_have_text("stuck")
    expect(meta).to_contain_text(HOSTILE)
    assert page.locator("main img").count() == 0
    assert same_document(page)
    assert json_reads(page) == reads + 1
    for consumer in ("slow", "quick", "late"):
        writer.deregister("vault", "guards", consumer)
    writer.unexpect("vault", "keepers")
    writer.unexpect("vault", "porters")


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
    expect(chart).to_have_attribute("aria-label", re.compile(r"\b2 now\b"))
    for name in ("a", "b"):
        writer.deregister("charts", "now", name)
    expect(active).to_have_text("0", timeout=5_000)
    expect(now).to_have_text(re.compile(r"\b0 now\b"))
    expect(chart).to_have_attribute("aria-label", re.compile(r"\b0 now\b"))
    last = page.evaluate(
        "() => document.querySelector('#active-chart polyline.sure')"
        ".getAttribute('points').trim().split(' ').pop()"
    )
    assert last == "600,118"  # the bottom of the box: 0
    writer.heartbeat("charts", "now", "a", 0, now_ns=future)
    expect(now).to_have_text(re.compile(r"\b1 now\b"), timeout=5_000)
    assert same_document(page)
    page.goto("/?group=now")
    spark = page.locator("#groups tbody tr").filter(has_text="charts").locator("svg.spark")
    expect(spark).to_have_attribute("aria-label", re.compile(r"\b1 now\b"))
    writer.heartbeat("charts", "now", "b", 0, now_ns=future)
    row = page.locator("#groups tbody tr").filter(has_text="charts")
    expect(row.locator("td.num.active")).to_have_text("2", timeout=5_000)
    expect(spark).to_have_attribute("aria-label", re.compile(r"\b2 now\b"))
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


def card(page: Page, name: str) -> Locator:
    return page.locator(f'#totals [data-total="{name}"]')


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


def test_the_dashboard_works_under_its_content_security_policy(
    page: Page, writer: RedisPresenceRegistry
) -> None:
    future = 4_000_000_000_000 * MS
    writer.heartbeat("csp", "strict", "first", 0, now_ns=future)
    for path in ("/", "/group?queue=csp&group=strict"):
        response = page.goto(path)
        assert response is not None
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert response.headers["x-frame-options"] == "DENY"
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["referrer-policy"] == "no-referrer"
    live(page, "/group?queue=csp&group=strict")
    # The stylesheet applies (a same-origin file), and live updates arrive.
    expect(row(page, "first").locator(".pill")).to_have_css("font-weight", "600")
    writer.heartbeat("csp", "strict", "second", 3, now_ns=future)
    expect(row(page, "second").locator("td.num")).to_have_text("3", timeout=5_000)
    writer.deregister("csp", "strict", "first")
    expect(row(page, "first")).to_have_count(0, timeout=5_000)
    assert same_document(page)
    # The policy is enforced: an inline script is refused (and says so on the console).
    page.evaluate(
        """() => {
            const script = document.createElement("script");
            script.textContent = "window.__inline_ran = true";
            document.head.append(script);
        }"""
    )
    refused: list[str] = page.__dict__["csp_refused"]
    wait_until(lambda: refused, timeout_s=5, what="the browser to refuse the inline script")
    assert page.evaluate("window.__inline_ran === undefined")
    assert "inline script" in refused[0]
    refused.clear()  # what the fixture checks: nothing else was refused
    writer.deregister("csp", "strict", "second")


def test_history_pictures_show_hostile_names_as_text(
    page: Page, writer: RedisPresenceRegistry
) -> None:
    """The consumer page, the group page's timeline and chart, and the groups page's
    sparkline, with hostile names: text everywhere, kept on the rows the page's script
    re-renders, and nothing refused under the Content-Security-Policy."""
    queue, group = "<i>hq</i>", "g\"'><svg onload=alert(5)>"
    writer.heartbeat(queue, group, HOSTILE, 2)  # joined now (the server's clock)
    writer.describe(queue, group, HOSTILE, {"host": HOSTILE, "pid": "77", "version": "<b>9</b>"})
    writer.heartbeat(queue, group, "leaver", 0)
    writer.deregister(queue, group, "leaver")
    live(page, f"/?queue={quote(queue, safe='')}")
    settled(page)  # the page's script has re-rendered its rows
    spark = page.locator("#groups tbody tr td.spark svg.spark")
    expect(spark).to_have_count(1)
    assert "active consumers over the last hour" in (spark.get_attribute("aria-label") or "")
    page.get_by_role("link", name=group).click()
    expect(page.locator("#active-chart svg polyline.sure")).to_have_count(1)
    timeline = page.locator("#timeline tbody tr")
    expect(timeline.filter(has_text="left")).to_have_count(1)
    expect(page.locator("#timeline td.consumer", has_text=HOSTILE)).to_have_count(1)
    live(page, page.url)
    settled(page)
    link = row(page, HOSTILE).locator("td.consumer a")
    expect(link).to_have_text(HOSTILE)  # kept on the row the script re-rendered
    link.click()
    expect(page.locator("#consumer-name")).to_have_text(HOSTILE)
    expect(page.locator("#consumer-meta dd")).to_have_text([HOSTILE, "77", "<b>9</b>"])
    expect(page.locator("#consumer-stats [data-total=leases] .n")).to_have_text("2")
    expect(page.locator("#timeline tbody tr").last).to_contain_text("joined")
    assert page.locator("main img, main b, main i, main svg[onload]").count() == 0


def test_active_rows_show_the_ages_and_leases_redis_says_now(
    page: Page, writer: RedisPresenceRegistry
) -> None:
    """Consumers beating every 300 ms under a 2 s TTL, their leases changing at each beat:
    for ~5 s the page shows every active row with an age within the TTL (or none, while
    it reads again), a lease count Redis held within the last second, and the group's
    counts of a snapshot taken at the same time."""
    names = ["beats-a", "beats-b"]
    written: list[tuple[float, str, int]] = []  # (monotonic, consumer, leases)
    stop = threading.Event()

    def beat() -> None:
        n = 0
        while not stop.wait(0.3):
            n += 1
            for name in names:
                writer.heartbeat("live", "truth", name, n % 7 + (names.index(name) * 10))
                written.append((time.monotonic(), name, n % 7 + (names.index(name) * 10)))

    for name in names:
        writer.heartbeat("live", "truth", name, names.index(name) * 10)
        written.append((time.monotonic(), name, names.index(name) * 10))
    beater = threading.Thread(target=beat, daemon=True)
    beater.start()
    wrong: list[str] = []
    unknown = 0
    try:
        live(page, "/group?queue=live&group=truth")
        for name in names:
            expect(row(page, name).locator(".pill")).to_have_text("active")
        end = time.monotonic() + 5
        while time.monotonic() < end:
            shown = page.evaluate(
                """() => [...document.querySelectorAll('#consumers tbody tr')].map((tr) => [
                    tr.querySelector('td.consumer').textContent, tr.dataset.state,
                    tr.querySelector('td.age').textContent,
                    tr.querySelector('td.num').textContent,
                    document.querySelector('#group-stats [data-total="active"] .n').textContent,
                ])"""
            )
            at = time.monotonic()
            active = sum(r.state is PresenceState.ACTIVE for r in writer.snapshot(queue="live"))
            for consumer, state, age, leases, cards in shown:
                if state == "active" and not age.endswith("s ago"):
                    unknown += 1  # past the TTL on the page's clock, waiting for a read
                elif state == "active" and int(age.removesuffix("s ago")) > TTL_MS // 1000:
                    wrong.append(f"{consumer} active, shown {age}")
                recent = {n for t, c, n in list(written) if c == consumer and t >= at - 1.0}
                if int(leases) not in recent:
                    wrong.append(f"{consumer} shows {leases} leases, Redis held {recent}")
                if int(cards) != active:
                    wrong.append(f"the cards say {cards} active, a snapshot {active}")
            page.wait_for_timeout(250)
    finally:
        stop.set()
        beater.join()
        for name in names:
            writer.deregister("live", "truth", name)
    assert unknown <= 2, f"{unknown} active ages shown as unknown: the rows are not read again"
    ages = [w for w in wrong if "active, shown" in w]
    assert wrong == [], (
        f"{len(wrong)} wrong readings ({len(ages)} ages), first: {(ages[:3] + wrong)[:6]}"
    )

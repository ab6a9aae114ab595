"""The dashboard in a real browser: Debian's chromium driven by Playwright, against a real
`redis-presence serve` and a real redis-server with demo broker processes beating.

One server, one service and one browser serve the whole module; every test opens its own
browser context (fresh cookies and credentials) and uses groups no other test touches.
Waits are Playwright's auto-retrying expectations with a deadline, never fixed sleeps.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from urllib.parse import quote

import pytest
from browser_pages import (  # noqa: F401 (the fixtures, used by name)
    HOSTILE,
    MS,
    TTL_MS,
    beating,
    browser,
    json_reads,
    keep_screenshot,
    live,
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
    Error,
    Page,
    expect,
)
from waiting import wait_until
from webservers import Broker, ServeProcess

from redis_presence import PresenceState, RedisPresenceRegistry
from redis_presence.web.security import CONTENT_SECURITY_POLICY

pytestmark = [pytest.mark.slow, pytest.mark.redis_server, pytest.mark.timeout(120)]


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
    verdict = trail.locator(".pill.verdict")  # drawn by the page's script, from the JSON
    expect(verdict).to_have_text("STOPPED")
    expect(verdict).to_have_attribute("title", "nobody reading: 0 active (1 stale)")
    expect(trail.locator(".pill.verdict.stopped")).to_have_count(1)
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

    live(page, "/?queue=vault&sort=queue")
    groups = page.locator("#groups tbody tr")
    expect(groups).to_have_count(3)
    # In the index's order (`sort=queue`; the default lists keepers first: STOPPED); below
    # its minimum (nobody reads it), shown though it has no consumer at all.
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
    expect(spark).to_have_accessible_name(re.compile("active consumers over the last hour"))
    page.get_by_role("link", name=group).click()
    expect(page.locator("#active-chart svg polyline.sure")).to_have_count(1)
    timeline = page.locator("#timeline tbody tr")
    expect(timeline.filter(has_text="left")).to_have_count(1)
    # its join (a derived "stale" follows when the page comes later than the 2 s TTL)
    expect(page.locator("#timeline tr.event-joined td.consumer", has_text=HOSTILE)).to_have_count(1)
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
                if state == "active" and age.startswith("≤ "):
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

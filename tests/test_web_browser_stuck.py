"""Issue 34 items 2, 8 and 9 in a real browser: Debian's chromium driven by Playwright,
against a real `redis-presence serve` and redis-server, under the service's CSP (the
`page` fixtures fail a test on any refusal, script error or name run as code), at desktop
width and at 390 px.

A stuck consumer here registered 10 minutes ago and beats with leases and no progress,
stamped an hour ahead so that it stays active for the whole test.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator

import pytest
from browser_pages import (  # noqa: F401 (the fixtures, used by name)
    MS,
    browser,
    live,
    open_page,
    redis_url_module,
    row,
    service,
    settled,
    writer,
)
from playwright.sync_api import Browser, Page, expect
from webservers import ServeProcess

from redis_presence import RedisPresenceRegistry

pytestmark = [pytest.mark.slow, pytest.mark.redis_server, pytest.mark.timeout(120)]

WIDTHS = [pytest.param(1280, id="desktop"), pytest.param(390, id="phone")]
HOUR_MS = 3_600_000


@pytest.fixture(params=WIDTHS)
def page(request: pytest.FixtureRequest, browser: Browser, service: ServeProcess) -> Iterator[Page]:
    with open_page(browser, service.base_url) as opened:
        opened.set_viewport_size({"width": request.param, "height": 860})
        yield opened


@pytest.fixture(scope="module")
def fleet(writer: RedisPresenceRegistry) -> RedisPresenceRegistry:
    now = writer.clock_ns()
    for group, name, leases in [("jam", "stuck-a", 3), ("jam", "fine", 0), ("flow", "ok", 2)]:
        writer.heartbeat("stk", group, name, leases, now_ns=now - 600_000 * MS)
        writer.heartbeat(
            "stk", group, name, leases, now_ns=now + HOUR_MS * MS, progressed=name == "ok"
        )
    return writer


def fits(page: Page) -> None:
    """The page does not scroll sideways (a wide table scrolls inside its own box)."""
    size = page.viewport_size
    assert size is not None
    page.wait_for_load_state("networkidle")  # a page its script is re-rendering settles
    width = page.evaluate("document.documentElement.scrollWidth")
    wide = page.evaluate(
        """(w) => [...document.querySelectorAll('body *')]
            .filter((e) => e.getBoundingClientRect().right > w + 1)
            .slice(0, 8).map((e) => e.tagName + '.' + e.className + '#' + e.id)""",
        size["width"],
    )
    assert width <= size["width"], (width, wide)


def test_a_stuck_consumer_is_two_clicks_from_the_overview(
    page: Page, fleet: RedisPresenceRegistry
) -> None:
    live(page, "/?queue=stk")
    stuck = page.locator('#totals [data-total="stuck"]')
    expect(stuck).to_have_class(re.compile(r"\balarm\b"))
    assert int(stuck.locator(".n").inner_text().replace(",", "").lstrip("≥ ")) >= 1
    jam = page.locator("#groups tbody tr[data-group=jam]")
    expect(jam.locator("td.stuck")).to_have_text("1")
    expect(page.locator("#groups tbody tr[data-group=flow] td.stuck")).to_have_text("0")
    fits(page)

    # One click: the groups with a stuck consumer (the card's other link lists the consumers).
    stuck.get_by_role("link", name="stuck consumers").click()
    expect(page).to_have_url(re.compile(r"/\?stuck=1$"))
    expect(page.locator("#groups tbody tr[data-group=jam]")).to_have_count(1)
    expect(page.locator("#groups tbody tr[data-group=flow]")).to_have_count(0)
    expect(page.locator("input[name=stuck]")).to_be_checked()

    page.locator("#groups tbody tr[data-group=jam] td.stuck a").click()  # two: its stuck ones
    expect(page.locator("#consumers tbody tr")).to_have_count(1)
    only = row(page, "stuck-a")
    expect(only.locator(".pill.stuck")).to_be_visible()
    expect(only.locator(".no-progress")).to_have_text(re.compile(r"^no progress for 1[01] min$"))
    expect(page.locator('#group-stats [data-total="stuck"] .n')).to_have_text("1")
    fits(page)


def test_a_live_group_page_says_how_long_without_progress(
    page: Page, fleet: RedisPresenceRegistry
) -> None:
    # "fine" holds no lease: not stuck, however long without progress.
    live(page, "/group?queue=stk&group=jam")
    text = row(page, "stuck-a").locator(".no-progress")
    expect(text).to_have_text(re.compile(r"^no progress for \d+ min$"))
    expect(row(page, "fine").locator(".no-progress")).to_have_count(0)
    expect(page.locator("#group-history .note").last).to_have_text(
        re.compile(r"^These transitions were read with the page: reload it for newer ones\. ")
    )


def test_a_parameter_a_page_does_not_take_is_a_page_that_says_so(page: Page) -> None:
    response = page.goto("/consumers?queue=stk&idle=1")
    assert response is not None
    assert response.status == 400
    expect(page.locator(".error .message")).to_contain_text("takes no parameter 'idle'")
    fits(page)
    page.locator("#error-see").click()
    expect(page).to_have_url(re.compile(r"/consumers\?queue=stk$"))
    expect(page.locator("#consumers")).to_be_visible()


def test_a_missing_groups_page_links_to_its_queues_groups(
    page: Page, fleet: RedisPresenceRegistry
) -> None:
    response = page.goto("/group?queue=stk&group=nope")
    assert response is not None
    assert response.status == 404
    see = page.locator("#error-see")
    expect(see).to_have_text("The groups of stk")
    see.click()
    expect(page.locator("#groups tbody tr[data-queue=stk][data-group=jam]")).to_have_count(1)
    expect(page.locator("input[name=queue]")).to_have_value("stk")


def test_the_consumer_page_is_live_and_says_so(page: Page, writer: RedisPresenceRegistry) -> None:
    stop = threading.Event()
    size = page.viewport_size
    assert size is not None
    name = f"w-live-{size['width']}"  # one per width: its own history

    def beat() -> None:
        while not stop.is_set():
            writer.heartbeat("stk", "one", name, 1)
            stop.wait(0.3)

    writer.heartbeat("stk", "one", name, 1)
    beater = threading.Thread(target=beat, daemon=True)
    beater.start()
    try:
        live(page, f"/consumer?queue=stk&group=one&consumer={name}")
        expect(page.locator("#live")).to_have_text("live")
        age = page.locator('#consumer-stats [data-total="age"] .n')
        end = time.monotonic() + 3
        while time.monotonic() < end:  # beats every 300 ms under a 2 s TTL: a fresh age
            assert re.fullmatch(r"[01]s ago", age.inner_text()), age.inner_text()
            page.wait_for_timeout(250)
        fits(page)
    finally:
        stop.set()
        beater.join()
    writer.deregister("stk", "one", name)  # its `left` event reads the page again
    expect(page.locator("#not-tracked")).to_be_visible()
    expect(page.locator("#timeline .pill.left")).to_have_count(1)
    expect(page.locator("#live")).to_have_attribute("data-state", "live")


def test_an_active_row_past_its_ttl_shows_an_age_not_an_ellipsis(
    page: Page, writer: RedisPresenceRegistry
) -> None:
    """Between a last beat's TTL running out on the page's clock and the row's next read
    or `stale` event, its last-seen cell is a bound (`≤ 3s ago`), never a bare `…` (the
    demo showed that for every consumer of a crashed broker). The page is made to hold a
    beat 2.5 s old for an active row (2 s TTL) that no read or event corrects at once."""
    size = page.viewport_size
    assert size is not None
    group = f"halt-{size['width']}"
    writer.heartbeat("stk", group, "quiet", 0, now_ns=writer.clock_ns() + HOUR_MS * MS)
    live(page, f"/group?queue=stk&group={group}")
    settled(page)  # its catch-up read landed: nothing re-renders the row meanwhile
    cell = row(page, "quiet").locator("td.age")
    expect(cell).to_have_text("0s ago")
    # A beat 2.5 s old, of a registration no `rows` message is about (they leave it be).
    cell.evaluate(
        """td => {
            td.dataset.hb = String((Date.now() - 2500) * 1e6);
            td.parentElement.dataset.registered = "1";
        }"""
    )
    expect(cell).to_have_text(re.compile(r"^≤ [23]s ago$"))
    assert row(page, "quiet").get_attribute("data-state") == "active"
    assert "at most this long ago" in (cell.get_attribute("title") or "")


def test_a_live_stuck_only_list_takes_in_no_consumer_an_event_brings(
    page: Page, browser: Browser, service: ServeProcess, fleet: RedisPresenceRegistry
) -> None:
    """No event says a consumer is stuck: a `stuck=1` list shows what its reads say, and a
    consumer that joins (seen live on the unfiltered list beside it) is not added."""
    size = page.viewport_size
    assert size is not None
    newcomer = f"newcomer-{size['width']}"
    live(page, "/consumers?queue=stk&stuck=1")
    expect(page.locator("#consumers tbody tr")).to_have_count(1)
    with open_page(browser, service.base_url) as beside:
        live(beside, "/consumers?queue=stk")
        fleet.heartbeat("stk", "jam", newcomer, 4)
        expect(row(beside, newcomer)).to_have_count(1)  # the event reached both streams
        settled(page)
        expect(page.locator("#consumers tbody tr")).to_have_count(1)
        expect(row(page, "stuck-a")).to_have_count(1)
    fleet.deregister("stk", "jam", newcomer)

"""The fleet pages of issue 34 (items 4 and 5) in Chromium, under the service's CSP, on a
desktop (1280 px) and a phone (390 px): `/hosts` (consumers by host, by version) and
`/events` (the fleet's events since a time), each name shown as text, nothing refused by
the CSP, no sideways scroll, and one click from a roll-up row to the consumers it counts.
The browser, the service and the Redis server are browser_pages.py's fixtures."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
from browser_pages import (  # the fixtures, shared by name
    HOSTILE,
    MS,
    browser,  # noqa: F401
    keep_screenshot,
    live,
    page,  # noqa: F401
    redis_url_module,  # noqa: F401
    same_document,
    service,  # noqa: F401
    settled,
    writer,  # noqa: F401
)
from playwright.sync_api import Page, expect

from redis_presence import RedisPresenceRegistry

pytestmark = [pytest.mark.slow, pytest.mark.redis_server, pytest.mark.timeout(120)]

QUEUE = "fleet-pages"
FUTURE_NS = 4_000_000_000_000 * MS  # beats from the future stay active
WIDTHS = [pytest.param(w, id=f"{w}px") for w in (390, 1280)]
SIDEWAYS = "() => document.documentElement.scrollWidth - window.innerWidth"


@pytest.fixture(scope="module")
def fleet(writer: RedisPresenceRegistry) -> Iterator[None]:
    rows = [("billing", "w-1", "web-1", "1.2"), ("billing", "w-2", "web-1", "1.2")]
    rows += [(HOSTILE, HOSTILE, HOSTILE, "1.1")]
    for group, consumer, host, version in rows:
        writer.heartbeat(QUEUE, group, consumer, 2, now_ns=FUTURE_NS)
        writer.describe(QUEUE, group, consumer, {"host": host, "version": version})
    writer.heartbeat(QUEUE, "billing", "plain")  # at the server's clock: it logs `joined`
    writer.deregister(QUEUE, "billing", "plain")  # and `left`
    try:
        yield
    finally:
        for group, consumer, _, _ in rows:
            writer.deregister(QUEUE, group, consumer)


def opened(page: Page, width: int, path: str) -> None:
    page.set_viewport_size({"width": width, "height": 844 if width < 500 else 860})
    response = page.goto(path)
    assert response is not None
    assert response.status == 200, response.status
    assert page.evaluate(SIDEWAYS) <= 0, "the page scrolls sideways"
    assert page.locator("main img, main script").count() == 0  # names are text


@pytest.mark.parametrize("width", WIDTHS)
def test_the_hosts_page(page: Page, fleet: None, width: int, tmp_path: Path) -> None:
    opened(page, width, "/hosts?" + urlencode({"queue": QUEUE}))
    rows = page.locator("#rollup tbody tr")
    expect(rows).to_have_count(2)
    hosts = page.locator("#rollup td.name a")
    assert hosts.all_inner_texts() == [HOSTILE, "web-1"]
    web_1 = rows.nth(1)
    expect(web_1.locator('td[data-label="active"]')).to_have_text("2")
    expect(web_1.locator('td[data-label="leases"]')).to_have_text("4")
    expect(web_1.locator('td[data-label="groups"]')).to_have_text("1")
    keep_screenshot(page, tmp_path, f"hosts-{width}.png")
    # The same page by version: "is 1.1 drained?" (no: its consumer is active).
    opened(page, width, "/hosts?" + urlencode({"queue": QUEUE, "by": "version"}))
    assert page.locator("#rollup td.name a").all_inner_texts() == ["1.1", "1.2"]
    expect(page.locator("#rollup .pill.drained")).to_have_count(0)
    # One click to the consumers it counts, searched by that value, metadata shown.
    page.locator("#rollup td.name a", has_text="1.2").click()
    expect(page.locator("#consumers tbody tr")).to_have_count(2)
    expect(page.locator("#meta-filter")).to_contain_text("version = 1.2")
    expect(page.locator("#consumers td.meta").first).to_contain_text("host=web-1")
    assert page.evaluate(SIDEWAYS) <= 0


@pytest.mark.parametrize("width", WIDTHS)
def test_the_events_page(page: Page, fleet: None, width: int, tmp_path: Path) -> None:
    opened(page, width, "/events?" + urlencode({"queue": QUEUE}))
    events = page.locator("#events tbody tr")
    kinds = events.evaluate_all("(rows) => rows.map((r) => r.dataset.kind)")
    assert "joined" in kinds
    assert "left" in kinds
    keep_screenshot(page, tmp_path, f"events-{width}.png")
    # Filtered by kind from the form: the left consumer alone.
    page.locator('input[name="kind"][value="left"]').check()
    page.locator("form.filters button").click()
    expect(page).to_have_url(re.compile(r"[?&]kind=left"))
    expect(events.locator("td.consumer", has_text="plain")).to_have_count(1)
    kinds = events.evaluate_all("(rows) => rows.map((r) => r.dataset.kind)")
    assert set(kinds) == {"left"}
    assert page.evaluate(SIDEWAYS) <= 0
    # "Later events" goes on from the page's cursor with the same filters.
    page.locator('#pager a[rel="next"]').click()
    expect(page.locator("#events-note")).to_contain_text("after the previous page")
    expect(page).to_have_url(re.compile(r"[?&]cursor=[^&]+&.*kind=left"))


# Every consumer name a row was added to the table with, since the page opened.
WATCH_ROWS = """() => {
  window.__added = [];
  new MutationObserver((changes) => {
    for (const change of changes) {
      for (const node of change.addedNodes) {
        const cell = node.querySelector && node.querySelector("td.consumer");
        if (cell) window.__added.push(cell.textContent);
      }
    }
  }).observe(document.querySelector("#consumers tbody"), {childList: true, subtree: true});
}"""


def test_a_metadata_search_stays_true_live(
    page: Page, fleet: None, writer: RedisPresenceRegistry
) -> None:
    live(page, "/consumers?" + urlencode({"queue": QUEUE, "host": "web-1"}))
    settled(page)
    rows = page.locator("#consumers tbody tr")
    expect(rows).to_have_count(2)
    page.evaluate(WATCH_ROWS)
    try:
        # Two joins: events carry no metadata, so neither may be shown from its event; the
        # page's own read (with the search) says which one matches.
        writer.heartbeat(QUEUE, "billing", "w-9", 0, now_ns=FUTURE_NS)
        writer.describe(QUEUE, "billing", "w-9", {"host": "web-9"})
        writer.heartbeat(QUEUE, "billing", "w-3", 0, now_ns=FUTURE_NS)
        writer.describe(QUEUE, "billing", "w-3", {"host": "web-1"})
        expect(page.locator("#consumers td.consumer", has_text="w-3")).to_have_count(1)
        expect(rows).to_have_count(3)
        assert "w-9" not in page.evaluate("window.__added"), "shown from its event"
        assert same_document(page)
    finally:
        writer.deregister(QUEUE, "billing", "w-9")
        writer.deregister(QUEUE, "billing", "w-3")

"""Every page on a phone (390 px), a tablet (800 px) and a desktop (1280 px), in chromium
(the groups page, a group's, the consumer list, a consumer's, an error).

The document never scrolls sideways, the key figures (the counts, the live badge, the
names) are on screen and not clipped, ordinary words are never broken mid-word, and a
200-character hostile name wraps and shows as text. The browser, the service and the
Redis server are test_web_browser.py's fixtures.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
from browser_pages import (  # the fixtures, shared by name
    HOSTILE,
    MS,
    browser,  # noqa: F401
    live,
    page,  # noqa: F401
    redis_url_module,  # noqa: F401
    service,  # noqa: F401
    settled,
    writer,  # noqa: F401
)
from playwright.sync_api import Locator, Page, expect

from redis_presence import RedisPresenceRegistry

pytestmark = [pytest.mark.slow, pytest.mark.redis_server, pytest.mark.timeout(120)]

QUEUE = "screens"
LONG = (HOSTILE + "billing.eu-west-1.orders-v2.priority-high-" * 5)[:200]
"""A 200-character name: markup first, then one long unbreakable token."""
FUTURE_NS = 4_000_000_000_000 * MS  # beats from the future stay active
PAST_NS = 1_700_000_000_000 * MS  # long expired
WIDTHS = [pytest.param(w, id=f"{w}px") for w in (390, 800, 1280)]  # phone, tablet, desktop

# In the page: where the document and an element lie against the viewport, and which
# ordinary words (up to 24 characters, a timestamp included) the layout broke across lines.
GEOMETRY = """() => ({
  scrollWidth: document.documentElement.scrollWidth,
  innerWidth: window.innerWidth,
})"""
ON_SCREEN = """(el) => {
  el.scrollIntoView({block: "center", inline: "nearest"});
  const rects = [...el.getClientRects()];
  const problems = [];
  let seen = 0;
  for (const r of rects) {
    if (r.width === 0 || r.height === 0) continue;
    if (r.left < -0.5 || r.right > window.innerWidth + 0.5) {
      problems.push(`a line spans x ${r.left.toFixed(0)}..${r.right.toFixed(0)}`);
    }
    const x = Math.min(Math.max(r.left + r.width / 2, 0), window.innerWidth - 1);
    const y = r.top + r.height / 2;
    if (y < 0 || y >= window.innerHeight) continue;
    seen += 1;
    const hit = document.elementFromPoint(x, y);
    if (!hit || !(el === hit || el.contains(hit))) {
      problems.push(`covered or clipped at (${x.toFixed(0)}, ${y.toFixed(0)})`);
    }
  }
  if (!seen) problems.push("not in the viewport");
  if (el.clientWidth && el.scrollWidth > el.clientWidth + 1) {
    problems.push(`content ${el.scrollWidth}px wide in a box of ${el.clientWidth}px`);
  }
  return problems;
}"""
BROKEN_WORDS = """(selector) => {
  const broken = [];
  for (const el of document.querySelectorAll(selector)) {
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const m of node.data.matchAll(/\\S+/g)) {
        if (m[0].length < 2 || m[0].length > 24) continue;
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const lines = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
        if (lines.size > 1) broken.push(m[0]);
      }
    }
  }
  return broken;
}"""
WORDS = (
    ".bar, .card .label, .grid th, .pill, .badge, .crumbs, .pager, footer, .error h1, "
    ".grid td.name, .grid td.meta"
)


@pytest.fixture(scope="module")
def fleet(writer: RedisPresenceRegistry) -> Iterator[list[tuple[str, str, str]]]:
    rows = [
        (QUEUE, "billing", "worker-1"),
        (QUEUE, "billing", "worker-2"),
        (QUEUE, LONG, LONG),
        (QUEUE, "reports", "nightly-cron"),
    ]
    for queue, group, consumer in rows[:3]:
        writer.heartbeat(queue, group, consumer, 3, now_ns=FUTURE_NS)
    writer.heartbeat(*rows[3], 0, now_ns=PAST_NS)  # expired: its group nobody reads
    assert writer.describe(QUEUE, LONG, LONG, {"host": LONG, "pid": "4242", "version": "1.2.3"})
    try:
        yield rows
    finally:
        for queue, group, consumer in rows:
            writer.deregister(queue, group, consumer)


def visit(page: Page, width: int, path: str) -> None:
    """Open `path` live, after the catch-up read: the rows shown are the script's."""
    page.set_viewport_size({"width": width, "height": 844 if width < 500 else 860})
    live(page, path)
    settled(page)


def fits(page: Page) -> None:
    """The document does not scroll sideways."""
    geometry = page.evaluate(GEOMETRY)
    assert geometry["scrollWidth"] <= geometry["innerWidth"], geometry


def on_screen(*locators: Locator) -> None:
    for locator in locators:
        assert locator.count() >= 1, locator
        for element in locator.all():
            problems: list[Any] = element.evaluate(ON_SCREEN)
            assert problems == [], f"{locator}: {problems}"


def words_whole(page: Page) -> None:
    assert page.evaluate(BROKEN_WORDS, WORDS) == []


def no_markup(page: Page) -> None:
    assert page.locator("main img").count() == 0
    assert page.locator("main script").count() == 0


def counts(page: Page, cards: str) -> list[Locator]:
    return [page.locator(f'{cards} [data-total="{state}"]') for state in STATES]


STATES = ("active", "stale", "expired")


@pytest.mark.parametrize("width", WIDTHS)
def test_the_groups_page_fits(page: Page, fleet: object, width: int) -> None:
    visit(page, width, "/?" + urlencode({"queue": QUEUE}))
    expect(page.locator("#groups tbody tr")).to_have_count(3)
    fits(page)
    names = page.locator("#groups td.name a")
    on_screen(page.locator("#live"), *counts(page, "#totals"), names)
    on_screen(page.locator("#groups td.num.active"), page.locator("#groups .badge"))
    assert LONG in names.all_inner_texts()
    words_whole(page)
    no_markup(page)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_group_page_fits(page: Page, fleet: object, width: int) -> None:
    visit(page, width, "/group?" + urlencode({"queue": QUEUE, "group": LONG}))
    expect(page.locator("#consumers tbody tr")).to_have_count(1)
    fits(page)
    consumer = page.locator("#consumers td.consumer")
    on_screen(page.locator("#live"), *counts(page, "#group-stats"), page.locator(".crumbs"))
    on_screen(consumer, page.locator("#consumers .pill"), page.locator("#consumers td.num"))
    assert consumer.inner_text() == LONG
    expect(page.locator("#consumers td.meta")).to_contain_text(f"host={LONG}")
    words_whole(page)
    no_markup(page)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_consumer_list_fits(page: Page, fleet: object, width: int) -> None:
    visit(page, width, "/consumers?" + urlencode({"queue": QUEUE}))
    expect(page.locator("#consumers tbody tr")).to_have_count(4)
    fits(page)
    on_screen(
        page.locator("#live"),
        page.locator("#consumers td.consumer"),
        page.locator("#consumers td.name a"),
        page.locator("#consumers .pill"),
    )
    assert LONG in page.locator("#consumers td.consumer").all_inner_texts()
    words_whole(page)
    no_markup(page)


@pytest.mark.parametrize("width", WIDTHS)
def test_an_error_page_fits(page: Page, fleet: object, width: int) -> None:
    page.set_viewport_size({"width": width, "height": 844})
    response = page.goto("/group?" + urlencode({"queue": QUEUE, "group": LONG + "!"}))
    assert response is not None
    assert response.status == 404
    fits(page)
    on_screen(page.locator("#live"), page.locator(".error h1"), page.locator(".error .message"))
    expect(page.locator(".error .message")).to_contain_text(LONG + "!")
    words_whole(page)
    no_markup(page)


@pytest.mark.parametrize("width", WIDTHS)
def test_a_consumer_page_fits(page: Page, fleet: object, width: int) -> None:
    # live: measured after its catch-up read, which replaces the page's content
    visit(page, width, "/consumer?" + urlencode({"queue": QUEUE, "group": LONG, "consumer": LONG}))
    fits(page)
    on_screen(page.locator("#consumer-name"), page.locator("#consumer-stats .card .n"))
    expect(page.locator("#consumer-name")).to_have_text(LONG)
    expect(page.locator("#consumer-meta")).to_contain_text(LONG)
    words_whole(page)
    no_markup(page)

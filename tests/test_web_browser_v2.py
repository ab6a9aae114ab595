"""Protocol version 2 on the dashboard in a real browser: Debian's chromium driven by
Playwright, against a real `redis-presence serve` (started with a drain token) and
redis-server, under the service's CSP (the `page` fixtures fail a test on any refusal,
script error or name run as code), at desktop width and at 390 px.

The consumers beat an hour ahead so that they stay active for the whole test.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from browser_pages import (  # noqa: F401 (the fixtures, used by name)
    MS,
    TOKEN,
    browser,
    live,
    open_page,
    redis_url_module,
    row,
    settled,
    writer,
)
from playwright.sync_api import Browser, Page, expect
from webservers import ServeProcess

from redis_presence import RedisPresenceRegistry

pytestmark = [pytest.mark.slow, pytest.mark.redis_server, pytest.mark.timeout(120)]

WIDTHS = [pytest.param(1280, id="desktop"), pytest.param(390, id="phone")]
HOUR_NS = 3_600_000 * MS
HOSTILE = "<img src=x onerror=alert(1)>"
DRAIN_TOKEN = "browser-dr4in"
QUEUE = "v2"


@pytest.fixture(scope="module")
def service(redis_url_module: str, writer: RedisPresenceRegistry) -> Iterator[ServeProcess]:
    with ServeProcess(
        redis_url_module,
        env={"REDIS_PRESENCE_AUTH_TOKEN": TOKEN, "REDIS_PRESENCE_DRAIN_TOKEN": DRAIN_TOKEN},
        token=TOKEN,
    ) as serve:
        yield serve


@pytest.fixture(params=WIDTHS)
def page(request: pytest.FixtureRequest, browser: Browser, service: ServeProcess) -> Iterator[Page]:
    with open_page(browser, service.base_url) as opened:
        opened.set_viewport_size({"width": request.param, "height": 860})
        yield opened


@pytest.fixture(scope="module")
def fleet(writer: RedisPresenceRegistry, redis_url_module: str) -> RedisPresenceRegistry:
    """QUEUE/pool: a draining consumer with a hostile name, one asked to drain, one two
    processes beat as (a duplicate), one without a capacity; capacity 8 + 4 + 2, leases
    1 + 2 + 0 (free 11)."""
    ahead = writer.clock_ns() + HOUR_NS
    writer.heartbeat(QUEUE, "pool", HOSTILE, 1, now_ns=ahead, capacity=8, draining=True)
    writer.heartbeat(QUEUE, "pool", "asked", 2, now_ns=ahead, capacity=4)
    assert writer.request_drain(QUEUE, "pool", "asked", now_ns=ahead)
    writer.heartbeat(QUEUE, "pool", "plain", 0, now_ns=ahead)
    # QUEUE/left: its only consumer said it was draining and stopped: stale (under the
    # group's own TTL of 300 s) for the whole test, DRAINING.
    writer.set_ttl(300_000, queue=QUEUE, group="left")
    now = writer.clock_ns()
    writer.heartbeat(QUEUE, "left", "leaver", 0, now_ns=now - 400_000 * MS, draining=True)
    one = RedisPresenceRegistry.from_url(redis_url_module, max_future_ms=None, instance="a")
    two = RedisPresenceRegistry.from_url(redis_url_module, max_future_ms=None, instance="b")
    try:
        one.heartbeat(QUEUE, "pool", "twin", 0, now_ns=ahead - 2 * MS, capacity=2)
        two.heartbeat(QUEUE, "pool", "twin", 0, now_ns=ahead - MS)
        one.heartbeat(QUEUE, "pool", "twin", 0, now_ns=ahead)
    finally:
        one.close()
        two.close()
    return writer


def fits(page: Page) -> None:
    """The page does not scroll sideways (a wide table scrolls inside its own box)."""
    page.wait_for_load_state("networkidle")
    scrolled = page.evaluate("document.documentElement.scrollWidth")
    assert scrolled <= width(page), scrolled


def test_the_marks_and_slots_of_a_group(page: Page, fleet: RedisPresenceRegistry) -> None:
    live(page, f"/group?queue={QUEUE}&group=pool")
    settled(page)
    hostile = row(page, "<img")
    expect(hostile.locator("td.consumer")).to_have_text(HOSTILE)  # a name is text
    expect(hostile.locator(".pill.draining")).to_have_text("draining")
    expect(hostile.locator("td.capacity")).to_have_text("8")
    asked = row(page, "asked")
    expect(asked.locator(".pill.drain-requested")).to_have_text("drain requested")
    expect(asked.locator(".pill.draining")).to_have_count(0)
    expect(row(page, "twin").locator(".pill.conflict")).to_have_text("duplicate")
    plain = row(page, "plain")
    expect(plain.locator(".pill.mark")).to_have_count(0)
    expect(plain.locator("td.capacity")).to_have_text("")
    if width(page) < 960:  # the phone layout: no capacity, no labelled cell
        expect(plain.locator("td.capacity")).to_be_hidden()
        label = hostile.locator("td.capacity").evaluate(
            "(td) => getComputedStyle(td, '::before').content"
        )
        assert label == '"capacity"'
    stats = page.locator("#group-stats")
    expect(stats.locator('[data-total="capacity"] .n')).to_have_text("14")
    expect(stats.locator('[data-total="free"] .n')).to_have_text("11")
    expect(stats.locator('[data-total="draining"] .n')).to_have_text("1")
    expect(stats.locator('[data-total="conflicts"]')).to_have_class(re.compile(r"\balarm\b"))
    expect(stats.locator('[data-total="conflicts"] .n')).to_have_text("1")
    fits(page)


def width(page: Page) -> int:
    """The page's width: a group of its own for each width (the fleet is the module's)."""
    size = page.viewport_size
    assert size is not None
    return size["width"]


def test_a_drain_request_shows_live(page: Page, fleet: RedisPresenceRegistry) -> None:
    """A drain requested elsewhere (its event) marks the row without a reload."""
    ahead = fleet.clock_ns() + HOUR_NS
    later = f"later-{width(page)}"
    fleet.heartbeat(QUEUE, later, "w1", 0, now_ns=ahead, capacity=1)
    live(page, f"/group?queue={QUEUE}&group={later}")
    settled(page)
    expect(row(page, "w1").locator(".pill.mark")).to_have_count(0)
    assert fleet.request_drain(QUEUE, later, "w1")
    expect(row(page, "w1").locator(".pill.drain-requested")).to_have_text("drain requested")
    fleet.heartbeat(QUEUE, later, "w1", 0, now_ns=ahead + MS, draining=True)
    expect(row(page, "w1").locator(".pill.draining")).to_have_text("draining")
    expect(row(page, "w1").locator(".pill.drain-requested")).to_have_count(0)
    assert page.evaluate("window.__same_document === true")


def test_asking_a_consumer_to_drain_from_its_page(page: Page, fleet: RedisPresenceRegistry) -> None:
    ahead = fleet.clock_ns() + HOUR_NS
    ask = f"ask-{width(page)}"
    fleet.heartbeat(QUEUE, ask, "w2", 0, now_ns=ahead)
    live(page, f"/consumer?queue={QUEUE}&group={ask}&consumer=w2")
    settled(page)  # its catch-up read replaces the page's content
    form = page.locator("#drain-form")
    expect(form).to_be_visible()
    said = page.locator("#drain-result")
    form.get_by_label("Drain token").fill("not-it")
    form.get_by_role("button", name="Ask it to drain").click()
    expect(said).to_have_text(re.compile(r"^Not requested: a drain request needs the drain token"))
    found = fleet.consumer(QUEUE, ask, "w2")
    assert found is not None
    assert not found.drain_requested
    form = page.locator("#drain-form")
    form.get_by_label("Drain token").fill(DRAIN_TOKEN)
    form.get_by_role("button", name="Ask it to drain").click()
    expect(page.locator("#drain-result")).to_have_text(
        re.compile(r"^(Drain|A drain was) requested")
    )
    found = fleet.consumer(QUEUE, ask, "w2")
    assert found is not None
    assert found.drain_requested
    expect(page.locator("#consumer-draining")).to_have_text(re.compile(r"^requested"))
    assert DRAIN_TOKEN not in page.content()
    fits(page)


def test_a_draining_consumer_that_stops_keeps_its_mark_live(
    page: Page, fleet: RedisPresenceRegistry
) -> None:
    """It said it was draining and stopped beating: the stale event moves its row (no
    read) and the draining mark stays beside the new state."""
    gone = f"gone-{width(page)}"
    fleet.set_ttl(5_000, queue=QUEUE, group=gone)  # stale from 5 s to 10 s after its beat
    fleet.heartbeat(QUEUE, gone, "leaver", 0, draining=True)
    live(page, f"/group?queue={QUEUE}&group={gone}")
    settled(page)
    leaver = row(page, "leaver")
    expect(leaver.locator(".pill.active")).to_have_text("active")
    expect(leaver.locator(".pill.stale")).to_have_text("stale", timeout=10_000)
    expect(leaver.locator(".pill.draining")).to_have_text("draining")


def test_a_drained_group_is_not_an_alarm(page: Page, fleet: RedisPresenceRegistry) -> None:
    """Its only consumer said it was draining and left (stale): its verdict is DRAINING,
    its row is not red and "nobody is reading" is a grey mark, not the red badge."""
    live(page, f"/?queue={QUEUE}&group=left")
    settled(page)
    group = page.locator("#groups tbody tr[data-group=left]")
    expect(group.locator(".pill.verdict")).to_have_text("DRAINING")
    expect(group).not_to_have_class(re.compile(r"\bidle\b"))
    expect(group.locator(".pill.drained")).to_have_text("nobody is reading")
    fits(page)

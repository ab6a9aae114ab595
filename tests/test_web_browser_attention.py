"""Issue 34 items 1 and 3 in a real browser: Debian's chromium driven by Playwright,
against a real `redis-presence serve` and redis-server, under the service's CSP (the
`page` fixture fails a test on any refusal, script error or name run as code), at desktop
width and at 390 px: the overview lists the groups that need a look first, each row says
its leases and those held by expired consumers, and the red card of those leases is one
click from the groups that hold them.

Active consumers here beat stamped an hour ahead (they stay active for the whole test);
an expired one beat 10 minutes ago, holding leases.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from browser_pages import (  # noqa: F401 (the fixtures, used by name)
    MS,
    browser,
    card,
    live,
    open_page,
    redis_url_module,
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
    # (group, consumer, leases, active?)
    for group, name, leases, active in [
        ("a-fine", "ok", 1, True),
        ("b-dead", "ok", 2, True),
        ("b-dead", "crashed", 3, False),
        ("c-nobody", "crashed", 4, False),
        ("d-fine", "ok", 0, True),
    ]:
        at = now + HOUR_MS * MS if active else now - 600_000 * MS
        writer.heartbeat("att", group, name, leases, now_ns=at, progressed=active)
    return writer


def fits(page: Page) -> None:
    """The page does not scroll sideways (a wide table scrolls inside its own box)."""
    size = page.viewport_size
    assert size is not None
    page.wait_for_load_state("networkidle")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= size["width"], width


def groups_shown(page: Page) -> list[str]:
    return [str(tr.get_attribute("data-group")) for tr in page.locator("#groups tbody tr").all()]


def test_the_groups_that_need_a_look_come_first_with_their_leases(
    page: Page, fleet: RedisPresenceRegistry
) -> None:
    live(page, "/?queue=att")
    settled(page)  # the live read keeps the order
    # STOPPED (nobody reading, its crashed consumer's leases), then an OK group whose
    # expired consumer holds leases, then the rest by name.
    assert groups_shown(page) == ["c-nobody", "b-dead", "a-fine", "d-fine"]
    nobody = page.locator("#groups tbody tr[data-group=c-nobody]")
    expect(nobody.locator(".pill.verdict")).to_have_text("STOPPED")
    expect(nobody.locator("td.leases")).to_have_text("4")
    expect(nobody.locator("td.dead-leases")).to_have_text("4")
    expect(nobody.locator("td.dead-leases")).to_have_class(re.compile(r"\balarm\b"))
    dead = page.locator("#groups tbody tr[data-group=b-dead]")
    expect(dead.locator("td.leases")).to_have_text("5")
    expect(dead.locator("td.dead-leases")).to_have_text("3")
    expect(page.locator("#groups tbody tr[data-group=d-fine] td.dead-leases")).to_have_text("0")
    lost = card(page, "leases_expired")
    expect(lost).to_have_class(re.compile(r"\balarm\b"))
    expect(lost.locator(".n")).to_have_text("7")
    expect(card(page, "leases").locator(".n")).to_have_text("10")
    fits(page)

    lost.get_by_role("link").click()  # one click: the groups whose dead hold leases
    expect(page).to_have_url(re.compile(r"/\?dead_leases=1$"))
    expect(page.locator("#groups tbody tr")).to_have_count(2)
    assert groups_shown(page) == ["c-nobody", "b-dead"]
    expect(page.locator("input[name=dead_leases]")).to_be_checked()
    fits(page)

    page.goto("/?queue=att&sort=queue")  # the index's order stays one click away
    assert groups_shown(page) == ["a-fine", "b-dead", "c-nobody", "d-fine"]
    page.locator("#groups thead a", has_text="Dead leases").click()
    expect(page).to_have_url(re.compile(r"sort=-dead_leases"))
    assert groups_shown(page)[:2] == ["c-nobody", "b-dead"]

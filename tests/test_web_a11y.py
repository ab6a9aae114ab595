"""Every screen and every person, and charts that can be read (issue 34 items 7 and 6), in
chromium under the page's CSP.

WCAG AA contrast (4.5:1) for every text the pages render and every text/background pair
the stylesheets declare, in the light and the dark scheme (`prefers-color-scheme`,
emulated); the skip link; the group chart's axes and values (pointer, keyboard, a table);
a sparkline on every row, on one scale. The phone layout of each page is
test_web_screens.py's.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Literal
from urllib.parse import urlencode

import pytest
from browser_pages import (  # the fixtures, shared by name
    MS,
    browser,  # noqa: F401
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
from redis_presence.formatting import iso_utc

pytestmark = [pytest.mark.slow, pytest.mark.redis_server, pytest.mark.timeout(120)]

QUEUE = "a11y"
FUTURE_NS = 4_000_000_000_000 * MS  # beats from the future stay active
PAST_NS = 1_700_000_000_000 * MS  # long expired
AA = 4.5
GEOMETRY_FITS = "() => document.documentElement.scrollWidth <= window.innerWidth"
Scheme = Literal["light", "dark"]
SCHEMES = [pytest.param(s, id=s) for s in ("light", "dark")]

# In the page: WCAG's relative luminance and contrast ratio of computed colours; the
# background behind an element is its ancestors' backgrounds composited (over the
# canvas: the root's background).
CONTRAST = """
const parse = (text) => {
  const m = text.match(/rgba?\\(([^)]+)\\)/);
  if (!m) return null;
  const [r, g, b, a] = m[1].split(/[ ,/]+/).filter(Boolean).map(Number);
  return [r, g, b, a === undefined ? 1 : a];
};
const over = (top, under) => {
  const a = top[3];
  return [0, 1, 2].map((i) => top[i] * a + under[i] * (1 - a)).concat([1]);
};
const luminance = ([r, g, b]) => {
  const f = (c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; };
  return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
};
const ratio = (fg, bg) => {
  const [hi, lo] = [luminance(fg), luminance(bg)].sort((x, y) => y - x);
  return (hi + 0.05) / (lo + 0.05);
};
const backdrop = (el) => {
  const layers = [];
  for (let node = el; node && node.nodeType === 1; node = node.parentElement) {
    const bg = parse(getComputedStyle(node).backgroundColor);
    if (bg && bg[3] > 0) layers.push(bg);
    if (bg && bg[3] >= 1) break;
  }
  let color = [255, 255, 255, 1];
  for (const layer of layers.reverse()) color = over(layer, color);
  return color;
};
const rgb = (c) => `rgb(${c.slice(0, 3).map(Math.round)})`;
const seen = (text, cls, fg, bg) => (
  {text, cls, ratio: Math.round(ratio(fg, bg) * 100) / 100, color: rgb(fg), background: rgb(bg)}
);
"""
RENDERED = (
    "() => {"
    + CONTRAST
    + """
  const found = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const el = node.parentElement;
    if (!node.data.trim() || !el || el.closest("template, svg, script")) continue;
    const style = getComputedStyle(el);
    if (style.visibility !== "visible" || !el.getClientRects().length) continue;
    const bg = backdrop(el);
    const fg = over(parse(style.color), bg);
    found.push(seen(node.data.trim().slice(0, 40), el.className, fg, bg));
  }
  for (const input of document.querySelectorAll("input[placeholder]")) {
    const ph = getComputedStyle(input, "::placeholder");
    const bg = backdrop(input);
    found.push(seen(input.placeholder, "::placeholder", over(parse(ph.color), bg), bg));
  }
  return found;
}"""
)
DECLARED = (
    "() => {"
    + CONTRAST
    + """
  const pairs = [];
  const probe = document.createElement("span");
  document.body.append(probe);
  const walk = (rules) => {
    for (const rule of rules) {
      if (rule.cssRules && !(rule instanceof CSSStyleRule)) { walk(rule.cssRules); continue; }
      if (!(rule instanceof CSSStyleRule)) continue;
      const color = rule.style.getPropertyValue("color");
      const background = rule.style.getPropertyValue("background-color")
        || rule.style.getPropertyValue("background");
      // a pair names both colours (one that inherits or shows through is the rendered
      // test's: it measures what is under it)
      if (!color || !background || /^(inherit|currentcolor)$/i.test(color)) continue;
      if (/^(none|transparent)$/i.test(background)) continue;
      probe.style.color = color;
      probe.style.background = background;
      const computed = getComputedStyle(probe);
      const bg = over(parse(computed.backgroundColor), [255, 255, 255, 1]);
      const fg = over(parse(computed.color), bg);
      pairs.push({rule: rule.selectorText, ratio: Math.round(ratio(fg, bg) * 100) / 100});
    }
  };
  for (const sheet of document.styleSheets) walk(sheet.cssRules);
  probe.remove();
  return pairs;
}"""
)
# Every look a row and a card can take (some last a moment only: stale, unknown), put on
# copies of the rendered ones so that their colours are measured too.
EVERY_LOOK = """() => {
  for (const selector of ["#groups tbody", "#consumers tbody"]) {
    const tbody = document.querySelector(selector);
    if (!tbody || !tbody.rows.length) continue;
    for (const look of ["state-stale", "state-expired", "idle", "unknown", "stuck"]) {
      const copy = tbody.rows[0].cloneNode(true);
      copy.className = look;
      tbody.append(copy);
    }
  }
  const cards = document.querySelector(".cards");
  if (cards) {
    const copy = cards.cloneNode(true);
    copy.removeAttribute("id");
    copy.classList.add("unknown");
    cards.after(copy);
  }
  const banner = document.getElementById("banner");
  banner.textContent = "Redis unreachable";
  banner.hidden = false;
  for (const state of ["live", "down"]) {
    const badge = document.getElementById("live").cloneNode(true);
    badge.removeAttribute("id");
    badge.dataset.state = state;
    document.querySelector(".bar").append(badge);
  }
}"""


@pytest.fixture(scope="module")
def fleet(writer: RedisPresenceRegistry) -> Iterator[list[tuple[str, str, str]]]:
    rows = [
        (QUEUE, "billing", "worker-1"),
        (QUEUE, "billing", "worker-2"),
        (QUEUE, "reports", "nightly-cron"),
    ]
    writer.heartbeat(*rows[0], 3, now_ns=FUTURE_NS)
    writer.heartbeat(*rows[1], 2, now_ns=PAST_NS)  # registered long ago, no progress since:
    writer.heartbeat(*rows[1], 2, now_ns=FUTURE_NS)  # stuck
    writer.heartbeat(*rows[2], 0, now_ns=PAST_NS)  # expired: its group nobody reads
    writer.expect(QUEUE, "billing", 5)  # below its minimum
    try:
        yield rows
    finally:
        writer.unexpect(QUEUE, "billing")
        for queue, group, consumer in rows:
            writer.deregister(queue, group, consumer)


PAGES = [
    pytest.param("/?" + urlencode({"queue": QUEUE}), id="groups"),
    pytest.param("/group?" + urlencode({"queue": QUEUE, "group": "billing"}), id="group"),
    pytest.param("/consumers?" + urlencode({"queue": QUEUE}), id="consumers"),
    pytest.param(
        "/consumer?" + urlencode({"queue": QUEUE, "group": "billing", "consumer": "worker-1"}),
        id="consumer",
    ),
]


def visit(page: Page, path: str) -> None:
    """Open `path`, live (after its catch-up read) where the page is."""
    live(page, path)
    settled(page)


def below_aa(found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [f for f in found if f["ratio"] < AA]


@pytest.mark.parametrize("scheme", SCHEMES)
def test_every_pair_the_stylesheets_declare_meets_aa(
    page: Page, fleet: object, scheme: Scheme
) -> None:
    page.emulate_media(color_scheme=scheme)
    page.goto("/?" + urlencode({"queue": QUEUE}))
    pairs = page.evaluate(DECLARED)
    assert len(pairs) >= 15, pairs  # the pills, the cards, the badges, the bar...
    assert below_aa(pairs) == []


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("path", PAGES)
def test_every_text_a_page_renders_meets_aa(
    page: Page, fleet: object, path: str, scheme: Scheme
) -> None:
    page.emulate_media(color_scheme=scheme)
    visit(page, path)
    page.evaluate(EVERY_LOOK)
    found = page.evaluate(RENDERED)
    assert len(found) >= 20
    assert below_aa(found) == []


def test_the_dark_scheme_follows_the_system(page: Page, fleet: object) -> None:
    path = "/?" + urlencode({"queue": QUEUE})
    background = "() => getComputedStyle(document.documentElement).backgroundColor"
    page.emulate_media(color_scheme="light")
    page.goto(path)
    assert page.evaluate(background) == "rgb(246, 247, 249)"
    page.emulate_media(color_scheme="dark")
    assert page.evaluate(background) == "rgb(15, 20, 27)"
    panel = "() => getComputedStyle(document.querySelector('#groups')).backgroundColor"
    assert page.evaluate(panel) == "rgb(23, 29, 38)"


@pytest.mark.parametrize("path", PAGES)
def test_the_skip_link_comes_first_and_leads_to_the_content(
    page: Page, fleet: object, path: str
) -> None:
    page.goto(path)
    skip = page.locator("a.skip")
    box = skip.bounding_box()
    assert box is not None
    assert box["y"] + box["height"] <= 0  # out of sight until focused
    page.keyboard.press("Tab")
    expect(skip).to_be_focused()
    box = skip.bounding_box()
    assert box is not None
    assert box["y"] >= 0
    page.keyboard.press("Enter")
    expect(page.locator("main#main")).to_be_focused()


@pytest.mark.parametrize("width", [pytest.param(w, id=f"{w}px") for w in (390, 1280)])
def test_the_group_chart_tells_its_values_by_pointer_and_keyboard(
    page: Page, fleet: object, writer: RedisPresenceRegistry, width: int
) -> None:
    writer.heartbeat(QUEUE, "billing", "newcomer", 1)  # joins now (the server's clock)
    page.set_viewport_size({"width": width, "height": 844})
    visit(page, "/group?" + urlencode({"queue": QUEUE, "group": "billing"}))
    chart = page.locator("#active-chart svg.chart")
    scale = chart.get_attribute("data-scale")
    assert scale is not None
    # the axes: 0 to the scale (one for the whole chart), the time to now, both titled
    expect(page.locator("#active-chart .y-axis span")).to_have_text([scale, "0"])
    ticks = page.locator("#active-chart .chart-axis span")
    expect(ticks).to_have_text(["-60 min", "-45 min", "-30 min", "-15 min", "now"])
    expect(page.locator("#active-chart .x-title")).to_contain_text("time (UTC)")
    assert page.evaluate(GEOMETRY_FITS), "the chart widens the page"
    # the keyboard: focus tells now, the arrows move an instant, Home goes to the start
    readout = page.locator("#chart-readout")
    expect(readout).to_have_attribute("aria-live", "polite")
    chart.focus()
    active = page.locator('#group-stats [data-total="active"] .n').inner_text()
    expect(readout).to_contain_text(f"{active} active (now)")
    expect(readout).to_contain_text(re.compile(r"1 joined(, 1 recovered)? between"))  # its mark
    page.keyboard.press("ArrowLeft")
    expect(readout).not_to_contain_text("(now)")
    page.keyboard.press("Home")
    since = int(chart.get_attribute("data-since") or 0)
    expect(readout).to_contain_text(iso_utc(since))
    # the pointer: the instant under it
    box = chart.bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] - 1, box["y"] + box["height"] / 2)
    expect(readout).to_contain_text("(now)")
    # the values as a table, built when opened (no copy of them in the page before)
    assert page.locator("#active-chart table").count() == 0
    page.locator("#active-chart details summary").click()
    rows = page.locator("#active-chart table.chart-table tbody tr")
    expect(rows).to_have_count(61)
    expect(rows.last.locator("td").nth(1)).to_have_text(active)
    expect(rows.first.locator("td").first).to_have_text(iso_utc(since))


def test_every_row_keeps_its_sparkline_on_one_scale_live(page: Page, fleet: object) -> None:
    visit(page, "/?" + urlencode({"queue": QUEUE}))  # rows re-rendered by the page's script
    rows = page.locator("#groups tbody tr")
    expect(rows).to_have_count(2)
    sparks = page.locator("#groups tbody tr td.spark svg.spark")
    expect(sparks).to_have_count(2)
    scales = {s.get_attribute("data-scale") for s in sparks.all()}
    assert len(scales) == 1
    expect(page.locator("#spark-scale")).to_have_text(scales.pop() or "")
    expect(sparks.first).to_have_accessible_name(re.compile("active consumers over the last hour"))
    assert page.locator("template").count() == 0  # no second copy of the charts


WIDTHS = [pytest.param(w, id=f"{w}px") for w in (390, 1280)]


def states_shown(page: Page) -> list[int]:
    """The rank of each consumer row's state, top to bottom."""
    rank = {"active": 0, "stale": 1, "expired": 2}
    shown = page.evaluate(
        "() => [...document.querySelectorAll('#consumers tbody tr')].map((tr) => tr.dataset.state)"
    )
    return [rank[state] for state in shown]


@pytest.mark.parametrize("width", WIDTHS)
def test_the_groups_headers_sort_every_group_and_the_order_holds_live(
    page: Page, fleet: object, writer: RedisPresenceRegistry, width: int
) -> None:
    page.set_viewport_size({"width": width, "height": 844})
    visit(page, "/?" + urlencode({"queue": QUEUE, "sort": "queue"}))
    names = page.locator("#groups tbody tr td.name a")
    expect(names).to_have_text(["billing", "reports"])  # the index's order
    queue = page.locator("#groups thead th").first
    expect(queue).to_have_attribute("aria-sort", "ascending")
    active = page.get_by_role("link", name="Active", exact=True)
    header = page.locator("#groups thead th", has=active)
    expect(header).not_to_have_attribute("aria-sort", re.compile("."))
    active.click()  # a count sorts the most first, over every group (the server's)
    page.wait_for_url(re.compile(r"sort=-active"))
    expect(header).to_have_attribute("aria-sort", "descending")
    expect(queue).not_to_have_attribute("aria-sort", re.compile("."))
    expect(names).to_have_text(["billing", "reports"])
    page.get_by_role("link", name="Active", exact=True).click()
    page.wait_for_url(re.compile(r"sort=active"))
    expect(header).to_have_attribute("aria-sort", "ascending")
    expect(names).to_have_text(["reports", "billing"])
    live(page, page.url)
    settled(page)
    extra = [f"late-{i}" for i in range(4)]  # more than billing has (2, or 3 with a newcomer)
    try:
        for name in extra:  # reports passes billing: the rows re-rendered live, sorted again
            writer.heartbeat(QUEUE, "reports", name, 0, now_ns=FUTURE_NS)
        reports = page.locator("#groups tbody tr", has_text="reports").locator("td.num.active")
        expect(reports).to_have_text("4")
        expect(names).to_have_text(["billing", "reports"])
        assert same_document(page)
    finally:
        for name in extra:
            writer.deregister(QUEUE, "reports", name)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_consumer_lists_sort_by_state_and_last_seen(
    page: Page, fleet: object, width: int
) -> None:
    page.set_viewport_size({"width": width, "height": 844})
    visit(page, "/consumers?" + urlencode({"queue": QUEUE}))
    state = page.get_by_role("button", name="State")
    state.click()
    expect(page.locator("#consumers thead th", has=state)).to_have_attribute(
        "aria-sort", "ascending"
    )
    states = states_shown(page)
    assert states == sorted(states)
    assert states[0] == 0  # active first
    state.click()
    states = states_shown(page)
    assert states == sorted(states, reverse=True)
    assert states[0] == 2  # expired first
    page.get_by_role("button", name="Last seen").click()
    beats = page.evaluate(
        "() => [...document.querySelectorAll('#consumers tbody td.age')]"
        ".map((td) => Number(td.dataset.hb))"
    )
    assert beats == sorted(beats, reverse=True)  # the freshest first

"""Issue 34: the six questions of an on-call operator, each at most two clicks from `/`,
asked in a real browser (Debian's chromium driven by Playwright, under the service's CSP:
`open_page` fails a test on any refusal or script error) of a real `redis-presence serve`
and redis-server, at desktop width and at 390 px.

The fleet is `benchmarks/questions.py`'s story at its small size (240 consumers over 40
groups in 5 queues: churn, a rolling deploy, a crashed host, stuck consumers, declared
groups, schedulers), and each question is that module's: the clicks it takes from `/` and
whether the answer is on the page it ends on (checked against what the fleet wrote). The
timings at 30,000 consumers are in docs/performance.md; none is checked here.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from browser_pages import TOKEN, browser, open_page  # noqa: F401 (the fixtures, used by name)
from playwright.sync_api import Browser
from servers import RedisServer
from webservers import ServeProcess

from benchmarks.questions import (
    ASKED,
    PREFIX,
    QUESTIONS,
    SMALL,
    Beating,
    Fleet,
    build_fleet,
    wait_for_totals,
)
from redis_presence import RedisPresenceRegistry

pytestmark = [pytest.mark.slow, pytest.mark.redis_server, pytest.mark.timeout(180)]

WIDTHS = [pytest.param(1280, id="desktop"), pytest.param(390, id="phone")]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Fleet, ServeProcess]]:
    with RedisServer(dir=tmp_path_factory.mktemp("redis-questions")) as server:
        registry = RedisPresenceRegistry.from_url(server.url, prefix=PREFIX)
        try:
            written = build_fleet(registry, SMALL)
            with (
                Beating(registry, written),
                ServeProcess(
                    server.url,
                    global_options=("--prefix", PREFIX),
                    env={"REDIS_PRESENCE_AUTH_TOKEN": TOKEN},
                    token=TOKEN,
                ) as serve,
            ):
                wait_for_totals(serve.base_url, {"Authorization": f"Bearer {TOKEN}"}, 60)
                yield written, serve
        finally:
            registry.close()


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("question", sorted(QUESTIONS), ids=lambda q: f"q{q}")
def test_each_question_is_at_most_two_clicks_from_the_overview(
    browser: Browser,  # noqa: F811 (the fixture)
    fleet: tuple[Fleet, ServeProcess],
    question: int,
    width: int,
) -> None:
    written, serve = fleet
    with open_page(browser, serve.base_url) as page:
        page.set_viewport_size({"width": width, "height": 860})
        answer = ASKED[question](page, written)
    pages = [visit.page for visit in answer.visits]
    assert answer.ok, f"{QUESTIONS[question]}: not on the page ({answer.found}; {pages})"
    assert answer.clicks <= 2, f"{QUESTIONS[question]}: {answer.clicks} clicks ({pages})"

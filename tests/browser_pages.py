"""The browser tests' shared parts: one redis-server, one `serve` process and one Chromium
per test module (module-scoped fixtures), a page per test in a fresh browser context that
fails its test when a name ran as code, the page's script failed or the CSP refused
anything, and the helpers that read a page (`live`, `row`, `card`, ...)."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import (
    Browser,
    ConsoleMessage,
    Dialog,
    Locator,
    Page,
    expect,
    sync_playwright,
)
from servers import RedisServer
from waiting import wait_until
from webservers import ROOT, ServeProcess, need_tool

from redis_presence import RedisPresenceRegistry

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
            # a live consumer page reads itself again as HTML (no JSON twin of its own)
            or (request.resource_type == "fetch" and request.headers.get("accept") == "text/html")
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
    """How many times the page's script read what it shows again: its JSON twin (a
    consumer's page: itself, as HTML)."""
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


def card(page: Page, name: str) -> Locator:
    return page.locator(f'#totals [data-total="{name}"]')

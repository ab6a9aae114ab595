"""Regenerate the README's dashboard screenshots from a real run.

Starts `redis-presence demo --serve` (its own Redis, real broker processes, the dashboard),
declares one group that nobody reads, waits in Chromium (Playwright driving Debian's
`chromium`) until the story has a crashed broker's consumers expired and their
replacement active, and writes the groups page and a group's page at 1280 and 390 px, and
at 1280 px in the dark scheme (`prefers-color-scheme: dark`):

    python docs/screenshots.py            # writes docs/img/*.png
    python docs/screenshots.py --out /tmp/shots --chromium /usr/bin/chromium

Needs the `web` and `test` extras (Playwright) and a `chromium` binary.
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Literal

from playwright.sync_api import Page, expect, sync_playwright

from redis_presence import RedisPresenceRegistry

ROOT = Path(__file__).resolve().parent.parent
TTL_MS = 5_000
"""The demo's TTL: slow enough to take four pictures within one moment of the story."""
PREFIX = "presence-demo"  # the demo's
DASHBOARD = re.compile(r"dashboard: (http://\S+)")
REDIS = re.compile(r"started .* on (127\.0\.0\.1:\d+)")
SCREENS: dict[str, tuple[int, int, Literal["light", "dark"]]] = {
    "": (1280, 860, "light"),
    "-phone": (390, 844, "light"),
    "-dark": (1280, 860, "dark"),
}
PAGES = {"dashboard": "/", "dashboard-group": "/group?queue=orders&group=billing"}
# The moment to show: the hung consumer and the crashed broker's three expired, the
# replacement broker's three active, one consumer left (3 brokers x 3 consumers).
EXPIRED, ACTIVE = "4", "7"


def wait_for(lines: list[str], pattern: re.Pattern[str], timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = pattern.search("".join(lines))
        if found:
            return found.group(1)
        time.sleep(0.05)
    raise SystemExit(f"the demo did not print {pattern.pattern!r}:\n{''.join(lines)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    parser.add_argument("--ttl-ms", type=int, default=TTL_MS)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "redis_presence.cli", "--ttl-ms", str(args.ttl_ms)]
    argv += ["demo", "--no-tui", "--serve", "--duration", "120"]
    lines: list[str] = []
    with subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True) as demo:
        reader = threading.Thread(target=lambda: lines.extend(demo.stdout or ()), daemon=True)
        reader.start()
        try:
            url = wait_for(lines, DASHBOARD, 60)
            redis_at = wait_for(lines, REDIS, 5)
            with RedisPresenceRegistry.from_url(f"redis://{redis_at}/0", prefix=PREFIX) as r:
                r.expect("reports", "nightly", min_active=1)  # declared, and nobody reads it
            written = shoot(url, args.chromium, args.out, args.ttl_ms)
        finally:
            demo.send_signal(signal.SIGTERM)
            status = demo.wait(timeout=30)
            reader.join(timeout=10)
    for path in written:
        print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    if status != 0:
        print(f"the demo exited with status {status}:\n{''.join(lines)}", file=sys.stderr)
    return status


def shoot(url: str, chromium: str, out: Path, ttl_ms: int) -> list[Path]:
    """Open every page on every screen, live, then take each picture at the same moment."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        try:
            pages: dict[str, Page] = {}
            for suffix, (width, height, scheme) in SCREENS.items():
                context = browser.new_context(
                    base_url=url, viewport={"width": width, "height": height}, color_scheme=scheme
                )
                context.set_default_timeout(30_000)
                for name, path in PAGES.items():
                    page = context.new_page()
                    page.goto(path)
                    expect(page.locator("#live")).to_have_attribute("data-state", "live")
                    pages[name + suffix] = page
            overview = pages["dashboard"]
            cards = overview.locator("#totals")
            moment = 10 * ttl_ms
            expect(cards.locator('[data-total="expired"] .n')).to_have_text(EXPIRED, timeout=moment)
            expect(cards.locator('[data-total="active"] .n')).to_have_text(ACTIVE, timeout=moment)
            written = []
            for name, page in pages.items():
                page.wait_for_timeout(300)  # let the last event's highlight fade
                shot = out / f"{name}.png"
                page.screenshot(path=str(shot), full_page=True)
                written.append(shot)
            return written
        finally:
            browser.close()


if __name__ == "__main__":
    raise SystemExit(main())

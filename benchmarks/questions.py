"""Issue 34: the six questions of an on-call operator, each asked from `/` in a real browser.

`python -m benchmarks.questions` starts its own redis-server (a free loopback port, never
6379), writes a fleet with a history (30,000 consumers over 2,000 groups in 50 queues by
default; `--small` for 240 over 40), keeps it beating, starts `redis-presence serve` on a free
loopback port against it and drives headless Chromium (Playwright, Debian's
``/usr/bin/chromium``, under the Content-Security-Policy the service sets) through each
question from `/`, at 1280 px and at 390 px wide. It counts the clicks and times each page:
navigation start to the load event, and the server's part (request sent to first byte of
the response), from the browser's Navigation Timing entry. `tests/test_web_browser_questions.py`
asks the same questions of the small fleet and checks the clicks and the answers.

The fleet's story, written round by round every 30 s of a 12-minute history (each round
stamped that long before the moment it is written, so that the last one is now):

* every consumer joins 12 minutes ago, named ``host:pid`` on about 100 consumers a host;
* churn: four times, 1 % of the consumers leave and as many join (a new pid);
* a rolling deploy 9 to 6 minutes ago replaces every consumer of the first tenth of the
  queues (left, then a new pid joins);
* a few consumers crash 11 minutes ago, and are pruned five and a half minutes ago;
* one host crashes 6 minutes ago (its consumers go stale 5 minutes ago and expire a minute
  later, holding their leases): it held most of one declared group (the group that dropped
  five minutes ago, now below its minimum) and one consumer of every 50th group;
* some consumers never progress while holding leases (stuck: no progress for 12 minutes
  against a budget of 5);
* declared groups: every group of the first two queues (with a minimum), an ``archiver`` group
  that nobody reads in each of the first three queues, and a group whose every consumer
  crashed (declared, so it stays after the prune);
* one ``scheduler`` group (the integrations' group of Celery beat and the other schedulers)
  in each of the first five queues, each with one active consumer.

After the history, every live consumer beats every 20 s (TTL 60 s) with progress, except the
stuck ones, until the run ends.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playwright.sync_api import Browser, Locator, Page, ViewportSize, sync_playwright

from redis_presence import RedisPresenceRegistry

Key = tuple[str, str, str]
Group = tuple[str, str]

PREFIX = "oncall"
TTL_MS = 60_000
STUCK_AFTER_MS = 300_000
ROUND_S = 30
ROUNDS = 24
"""The history: ROUNDS rounds ROUND_S apart, the last one now (12 minutes)."""
BEAT_EVERY_S = 20.0
NS = 1_000_000_000
CHUNK = 5_000
DESKTOP: ViewportSize = {"width": 1280, "height": 860}
PHONE: ViewportSize = {"width": 390, "height": 844}
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]

QUESTIONS = {
    1: "which groups nobody reads",
    2: "a stuck consumer, with its host and history",
    3: "why a group dropped five minutes ago",
    4: "is anyone scheduling",
    5: "expired consumers holding leases",
    6: "a link to a filtered view",
}


@dataclass(frozen=True)
class FleetSpec:
    """`queues` queues of `groups_per_queue` groups of `per_group` consumers each."""

    queues: int
    groups_per_queue: int
    per_group: int

    @property
    def groups(self) -> int:
        return self.queues * self.groups_per_queue

    @property
    def consumers(self) -> int:
        return self.groups * self.per_group

    @property
    def label(self) -> str:
        return f"{self.consumers:,} consumers / {self.groups:,} groups / {self.queues} queues"


FULL = FleetSpec(50, 40, 15)
SMALL = FleetSpec(5, 8, 6)


@dataclass
class Fleet:
    """What was written, so that each answer can be checked against it."""

    spec: FleetSpec
    alive: dict[Key, int] = field(default_factory=dict)
    """Consumers beating now, with their leases."""
    hosts: dict[Key, str] = field(default_factory=dict)
    stuck: list[Key] = field(default_factory=list)
    nobody: list[Group] = field(default_factory=list)
    dropped: Group = ("", "")
    crashed_host: str = ""
    dead: list[Key] = field(default_factory=list)
    """Expired consumers holding leases (the crashed host's)."""
    schedulers: list[Group] = field(default_factory=list)
    written_s: float = 0.0


def _key(pair: Group, name: str) -> Key:
    return (pair[0], pair[1], name)


class _Names:
    """``host:pid`` names, about 100 consumers a host, each pid new."""

    def __init__(self, hosts: int) -> None:
        self.hosts = hosts
        self.pid = 1000

    def next(self, host: str) -> str:
        self.pid += 1
        return f"{host}:{self.pid}"


def build_fleet(registry: RedisPresenceRegistry, spec: FleetSpec, seed: int = 34) -> Fleet:
    """Write the fleet's 12-minute story (see the module's docstring) and return it."""
    started = time.monotonic()
    rng = random.Random(seed)
    fleet = Fleet(spec)
    registry.set_ttl(TTL_MS)
    registry.set_stuck_after(STUCK_AFTER_MS)
    names = _Names(max(4, spec.consumers // 100))
    groups = [
        (f"queue-{q:02d}", f"group-{g:02d}")
        for q in range(spec.queues)
        for g in range(spec.groups_per_queue)
    ]
    fleet.crashed_host = "node-crashed-7"
    # The group that drops: named apart, so that it is found by name too.
    groups[len(groups) // 3] = fleet.dropped = (groups[len(groups) // 3][0], "payments")
    gone_group = groups[-1]  # every consumer crashes; declared, so it stays listed
    members: dict[Group, list[str]] = {pair: [] for pair in groups}
    leases: dict[Key, int] = {}
    serial = 0
    for pair in groups:
        for j in range(spec.per_group):
            serial += 1
            host = f"node-{serial % names.hosts:03d}"
            most_of_dropped = pair == fleet.dropped and j < spec.per_group * 2 // 3
            if most_of_dropped or (j == 0 and groups.index(pair) % 50 == 7):
                host = fleet.crashed_host
            name = names.next(host)
            members[pair].append(name)
            fleet.hosts[_key(pair, name)] = host
            leases[_key(pair, name)] = 2 if host == fleet.crashed_host else serial % 3
    for q in range(min(5, spec.queues)):
        pair = (f"queue-{q:02d}", "scheduler")
        fleet.schedulers.append(pair)
        name = names.next(f"sched-{q:02d}")
        members[pair] = [name]
        fleet.hosts[_key(pair, name)] = f"sched-{q:02d}"
        leases[_key(pair, name)] = 0
    stuck_every = max(1, len(groups) // 13)
    for index in range(stuck_every // 2, len(groups), stuck_every):
        pair = groups[index]
        if pair in (fleet.dropped, gone_group):
            continue
        key = _key(pair, members[pair][-1])
        fleet.stuck.append(key)
        leases[key] = 2

    # Declared groups: the first two queues' with a minimum, an archiver nobody reads in
    # each of the first three, the dropped group (below its minimum now), the gone group.
    for pair in groups:
        if pair[0] in ("queue-00", "queue-01"):
            registry.expect(*pair, max(1, spec.per_group // 2))
    for q in range(min(3, spec.queues)):
        registry.expect(f"queue-{q:02d}", "archiver", 1)
        fleet.nobody.append((f"queue-{q:02d}", "archiver"))
    registry.expect(*fleet.dropped, spec.per_group - 1)
    registry.expect(*gone_group, 2)
    fleet.nobody.append(gone_group)

    others = [p for p in groups if p not in (gone_group, fleet.dropped)]
    early_crash = set(rng.sample(others, max(1, len(groups) // 100)))
    deploy_queues = {f"queue-{q:02d}" for q in range(max(1, spec.queues // 10))}
    deploy_groups = [p for p in groups if p[0] in deploy_queues and p != fleet.dropped]
    crashed: set[Key] = set()

    def replace(pair: Group, name: str, at_ns: int) -> None:
        registry.deregister(pair[0], pair[1], name, now_ns=at_ns)
        host = fleet.hosts.pop(_key(pair, name))
        lease = leases.pop(_key(pair, name))
        new = names.next(host)
        members[pair][members[pair].index(name)] = new
        fleet.hosts[_key(pair, new)] = host
        leases[_key(pair, new)] = lease

    stuck_keys = set(fleet.stuck)
    for k in range(ROUNDS + 1):
        at_ns = registry.clock_ns() - (ROUNDS - k) * ROUND_S * NS
        if k in (4, 10, 16, 22):  # churn: 1 % leave, as many join
            for pair in rng.sample(groups, min(len(groups), max(1, spec.consumers // 100))):
                name = rng.choice(members[pair])
                key = _key(pair, name)
                if key not in crashed and key not in stuck_keys and pair != fleet.dropped:
                    replace(pair, name, at_ns)
        if 6 <= k <= 12:  # the rolling deploy, a seventh of the consumers a round
            for pair in deploy_groups:
                for name in list(members[pair]):
                    key = _key(pair, name)
                    pid = int(name.rpartition(":")[2])
                    if pid % 7 == k - 6 and key not in crashed and key not in stuck_keys:
                        replace(pair, name, at_ns)
        if k == 2:  # a few consumers crash (pruned at k == 13), and the whole gone group
            for pair in early_crash:
                crashed.add(_key(pair, members[pair][1]))
            crashed.update(_key(gone_group, name) for name in members[gone_group])
        if k == 13:
            registry.prune_expired(now_ns=at_ns)
        beats = [
            (pair[0], pair[1], name, leases[_key(pair, name)])
            for pair, names_ in members.items()
            for name in names_
            if _key(pair, name) not in crashed
        ]
        if k == ROUNDS:
            break  # the last round is the first live beat (with progress)
        for start in range(0, len(beats), CHUNK):
            registry.heartbeat_many(beats[start : start + CHUNK], now_ns=at_ns)
        if k == 0:  # who an operator looks at describes itself (host, pid, version)
            for key, host in fleet.hosts.items():
                if (
                    key in stuck_keys
                    or host == fleet.crashed_host
                    or key[1] == "scheduler"
                    or key[:2] == fleet.dropped
                ):
                    meta = {"host": host, "pid": key[2].rpartition(":")[2], "version": "41.2.0"}
                    registry.describe(*key, meta)
        if k == 12:  # the host crashes after this round's beat
            crashed.update(key for key, host in fleet.hosts.items() if host == fleet.crashed_host)
    fleet.dead = sorted(key for key in crashed if fleet.hosts.get(key) == fleet.crashed_host)
    fleet.alive = {key: lease for key, lease in leases.items() if key not in crashed}
    beat_live(registry, fleet)
    fleet.written_s = time.monotonic() - started
    return fleet


def beat_live(registry: RedisPresenceRegistry, fleet: Fleet) -> None:
    """One beat of every live consumer at the server's clock, with progress, except the
    stuck ones (leases held, no progress)."""
    stuck = set(fleet.stuck)
    beats: list[Any] = [
        (*key, lease, 0) if key in stuck else (*key, lease, 0, 0)
        for key, lease in fleet.alive.items()
    ]
    for start in range(0, len(beats), CHUNK):
        registry.execute(registry.plans.heartbeat_delayed(beats[start : start + CHUNK]))


@dataclass
class Beating:
    """A thread that keeps the live consumers beating every BEAT_EVERY_S."""

    registry: RedisPresenceRegistry
    fleet: Fleet
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def __enter__(self) -> Beating:
        def run() -> None:
            while not self.stop.wait(BEAT_EVERY_S):
                beat_live(self.registry, self.fleet)

        self.thread = threading.Thread(target=run, name="fleet-beats", daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=60)


# The browser side.

NAV_JS = """() => {
  const n = performance.getEntriesByType('navigation')[0];
  if (!n || n.loadEventEnd <= 0) return null;
  return {load_ms: n.loadEventEnd - n.startTime, server_ms: n.responseStart - n.requestStart,
          page: location.pathname + location.search};
}"""


@dataclass(frozen=True)
class Visit:
    """One page: where, navigation start to load event, request sent to first byte."""

    page: str
    load_ms: float
    server_ms: float


@dataclass
class Answer:
    question: int
    clicks: int = 0
    visits: list[Visit] = field(default_factory=list)
    found: str = ""
    ok: bool = False


class Asking:
    """One question asked from `/`: every click counted, every page timed."""

    def __init__(self, page: Page, question: int) -> None:
        self.page = page
        self.answer = Answer(question)

    def timed(self) -> None:
        value = self.page.wait_for_function(NAV_JS).json_value()
        self.answer.visits.append(Visit(value["page"], value["load_ms"], value["server_ms"]))

    def start(self) -> None:
        self.page.goto("/")
        self.timed()

    def click(self, target: Locator, *, navigates: bool = True) -> None:
        self.answer.clicks += 1
        if not navigates:
            target.click()
            return
        with self.page.expect_navigation():
            target.click()
        self.timed()


def _row_keys(page: Page, selector: str) -> list[Group]:
    keys: list[Group] = page.eval_on_selector_all(
        selector, "rows => rows.map(r => [r.dataset.queue, r.dataset.group])"
    )
    return [(q, g) for q, g in keys]


def q1_nobody_reads(page: Page, fleet: Fleet) -> Answer:
    ask = Asking(page, 1)
    ask.start()
    ask.click(page.locator("#totals [data-total=nobody_reading] a"))
    shown = set(_row_keys(page, "#groups tbody tr:has(.badge:text('nobody is reading'))"))
    ask.answer.found = f"{len(shown)} groups marked nobody is reading"
    ask.answer.ok = set(fleet.nobody) <= shown
    return ask.answer


def q2_stuck_consumer(page: Page, fleet: Fleet) -> Answer:
    ask = Asking(page, 2)
    ask.start()
    listed = page.locator("#totals [data-total=stuck] a[href*='/consumers']")
    if listed.count():  # the stuck consumers themselves
        ask.click(listed)
    else:  # the groups with one, then one group's stuck consumers
        ask.click(page.locator("#totals [data-total=stuck] a"))
        ask.click(page.locator("#groups tbody a.stuck-count").first)
    ask.click(page.locator("#consumers tbody tr.stuck td.consumer a").first)
    name = page.locator("#consumer-name").inner_text()
    key = next((k for k in fleet.stuck if k[2] == name), None)
    host = page.locator("#consumer-meta dt:text-is('host') + dd").all_inner_texts()
    history = page.locator("#timeline tbody tr").count()
    stuck = page.locator("#consumer-stats .pill.stuck").count()
    ask.answer.found = f"{name}: stuck {bool(stuck)}, host {host}, {history} transitions"
    ask.answer.ok = bool(key and stuck and host == [fleet.hosts[key]] and history >= 1)
    return ask.answer


def q3_why_dropped(page: Page, fleet: Fleet) -> Answer:
    ask = Asking(page, 3)
    ask.start()
    queue, group = fleet.dropped
    row = page.locator(f"#groups tbody tr[data-queue='{queue}'][data-group='{group}']")
    if row.count() == 0:  # not on the first page: found by its name
        ask.click(page.locator("form.filters input[name=group]"), navigates=False)
        page.keyboard.type(group)
        ask.click(page.locator("form.filters button[type=submit]"))
    ask.click(row.locator("td.name a"))
    went = page.locator(
        "#timeline tbody tr:is([data-kind=stale], [data-kind=expired])",
        has_text=fleet.crashed_host,
    )
    when = went.locator("td.when").all_inner_texts()
    below = page.locator("#group-stats [data-total=below]:not([hidden])").count()
    ask.answer.found = (
        f"{went.count()} stale or expired of {fleet.crashed_host} from "
        f"{min(when, default='?')}; below its minimum: {bool(below)}"
    )
    ask.answer.ok = went.count() >= 1 and below == 1
    return ask.answer


def q4_scheduling(page: Page, fleet: Fleet) -> Answer:
    ask = Asking(page, 4)
    ask.start()
    ask.click(page.locator("form.filters input[name=group]"), navigates=False)
    page.keyboard.type("scheduler")
    ask.click(page.locator("form.filters button[type=submit]"))
    shown = _row_keys(page, "#groups tbody tr[data-group=scheduler]")
    cells = page.locator("#groups tbody tr[data-group=scheduler] td.active")
    active = sum(int(text.replace(",", "")) for text in cells.all_inner_texts())
    ask.answer.found = f"{len(shown)} scheduler groups, {active} active"
    ask.answer.ok = set(shown) == set(fleet.schedulers) and active == len(fleet.schedulers)
    return ask.answer


def q5_dead_leases(page: Page, fleet: Fleet) -> Answer:
    ask = Asking(page, 5)
    ask.start()
    ask.click(page.locator("#totals [data-total=leases_expired] a"))
    ask.click(page.locator("#groups tbody tr td.name a").first)
    rows = page.locator("#consumers tbody tr[data-state=expired]")
    keys = [json.loads(k) for k in rows.evaluate_all("rs => rs.map(r => r.dataset.key)")]
    leases = rows.evaluate_all("rs => rs.map(r => +r.dataset.leases)")
    holding = [k for k, n in zip(keys, leases, strict=True) if n > 0]
    ask.answer.found = f"{len(holding)} expired consumers holding leases on the group's page"
    ask.answer.ok = bool(holding) and all(tuple(k) in set(fleet.dead) for k in holding)
    return ask.answer


def q6_filtered_link(page: Page, fleet: Fleet) -> Answer:
    ask = Asking(page, 6)
    ask.start()
    ask.click(page.locator("form.filters input[name=stuck]"), navigates=False)
    ask.click(page.locator("form.filters button[type=submit]"))
    link = page.url
    shown = _row_keys(page, "#groups tbody tr")
    other = page.context.new_page()  # the link, opened elsewhere
    try:
        other.goto(link)
        again = _row_keys(other, "#groups tbody tr")
    finally:
        other.close()
    stuck_groups = {(k[0], k[1]) for k in fleet.stuck}
    ask.answer.found = f"{link.split('/', 3)[-1]}: {len(shown)} groups, the same opened anew"
    ask.answer.ok = "stuck=1" in link and shown == again and set(shown) == stuck_groups
    return ask.answer


ASKED: dict[int, Callable[[Page, Fleet], Answer]] = {
    1: q1_nobody_reads,
    2: q2_stuck_consumer,
    3: q3_why_dropped,
    4: q4_scheduling,
    5: q5_dead_leases,
    6: q6_filtered_link,
}


def ask_all(page: Page, fleet: Fleet) -> list[Answer]:
    """The six questions, each from `/`, in `page` (its context's base URL the service)."""
    return [ask(page, fleet) for ask in ASKED.values()]


# The run.


def wait_for_totals(
    base_url: str, headers: dict[str, str] | None = None, timeout_s: float = 300.0
) -> float:
    """GET / until its totals are read, the stuck count with them (the service's first read
    of every group and of every consumer); returns the first page's time in ms."""
    deadline = time.monotonic() + timeout_s
    first_ms = None
    while time.monotonic() < deadline:
        started = time.perf_counter()
        request = urllib.request.Request(
            base_url + "/", headers={"Accept": "application/json", **(headers or {})}
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            body = json.loads(response.read())
        if first_ms is None:
            first_ms = (time.perf_counter() - started) * 1000
        if body.get("totals") and body["totals"].get("stuck") is not None:
            return first_ms
        time.sleep(0.5)
    raise TimeoutError("the service did not read its totals")


def page_split(base_url: str, path: str = "/", rounds: int = 7) -> tuple[float, float]:
    """Median ms of `path` as HTML and as its JSON twin, which reads the same page and
    totals but draws no sparkline (so no event log is read), interleaved."""
    times: dict[str, list[float]] = {"text/html": [], "application/json": []}
    for _ in range(rounds):
        for accept, spent in times.items():
            request = urllib.request.Request(base_url + path, headers={"Accept": accept})
            started = time.perf_counter()
            with urllib.request.urlopen(request, timeout=120) as response:
                response.read()
            spent.append((time.perf_counter() - started) * 1000)
    return statistics.median(times["text/html"]), statistics.median(times["application/json"])


def _pages(answers: list[list[Answer]]) -> Iterator[tuple[int, int, int, str, list[Visit]]]:
    """(question, step, clicks, page, that page's visits over rounds)."""
    for first, *rest in zip(*answers, strict=True):
        for step, visit in enumerate(first.visits):
            yield (
                first.question,
                step,
                first.clicks,
                visit.page,
                [first.visits[step]] + [a.visits[step] for a in rest],
            )


def run(spec: FleetSpec, rounds: int, out: Path | None) -> int:
    from redis_presence.cli.demo.dashboard import start_dashboard
    from redis_presence.cli.embedded import start_local_redis

    load_before = os.getloadavg()
    server = start_local_redis("redis-server")
    dashboard = None
    try:
        registry = RedisPresenceRegistry.from_url(server.url, prefix=PREFIX)
        print(f"redis-server on {server.url}; writing {spec.label}...", flush=True)
        fleet = build_fleet(registry, spec)
        print(f"written in {fleet.written_s:.1f} s", flush=True)
        with Beating(registry, fleet):
            dashboard = start_dashboard(server, PREFIX, 0)
            first_ms = wait_for_totals(dashboard.url)
            print(f"serving {dashboard.url}; the first / took {first_ms:.0f} ms", flush=True)
            results: dict[str, list[list[Answer]]] = {}
            console: list[str] = []
            with sync_playwright() as playwright:
                browser: Browser = playwright.chromium.launch(
                    executable_path=CHROMIUM, args=CHROMIUM_FLAGS
                )
                for label, viewport in (("desktop", DESKTOP), ("390px", PHONE)):
                    context = browser.new_context(base_url=dashboard.url, viewport=viewport)
                    context.set_default_timeout(120_000)
                    page = context.new_page()
                    page.on("console", lambda m: console.append(m.text))
                    results[label] = [ask_all(page, fleet) for _ in range(rounds)]
                    context.close()
                    refused = [m for m in console if "Content Security Policy" in m]
                    if refused:
                        raise AssertionError(f"the CSP refused: {refused}")
                browser.close()
            html_ms, json_ms = page_split(dashboard.url)
        load_after = os.getloadavg()
    finally:
        if dashboard is not None:
            dashboard.stop()
        server.stop()
    load = f"{load_before[0]:.1f} → {load_after[0]:.1f}"
    print()
    print(
        f"{spec.label}; medians of {rounds} rounds; load average (1 min) {load}; "
        f"{os.cpu_count()} CPUs; first / (cold totals) {first_ms:.0f} ms; GET / "
        f"{html_ms:.0f} ms as HTML, {json_ms:.0f} ms as JSON (no sparklines)"
    )
    print()
    print("| question | clicks | page | desktop ms (server) | 390 px ms (server) | answer |")
    print("| --- | ---: | --- | ---: | ---: | --- |")
    rows = []
    for (q, step, clicks, shown, desk), (*_, phone) in zip(
        _pages(results["desktop"]), _pages(results["390px"]), strict=True
    ):

        def cell(visits: list[Visit]) -> str:
            load_ms = statistics.median(v.load_ms for v in visits)
            server_ms = statistics.median(v.server_ms for v in visits)
            return f"{load_ms:,.0f} ({server_ms:,.0f})"

        answers = [a for a in results["desktop"][0] if a.question == q]
        found = answers[0].found if step == 0 else ""
        title = f"{q}. {QUESTIONS[q]}" if step == 0 else ""
        shown_clicks = str(clicks) if step == 0 else ""
        print(f"| {title} | {shown_clicks} | `{shown}` | {cell(desk)} | {cell(phone)} | {found} |")
        rows.append(
            {
                "question": q,
                "step": step,
                "clicks": clicks,
                "page": shown,
                "desktop": [v.__dict__ for v in desk],
                "phone": [v.__dict__ for v in phone],
            }
        )
    bad = [
        (label, a.question, a.clicks, a.found)
        for label, by_round in results.items()
        for answers in by_round
        for a in answers
        if not a.ok or a.clicks > 2
    ]
    if out is not None:
        out.write_text(
            json.dumps(
                {
                    "fleet": spec.label,
                    "load": load,
                    "first_ms": first_ms,
                    "html_ms": html_ms,
                    "json_ms": json_ms,
                    "rows": rows,
                    "failed": bad,
                },
                indent=1,
            )
        )
    if bad:
        print(f"\nNOT ANSWERED within two clicks: {bad}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.questions", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--small", action="store_true", help=f"{SMALL.label} instead of {FULL.label}"
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="times each question is asked (medians)"
    )
    parser.add_argument("--out", type=Path, help="write the timings as JSON here")
    args = parser.parse_args(argv)
    return run(SMALL if args.small else FULL, args.rounds, args.out)


if __name__ == "__main__":
    raise SystemExit(main())

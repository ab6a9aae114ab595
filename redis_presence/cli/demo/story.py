"""The story the demo plays: a local Redis, several brokers, and a timeline measured in
TTLs on which one consumer hangs, a broker crashes, a consumer leaves and a replacement
joins, shown refresh by refresh; every process it started is stopped on any exit."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rich.console import Console

from redis_presence.contract import PresenceRegistry
from redis_presence.registry import RedisPresenceRegistry

from .. import render, render_frames
from ..embedded import LocalRedis, ServerChoice, start_local_redis
from ..frames import Frame, Watcher
from ..signals import interrupt_on_sigterm
from .broker import BrokerProcess, start_broker, stop_brokers
from .dashboard import Dashboard, start_dashboard

DEFAULT_DEMO_PREFIX = "presence-demo"
STORY_TTLS = 5.0
"""How long the story lasts, in TTLs: its last step (the prune) comes at 4."""


@dataclass(frozen=True)
class Step:
    """One scripted event, `at_s` seconds after the story starts."""

    at_s: float
    what: str
    action: Callable[[], object]


@dataclass
class Story:
    """The demo's children and the steps it plays with them."""

    server: LocalRedis
    prefix: str
    ttl_ms: int
    consumers: int
    quiet: bool
    say: Callable[[str], None]
    brokers: list[BrokerProcess] = field(default_factory=list)

    def add_broker(self, index: int, offset: int) -> BrokerProcess:
        name = f"broker-{index}"
        broker = start_broker(
            self.server, self.prefix, self.ttl_ms, name, self.consumers, offset, self.quiet
        )
        self.brokers.append(broker)
        names = ", ".join(c for _, _, c in broker.consumers)
        self.say(f"started {name} pid {broker.pid} serving {names}")
        return broker

    def steps(self, registry: PresenceRegistry) -> list[Step]:
        """The timeline, in TTLs: hang, crash, graceful leave, replacement, prune."""
        ttl_s = self.ttl_ms / 1000
        first, last = self.brokers[0], self.brokers[-1]
        leaver = self.brokers[1] if len(self.brokers) >= 3 else first
        steps = [
            Step(
                0.5 * ttl_s,
                f"{first.name}: consumer {first.consumers[-1][2]} hangs (no more heartbeats)",
                lambda: first.send("stop-one"),
            )
        ]
        if len(self.brokers) >= 2:

            def crash() -> None:
                with contextlib.suppress(ProcessLookupError):
                    last.process.kill()
                last.process.wait()

            steps.append(Step(ttl_s, f"{last.name} pid {last.pid} crashes (SIGKILL)", crash))
            replacement = len(self.brokers) + 1
            steps.append(
                Step(
                    2 * ttl_s,
                    f"broker-{replacement} starts in place of {last.name}",
                    lambda: self.add_broker(replacement, last.offset),
                )
            )
        if self.consumers >= 2 or leaver is not first:
            steps.append(
                Step(
                    1.5 * ttl_s,
                    f"{leaver.name}: one consumer shuts down cleanly (deregisters)",
                    lambda: leaver.send("leave-one"),
                )
            )

        def prune() -> None:
            removed = registry.prune_expired(ttl_ms=self.ttl_ms)
            self.say(f"pruned {removed} expired consumer(s)")

        steps.append(Step(4 * ttl_s, "operator runs prune", prune))
        return sorted(steps, key=lambda step: step.at_s)


def _wait_for_fleet(
    registry: PresenceRegistry, expected: int, ttl_ms: int, timeout_s: float
) -> None:
    """Poll (with a deadline) until every started consumer has beaten once."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(registry.snapshot(ttl_ms=ttl_ms)) >= expected:
            return
        time.sleep(0.05)


class Log:
    """The demo's event log. One clock, started with the demo, stamps every line, the plain
    frames and the live title; during the live view lines print above it (once)."""

    def __init__(self, console: Console, clock: Callable[[], float] = time.monotonic) -> None:
        self.console = console
        self.clock = clock
        self.origin = clock()
        self.sink: render_frames.FrameSink | None = None

    def now(self) -> float:
        """Seconds since the demo started."""
        return self.clock() - self.origin

    def say(self, text: str) -> None:
        stamp = f"demo: [{self.now():5.1f}s] "
        width = min(render.LINE_WIDTH, self.console.width)
        line = render.wrapped(text, width, len(stamp), stamp)
        if self.sink is not None:
            self.sink.say(line)
        else:
            render.write(self.console, line + "\n")


def run_demo(
    console: Console,
    *,
    duration_s: float | None,
    brokers: int,
    consumers: int,
    ttl_ms: int,
    tui: bool,
    server_choice: ServerChoice = "auto",
    prefix: str = DEFAULT_DEMO_PREFIX,
    serve_port: int | None = None,
) -> None:
    """Run the whole demo for `duration_s` seconds after the story begins (default: until
    it ends, `STORY_TTLS` TTLs), with the dashboard on `serve_port` (0: a free port) unless
    it is None; every child is stopped on any exit."""
    live_view = tui and console.is_terminal
    log = Log(console)
    say = log.say
    ttl_s = ttl_ms / 1000
    say(
        f"TTL {ttl_ms} ms: a consumer is active up to {ttl_s:g}s after its last heartbeat, "
        f"stale up to {2 * ttl_s:g}s, expired after that"
    )
    server: LocalRedis | None = None
    story: Story | None = None
    registry: RedisPresenceRegistry | None = None
    dashboard: Dashboard | None = None
    try:
        with interrupt_on_sigterm():
            server = start_local_redis(server_choice)
            if server.pid is not None:
                say(f"started {server.kind} pid {server.pid} on {_where(server)}")
            else:
                say(f"started {server.kind} inside this process on {_where(server)}")
            story = Story(server, prefix, ttl_ms, consumers, quiet=live_view, say=say)
            for index in range(brokers):
                story.add_broker(index + 1, index * consumers)
            registry = RedisPresenceRegistry.from_url(server.url, prefix=prefix)
            if serve_port is not None:
                registry.set_ttl(ttl_ms)  # the TTL the dashboard reads and its events follow
                dashboard = start_dashboard(server, prefix, serve_port)
                say(f"dashboard: {dashboard.url} (pid {dashboard.pid})")
            fleet = brokers * consumers
            _wait_for_fleet(registry, fleet, ttl_ms, timeout_s=15.0)
            everyone = f"all {fleet} consumers are" if fleet > 1 else "the one consumer is"
            say(f"{everyone} heartbeating; the story begins")
            duration = STORY_TTLS * ttl_s if duration_s is None else duration_s
            _play(story, registry, duration, live_view, log)
    except KeyboardInterrupt:
        say("interrupted: stopping everything")
    finally:
        if dashboard is not None:
            status = dashboard.stop()
            how = "" if status == 0 else f" (exit status {status})"
            say(f"stopped the dashboard pid {dashboard.pid}{how}")
        if registry is not None:
            registry.close()
        if story is not None:
            _stop_story(story, say)
        if server is not None:
            server.stop()
            if server.pid is not None:
                say(f"stopped {server.kind} pid {server.pid}")
            else:
                say(f"stopped {server.kind} on {_where(server)}")
            say("done: every process the demo started has stopped")


def _where(server: LocalRedis) -> str:
    return f"127.0.0.1:{server.port}"


def _stop_story(story: Story, say: Callable[[str], None]) -> None:
    """Stop every broker, and say which ones had already gone (the crashed one)."""
    gone = {broker.name: broker.process.poll() for broker in story.brokers}
    stop_brokers(story.brokers)
    for broker in story.brokers:
        status = gone[broker.name]
        if status is None:
            say(f"stopped {broker.name} pid {broker.pid}")
        elif status < 0:
            how = signal.Signals(-status).name if -status in signal.valid_signals() else -status
            say(f"{broker.name} pid {broker.pid} had already exited (killed by {how})")
        else:
            say(f"{broker.name} pid {broker.pid} had already exited (status {status})")


def _play(
    story: Story,
    registry: PresenceRegistry,
    duration_s: float,
    live_view: bool,
    log: Log,
) -> None:
    """Refresh until `duration_s` after the story begins, firing each step on time."""
    ttl_ms = story.ttl_ms
    pending = story.steps(registry)
    watcher = Watcher()
    interval_s = min(0.5, ttl_ms / 4000) if live_view else min(1.0, ttl_ms / 2000)
    begin = log.now()
    end = begin + duration_s
    next_tick = begin
    with render_frames.frame_sink(log.console, live=live_view) as sink:
        log.sink = sink
        try:
            while True:
                elapsed = log.now() - begin
                while pending and pending[0].at_s <= elapsed:
                    step = pending.pop(0)
                    log.say(step.what)
                    step.action()
                frame = watcher.refresh(registry.snapshot(ttl_ms=ttl_ms))
                now = log.now()
                if live_view:
                    title = demo_title(now, end, ttl_ms, sink.width or render.LINE_WIDTH)
                    view = render_frames.View(frame.rows, width=sink.width, height=sink.height)
                    sink.show(frame, title, view)
                else:
                    render.write(log.console, _plain_frame(frame, now))
                if now >= end:
                    return
                next_tick += interval_s
                time.sleep(max(0.0, min(next_tick, end) - log.now()))
        finally:
            log.sink = None


def demo_title(now_s: float, end_s: float, ttl_ms: int, width: int) -> str:
    """The live view's title: the clock, the end, the TTL and its horizons and how to stop,
    shortened (the least useful words first) until it fits `width` columns."""
    clock = f"{now_s:4.1f}s (ends at {end_s:.1f}s)"
    ttl = f"TTL {ttl_ms} ms"
    rule = f"stale after {ttl_ms / 1000:g}s, expired after {2 * ttl_ms / 1000:g}s"
    titles = (
        f"redis-presence demo  {clock}  {ttl} ({rule})  Ctrl-C stops",
        f"redis-presence demo  {clock}  {ttl} ({rule})",
        f"demo  {clock}  {ttl}: {rule}",
        f"demo  {clock}  {ttl}",
        f"demo {now_s:.1f}s/{end_s:.1f}s",
    )
    return next((title for title in titles if len(title) <= width), titles[-1])


def _plain_frame(frame: Frame, elapsed: float) -> str:
    states = frame.states
    head = f"demo: [{elapsed:5.1f}s] {render.plural(sum(states.values()), 'consumer')}: " + (
        ", ".join(f"{n} {state.value}" for state, n in states.items())
    )
    lines = [head, *render_frames.consumer_lines(frame)]
    lines.append(f"  counts: {render.tally_line(frame.tallies)}")
    return "\n".join(lines) + "\n"

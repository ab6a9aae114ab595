"""The demo: a local Redis, real broker processes, and a scripted story to watch.

`run_broker` is one broker (the hidden `demo-broker` command, also used by
docker-compose); `run_demo` starts a server and several brokers, crashes and stops
some of them on a timeline measured in TTLs, shows every refresh, and always stops
every process it started.
"""

from __future__ import annotations

import contextlib
import os
import queue as queue_module
import random
import signal
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TextIO

from rich.console import Console

from redis_presence.errors import PresenceError
from redis_presence.protocol import PresenceRegistry
from redis_presence.redis import RedisPresenceRegistry

from . import render
from .embedded import LocalRedis, ServerChoice, start_local_redis, stop_process
from .watch import Frame, Watcher

DEMO_GROUPS: tuple[tuple[str, str], ...] = (
    ("orders", "billing"),
    ("orders", "shipping"),
    ("emails", "sender"),
    ("payments", "ledger"),
)
"""The simulated `(queue, group)` pairs; consumers are dealt onto them round-robin."""

DEFAULT_DEMO_TTL_MS = 2000
DEFAULT_DEMO_PREFIX = "presence-demo"


Triple = tuple[str, str, str]


def broker_consumers(name: str, count: int, offset: int | None = None) -> list[Triple]:
    """The `(queue, group, consumer)` of each consumer a broker named `name` serves."""
    start = zlib.crc32(name.encode()) if offset is None else offset
    return [
        (*DEMO_GROUPS[(start + i) % len(DEMO_GROUPS)], f"{name}-c{i + 1}") for i in range(count)
    ]


def beat_interval_s(ttl_ms: int) -> float:
    """How often a demo consumer reads its queue: five times per TTL, within [0.05, 5] s."""
    return min(5.0, max(0.05, ttl_ms / 5000))


def _read_commands(stream: TextIO, inbox: queue_module.Queue[str]) -> None:
    for line in stream:
        inbox.put(line.strip())
    inbox.put("quit")  # EOF: the demo that controls us is gone


def run_broker(
    registry: PresenceRegistry,
    name: str,
    consumers: int,
    *,
    beat_s: float,
    offset: int | None = None,
    control: TextIO | None = None,
    log: Callable[[str], None] = print,
) -> None:
    """Serve `consumers` simulated consumers, heartbeating on every queue read.

    With `control`, reads commands line by line: `stop-one` (a consumer hangs: it stops
    beating without deregistering), `leave-one` (a consumer deregisters), `quit`; end
    of input also quits. Live consumers deregister when the broker stops.
    """
    rng = random.Random(name)
    live = broker_consumers(name, consumers, offset)
    leases = dict.fromkeys(live, 0)
    inbox: queue_module.Queue[str] = queue_module.Queue()
    if control is not None:
        reader = threading.Thread(target=_read_commands, args=(control, inbox), daemon=True)
        reader.start()
    failing = False
    try:
        while True:
            try:
                for consumer in live:  # one simulated read of each consumer's queue
                    leases[consumer] = max(0, min(8, leases[consumer] + rng.randint(-2, 2)))
                    registry.heartbeat(*consumer, lease_count=leases[consumer])
                if failing:
                    log(f"{name}: Redis is back")
                failing = False
            except PresenceError as exc:
                if not failing:
                    log(f"{name}: heartbeat failed, retrying: {exc}")
                failing = True
            try:
                command = inbox.get(timeout=beat_s * rng.uniform(0.8, 1.2))
            except queue_module.Empty:
                continue
            if command == "quit":
                return
            if command in ("stop-one", "leave-one") and live:
                consumer = live.pop()
                if command == "leave-one":
                    with contextlib.suppress(PresenceError):
                        registry.deregister(*consumer)
    finally:
        for consumer in live:
            with contextlib.suppress(PresenceError):
                registry.deregister(*consumer)


# ---------------------------------------------------------------- orchestration


def _package_root() -> str:
    return str(Path(__file__).resolve().parents[2])


def broker_argv(
    url: str, prefix: str, ttl_ms: int, name: str, consumers: int, offset: int
) -> list[str]:
    """The command line of one broker process: this Python, the hidden CLI command."""
    return [
        sys.executable,
        "-c",
        "from redis_presence.cli import main; main()",
        "--url",
        url,
        "--prefix",
        prefix,
        "--ttl-ms",
        str(ttl_ms),
        "demo-broker",
        "--name",
        name,
        "--consumers",
        str(consumers),
        "--offset",
        str(offset),
        "--stdin-control",
    ]


@dataclass
class BrokerProcess:
    """One broker child process and the consumers it serves."""

    name: str
    offset: int
    consumers: list[Triple]
    process: subprocess.Popen[str]

    @property
    def pid(self) -> int:
        return self.process.pid

    def send(self, command: str) -> None:
        """Send a control line; a broker that is already gone is ignored."""
        stdin = self.process.stdin
        if stdin is not None:
            with contextlib.suppress(OSError, ValueError):
                stdin.write(command + "\n")
                stdin.flush()


def start_broker(
    server: LocalRedis,
    prefix: str,
    ttl_ms: int,
    name: str,
    consumers: int,
    offset: int,
    quiet: bool,
) -> BrokerProcess:
    """Launch one broker as a real OS process in its own session; it quits when its stdin
    closes, so also when the demo dies without cleaning up."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (_package_root(), env.get("PYTHONPATH", "")) if p
    )
    env.pop("REDIS_PRESENCE_READ_ONLY", None)  # a broker writes, whatever the shell says
    process = subprocess.Popen(
        broker_argv(server.url, prefix, ttl_ms, name, consumers, offset),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL if quiet else None,
        text=True,
        env=env,
        start_new_session=True,  # Ctrl-C reaches the demo only; it stops us in order
    )
    return BrokerProcess(name, offset, broker_consumers(name, consumers, offset), process)


def stop_brokers(brokers: Sequence[BrokerProcess], grace_s: float = 2.0) -> None:
    """Close each broker's stdin (it deregisters and exits), then terminate, then kill."""
    for broker in brokers:
        stdin = broker.process.stdin
        if stdin is not None:
            with contextlib.suppress(OSError):
                stdin.close()
    deadline = time.monotonic() + grace_s
    for broker in brokers:
        with contextlib.suppress(subprocess.TimeoutExpired):
            broker.process.wait(timeout=max(0.0, deadline - time.monotonic()))
    for broker in brokers:
        stop_process(broker.process, timeout_s=grace_s)


@dataclass(frozen=True)
class Step:
    """One scripted event, `at_s` seconds after the story starts."""

    at_s: float
    what: str
    action: Callable[[], None]


@dataclass
class Story:
    """The demo's state: children, scripted steps and what has been said so far."""

    server: LocalRedis
    prefix: str
    ttl_ms: int
    consumers: int
    quiet: bool
    say: Callable[[str], None]
    brokers: list[BrokerProcess] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

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
                    lambda: self._replace(replacement, last.offset),
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

    def _replace(self, index: int, offset: int) -> None:
        self.add_broker(index, offset)


@contextlib.contextmanager
def interrupt_on_sigterm() -> Iterator[None]:
    """Treat SIGTERM like Ctrl-C inside the block, so cleanup (`finally`) always happens."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: nothing to install
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _wait_for_fleet(
    registry: PresenceRegistry, expected: int, ttl_ms: int, timeout_s: float
) -> None:
    """Poll (with a deadline) until every started consumer has beaten once."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(registry.snapshot(ttl_ms=ttl_ms)) >= expected:
            return
        time.sleep(0.05)


def run_demo(
    console: Console,
    *,
    duration_s: float,
    brokers: int,
    consumers: int,
    ttl_ms: int,
    tui: bool,
    server_choice: ServerChoice = "auto",
    prefix: str = DEFAULT_DEMO_PREFIX,
) -> None:
    """Run the whole demo for `duration_s` seconds; every child is stopped on any exit."""
    live_view = tui and console.is_terminal
    notes: list[str] = []
    clock_start = time.monotonic()

    def say(text: str) -> None:
        line = f"[{time.monotonic() - clock_start:5.1f}s] {text}"
        notes.append(line)
        if not live_view:
            render.write(console, f"demo: {line}\n")

    ttl_s = ttl_ms / 1000
    say(
        f"TTL {ttl_ms} ms: a consumer is active up to {ttl_s:g}s after its last heartbeat, "
        f"stale up to {2 * ttl_s:g}s, expired after that"
    )
    server: LocalRedis | None = None
    story: Story | None = None
    registry: RedisPresenceRegistry | None = None
    try:
        with interrupt_on_sigterm():
            server = start_local_redis(server_choice)
            where = f"127.0.0.1:{server.port}"
            if server.pid is not None:
                say(f"started {server.kind} pid {server.pid} on {where}")
            else:
                say(f"started {server.kind} inside this process on {where}")
            story = Story(server, prefix, ttl_ms, consumers, quiet=live_view, say=say)
            for index in range(brokers):
                story.add_broker(index + 1, index * consumers)
            registry = RedisPresenceRegistry.from_url(server.url, prefix=prefix)
            _wait_for_fleet(registry, brokers * consumers, ttl_ms, timeout_s=15.0)
            say(f"all {brokers * consumers} consumers are heartbeating; the story begins")
            _play(console, story, registry, duration_s, live_view, notes, say, clock_start)
    except KeyboardInterrupt:
        say("interrupted: stopping everything")
    finally:
        if registry is not None:
            registry.close()
        if story is not None:
            stop_brokers(story.brokers)
            for broker in story.brokers:
                say(f"stopped {broker.name} pid {broker.pid}")
        if server is not None:
            server.stop()
            if server.pid is not None:
                say(f"stopped {server.kind} pid {server.pid}")
        say("done: every process the demo started has stopped")
        if live_view:
            render.write(console, "".join(f"demo: {line}\n" for line in notes))


def _play(
    console: Console,
    story: Story,
    registry: PresenceRegistry,
    duration_s: float,
    live_view: bool,
    notes: list[str],
    say: Callable[[str], None],
    origin: float,
) -> None:
    """Refresh until `duration_s` after the story starts, firing each step on time."""
    ttl_ms = story.ttl_ms
    pending = story.steps(registry)
    watcher = Watcher()
    interval_s = min(0.5, ttl_ms / 4000) if live_view else min(1.0, ttl_ms / 2000)
    start = time.monotonic()
    next_tick = start
    with render.frame_sink(console, live=live_view) as sink:
        while True:
            elapsed = time.monotonic() - start
            while pending and pending[0].at_s <= elapsed:
                step = pending.pop(0)
                say(step.what)
                step.action()
            frame = watcher.refresh(registry.snapshot(ttl_ms=ttl_ms))
            if live_view:
                title = (
                    f"redis-presence demo  story {elapsed:4.1f}s / {duration_s:g}s  "
                    f"TTL {ttl_ms} ms (stale after {ttl_ms / 1000:g}s, "
                    f"expired after {2 * ttl_ms / 1000:g}s)  Ctrl-C stops"
                )
                sink.show(frame, title, notes[-6:])
            else:
                render.write(console, _plain_frame(frame, time.monotonic() - origin))
            if elapsed >= duration_s:
                return
            next_tick += interval_s
            time.sleep(max(0.0, min(next_tick, start + duration_s) - time.monotonic()))


def _plain_frame(frame: Frame, elapsed: float) -> str:
    states = frame.states
    head = f"demo: [{elapsed:5.1f}s] {sum(states.values())} consumers: " + ", ".join(
        f"{n} {state.value}" for state, n in states.items()
    )
    lines = [head, *render.consumer_lines(frame)]
    lines.append(f"  counts: {render.tally_line(frame.tallies)}")
    return "\n".join(lines) + "\n"

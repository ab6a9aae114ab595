"""One demo broker: the child process (`run_broker`, behind the hidden `demo-broker`
command, which docker-compose also runs) and how the demo starts and stops it."""

from __future__ import annotations

import contextlib
import os
import queue as queue_module
import random
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from redis_presence.contract import PresenceRegistry
from redis_presence.errors import PresenceError

from ..embedded import LocalRedis, stop_process

DEMO_GROUPS: tuple[tuple[str, str], ...] = (
    ("orders", "billing"),
    ("orders", "shipping"),
    ("emails", "sender"),
    ("payments", "ledger"),
)
"""The simulated `(queue, group)` pairs; consumers are dealt onto them round-robin."""

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


# ---------------------------------------------------------------- the child process


def _read_commands(stream: TextIO, inbox: queue_module.Queue[str]) -> None:
    for line in stream:
        inbox.put(line.strip())
    inbox.put("quit")  # EOF: the demo that controls us is gone


def _consumers(count: int) -> str:
    return f"{count} consumer{'' if count == 1 else 's'}"


def run_broker(
    registry: PresenceRegistry,
    name: str,
    consumers: int,
    *,
    beat_s: float,
    offset: int | None = None,
    control: TextIO | None = None,
    log: Callable[[str], None] = print,
    lifecycle: Callable[[str], None] = lambda line: None,
    where: str = "",
) -> None:
    """Serve `consumers` simulated consumers, heartbeating on every queue read.

    With `control`, reads commands line by line: `stop-one` (a consumer hangs: it stops
    beating without deregistering), `leave-one` (a consumer deregisters), `quit`; end
    of input also quits. Live consumers deregister when the broker stops. Outages (and
    recoveries) go to `log`, one line each; the start and the stop to `lifecycle`.
    """
    rng = random.Random(name)
    live = broker_consumers(name, consumers, offset)
    leases = dict.fromkeys(live, 0)
    inbox: queue_module.Queue[str] = queue_module.Queue()
    served = ", ".join(f"{c} ({q}/{g})" for q, g, c in live)
    lifecycle(
        f"{name}: started, serving {_consumers(len(live))}: {served}"
        + (f"; {where}" if where else "")
    )
    if control is not None:
        reader = threading.Thread(target=_read_commands, args=(control, inbox), daemon=True)
        reader.start()
    failing = False
    why = "stopped"
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
                why = "stopped (told to quit, or its control input closed)"
                return
            if command in ("stop-one", "leave-one") and live:
                consumer = live.pop()
                if command == "leave-one":
                    with contextlib.suppress(PresenceError):
                        registry.deregister(*consumer)
    except KeyboardInterrupt:
        why = "stopped by a signal (SIGTERM or Ctrl-C)"
        raise
    finally:
        gone = 0
        for consumer in live:
            with contextlib.suppress(PresenceError):
                registry.deregister(*consumer)
                gone += 1
        left = f"deregistered {gone} of {_consumers(len(live))}" if live else "no consumer left"
        lifecycle(f"{name}: {why}; {left}")


# ---------------------------------------------------------------- the parent's side


def _package_root() -> str:
    return str(Path(__file__).resolve().parents[3])


def cli_argv(url: str, prefix: str, *args: str) -> list[str]:
    """A command line of this package's CLI in this Python, on the demo's Redis and prefix."""
    return [
        sys.executable,
        "-c",
        "from redis_presence.cli import main; main()",
        "--url",
        url,
        "--prefix",
        prefix,
        *args,
    ]


def broker_argv(
    url: str, prefix: str, ttl_ms: int, name: str, consumers: int, offset: int
) -> list[str]:
    """The command line of one broker process: this Python, the hidden CLI command."""
    return cli_argv(
        url,
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
        "--quiet",
    )


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

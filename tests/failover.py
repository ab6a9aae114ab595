"""What failover tests share: brokers beating through reporters, and probes that record
what a caller sees while writes fail over."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from redis_presence import PresenceError, PresenceReporter, RedisPresenceRegistry


@dataclass
class Probe:
    """Writes one beat every few milliseconds through its own registry and records what the
    caller saw: when each call returned and which errors it raised."""

    open_registry: Callable[[], Any]
    name: str
    asynchronous: bool = False
    queues: tuple[str, ...] = ("probe",)
    """Each call beats one consumer on each of these queues (``heartbeat_many``)."""
    stop: threading.Event = field(default_factory=threading.Event)
    ok: list[float] = field(default_factory=list)
    errors: list[tuple[float, str]] = field(default_factory=list)
    thread: threading.Thread | None = None

    def start(self) -> Probe:
        target = self._run_async if self.asynchronous else self._run
        self.thread = threading.Thread(target=target, name=f"probe-{self.name}", daemon=True)
        self.thread.start()
        return self

    def _record(self, error: BaseException | None) -> None:
        now = time.monotonic()
        if error is None:
            self.ok.append(now)
        else:
            self.errors.append((now, type(error).__name__))

    def _run(self) -> None:
        with self.open_registry() as registry:
            while not self.stop.wait(0.02):
                try:
                    registry.heartbeat_many(self.beats)
                except PresenceError as error:
                    self._record(error)
                else:
                    self._record(None)

    @property
    def beats(self) -> list[tuple[str, str, str, int]]:
        return [(queue, self.name, "probe", 0) for queue in self.queues]

    @property
    def keys(self) -> set[tuple[str, str, str]]:
        """The consumers this probe writes."""
        return {(queue, self.name, "probe") for queue in self.queues}

    def _run_async(self) -> None:
        async def main() -> None:
            async with self.open_registry() as registry:
                while not self.stop.is_set():
                    try:
                        await registry.heartbeat_many(self.beats)
                    except PresenceError as error:
                        self._record(error)
                    else:
                        self._record(None)
                    await asyncio.sleep(0.02)

        asyncio.run(main())

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(30)

    def wrote_after(self, moment: float) -> bool:
        return any(t > moment for t in self.ok)

    def gap_after(self, moment: float) -> float:
        """Seconds from `moment` until the first call after it that succeeded after the last
        failure (how long writes were not getting through)."""
        failures = [t for t, _ in self.errors if t >= moment]
        last_failure = max(failures, default=moment)
        resumed = min(t for t in self.ok if t >= last_failure)
        return resumed - moment

    def failures_after(self, moment: float, until: float) -> dict[str, int]:
        seen: dict[str, int] = {}
        for t, name in self.errors:
            if moment <= t <= until:
                seen[name] = seen.get(name, 0) + 1
        return seen


class Broker:
    """A broker: a `PresenceReporter` on its own registry, and a thread calling `beat` for
    each of its consumers every 10 ms (as on every queue read)."""

    def __init__(self, url: str, name: str, consumers: list[tuple[str, str, str]]) -> None:
        self.registry = RedisPresenceRegistry.from_url(url)
        self.reporter = PresenceReporter(self.registry, interval_ms=100)
        self.consumers = consumers
        self.beating = threading.Event()
        self.beating.set()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.wait(0.01):
            if self.beating.is_set():
                for i, (queue, group, consumer) in enumerate(self.consumers):
                    self.reporter.beat(queue, group, consumer, lease_count=i)

    def crash(self) -> None:
        """Stop beating (the broker hangs or dies): nothing of it is written any more."""
        self.beating.clear()

    def close(self) -> None:
        self.done.set()
        self.thread.join(10)
        if self.beating.is_set():
            self.reporter.close()
        self.registry.close()

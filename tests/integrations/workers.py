"""Real worker processes for the integration tests, and polling with a deadline.

A `WorkerProcess` runs a framework's own command line (``celery worker``, ``dramatiq``,
``faststream run``) in a session of its own, with its output in a log file. `kill`
(SIGKILL to the main process: a crash) and `terminate` (SIGTERM: a warm shutdown) act
on the main process only, as an orchestrator would; `stop` ends the whole process group
(pool children included) and is always called by the fixtures.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import pytest
import redis

from redis_presence import ConsumerPresence, RedisPresenceRegistry

APPS = Path(__file__).resolve().parent / "apps"
ROOT = Path(__file__).resolve().parents[2]
REQUIRE_BROKERS_ENV = "REDIS_PRESENCE_REQUIRE_BROKERS"
"""Set to 1 by ``.ci/run``: a missing RabbitMQ or NATS fails the tests instead of skipping."""

T = TypeVar("T")


def wait_for(
    check: Callable[[], T | None],
    *,
    timeout: float = 30.0,
    what: str,
    alive: Callable[[], None] | None = None,
    seen: Callable[[], object] | None = None,
) -> T:
    """Call `check` until it returns something other than None/False; fail after `timeout` s
    (saying what `seen` returns then, if given)."""
    deadline = time.monotonic() + timeout
    pause = 0.01
    while True:
        if alive is not None:
            alive()
        value = check()
        if value is not None and value is not False:
            return value
        if time.monotonic() >= deadline:
            last = f"; last seen: {seen()!r}" if seen is not None else ""
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}{last}")
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def require_broker(name: str, reachable: bool, how: str) -> None:
    """Skip (locally) or fail (with REDIS_PRESENCE_REQUIRE_BROKERS=1) when a broker is absent."""
    if reachable:
        return
    message = f"{name} is not reachable ({how})"
    if os.environ.get(REQUIRE_BROKERS_ENV) == "1":
        pytest.fail(f"{message}, and {REQUIRE_BROKERS_ENV}=1 forbids skipping", pytrace=False)
    pytest.skip(message)


class WorkerProcess:
    """One framework worker process, started in `cwd` with `env` added to ours."""

    def __init__(self, argv: Sequence[str], *, env: Mapping[str, str], log: Path) -> None:
        self.argv = list(argv)
        self.log = log
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(APPS), str(ROOT)]),
            "PYTHONUNBUFFERED": "1",
            **env,
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=APPS,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def check_alive(self) -> None:
        """Fail the test, with the log tail, if the worker exited."""
        assert self.proc is not None
        code = self.proc.poll()
        if code is not None:
            pytest.fail(f"worker {self.argv[:3]} exited with {code}:\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL the main process (a crash: no shutdown hook runs) and reap it."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def send_sigterm(self) -> None:
        """SIGTERM the main process: a warm shutdown begins."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout: float = 30.0) -> int:
        """Wait for the main process to exit; its exit code."""
        assert self.proc is not None
        return self.proc.wait(timeout)

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM the main process (a warm shutdown); wait for it; its exit code."""
        self.send_sigterm()
        return self.wait(timeout)

    def stop(self) -> None:
        """End the whole process group (pool children too); idempotent."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> WorkerProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


@contextlib.contextmanager
def started_workers(
    specs: Mapping[str, tuple[Sequence[str], Mapping[str, str]]], *, logs: Path
) -> Iterator[dict[str, WorkerProcess]]:
    """Start one worker per name, ``{name: (argv, env)}``, all at once (start-up dominates
    their cost); stop them all at the end."""
    started: dict[str, WorkerProcess] = {}
    try:
        for name, (argv, env) in specs.items():
            started[name] = WorkerProcess(argv, env=env, log=logs / f"{name}.log").start()
        yield started
    finally:
        for worker in started.values():
            worker.stop()


def worker_env(broker_url: str, presence_url: str, prefix: str, interval_ms: int) -> dict[str, str]:
    """The environment the test apps read their configuration from."""
    return {
        "RP_BROKER_URL": broker_url,
        "RP_PRESENCE_URL": presence_url,
        "RP_PREFIX": prefix,
        "RP_INTERVAL_MS": str(interval_ms),
    }


def python_tool(name: str) -> str:
    """The console script `name` of this interpreter's environment."""
    return str(Path(sys.executable).with_name(name))


class Presence:
    """What the tests read: the rows under one prefix, through a real registry."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.client = client
        self.registry = RedisPresenceRegistry(client, prefix=prefix)

    def rows(
        self, *, consumer: str | None = None, ttl_ms: int = 30_000, now_ns: int | None = None
    ) -> list[ConsumerPresence]:
        rows = self.registry.snapshot(now_ns=now_ns, ttl_ms=ttl_ms)
        return [row for row in rows if consumer is None or row.consumer == consumer]

    def row(self, queue: str, consumer: str, **kwargs: int) -> ConsumerPresence | None:
        found = [r for r in self.rows(consumer=consumer, **kwargs) if r.queue == queue]
        return found[0] if found else None

    def server_now_ns(self) -> int:
        seconds, micros = self.client.time()
        return (int(seconds) * 1_000_000 + int(micros)) * 1_000


def check_dies_on_time(
    presence: Presence,
    consumer: str,
    queues: set[str],
    *,
    killed_at_ns: int,
    interval_ms: int,
    ttl_ms: int,
) -> None:
    """After a SIGKILL at `killed_at_ns` (server clock): the consumer's rows stay, it had
    beaten until it died, it turns stale exactly one TTL after its last beat and expired
    exactly two TTLs after (checked to the millisecond with `now_ns`), and on the server's
    own clock it reaches stale, then expired, and nothing writes its rows any more."""
    rows = presence.rows(consumer=consumer, ttl_ms=ttl_ms)
    assert {row.queue for row in rows} == queues, rows
    # A beat is at most one interval old when it is flushed, and flushes come once per
    # interval; a loaded 2-core machine gets a second of slack on top.
    budget_ns = (2 * interval_ms + 1_000) * 1_000_000
    for row in rows:
        assert killed_at_ns - row.last_heartbeat_ns <= budget_ns, (row, killed_at_ns)
        hb = row.last_heartbeat_ns

        def state_at(ms: int, hb: int = hb, queue: str = row.queue) -> str:
            found = presence.row(queue, consumer, ttl_ms=ttl_ms, now_ns=hb + ms * 1_000_000)
            assert found is not None
            return found.state.value

        assert state_at(ttl_ms) == "active"
        assert state_at(ttl_ms + 1) == "stale"
        assert state_at(2 * ttl_ms) == "stale"
        assert state_at(2 * ttl_ms + 1) == "expired"

    def all_in(state: str) -> bool:
        now = presence.rows(consumer=consumer, ttl_ms=ttl_ms)
        return bool(now) and all(row.state.value == state for row in now)

    wait_for(
        lambda: all_in("stale") or all_in("expired"),
        timeout=3 * ttl_ms / 1000 + 10,
        what=f"{consumer} to go stale",
    )
    wait_for(
        lambda: all_in("expired"), timeout=3 * ttl_ms / 1000 + 10, what=f"{consumer} to expire"
    )
    after = {row.queue: row.last_heartbeat_ns for row in presence.rows(consumer=consumer)}
    assert after == {row.queue: row.last_heartbeat_ns for row in rows}

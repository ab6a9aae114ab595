"""Real worker processes for the integration tests.

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
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest
import redis
from processes import ManagedProcess
from waiting import wait_until

from redis_presence import ConsumerPresence, RedisPresenceRegistry

APPS = Path(__file__).resolve().parent / "apps"
ROOT = Path(__file__).resolve().parents[2]
REQUIRE_BROKERS_ENV = "REDIS_PRESENCE_REQUIRE_BROKERS"
"""Set to 1 by ``.ci/run``: a missing RabbitMQ or NATS fails the tests instead of skipping."""


def require_broker(name: str, reachable: bool, how: str) -> None:
    """Skip (locally) or fail (with REDIS_PRESENCE_REQUIRE_BROKERS=1) when a broker is absent."""
    if reachable:
        return
    message = f"{name} is not reachable ({how})"
    if os.environ.get(REQUIRE_BROKERS_ENV) == "1":
        pytest.fail(f"{message}, and {REQUIRE_BROKERS_ENV}=1 forbids skipping", pytrace=False)
    pytest.skip(message)


class WorkerProcess(ManagedProcess):
    """One framework worker process, started in the test apps' folder with `env` added to
    ours; `stop` SIGKILLs its whole session at once."""

    stop_timeout_s = 10.0

    def __init__(self, argv: Sequence[str], *, env: Mapping[str, str], log: Path) -> None:
        super().__init__(
            argv,
            name=f"worker {list(argv)[:3]}",
            log=log,
            env={
                **os.environ,
                "PYTHONPATH": os.pathsep.join([str(APPS), str(ROOT)]),
                "PYTHONUNBUFFERED": "1",
                **env,
            },
            cwd=APPS,
            own_session=True,
        )

    def _ask_to_stop(self) -> None:
        self._signal_all(signal.SIGKILL)

    def send_sigterm(self) -> None:
        """SIGTERM the main process: a warm shutdown begins."""
        self.send_signal(signal.SIGTERM)


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

    wait_until(
        lambda: all_in("stale") or all_in("expired"),
        timeout_s=3 * ttl_ms / 1000 + 10,
        what=f"{consumer} to go stale",
    )
    wait_until(
        lambda: all_in("expired"), timeout_s=3 * ttl_ms / 1000 + 10, what=f"{consumer} to expire"
    )
    after = {row.queue: row.last_heartbeat_ns for row in presence.rows(consumer=consumer)}
    assert after == {row.queue: row.last_heartbeat_ns for row in rows}

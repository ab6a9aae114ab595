"""Real worker processes for the integration tests.

A `WorkerProcess` runs a framework's own command line (``celery worker``, ``dramatiq``,
``faststream run``) in a session of its own, with its output in a log file. `kill`
(SIGKILL to the main process: a crash) and `terminate` (SIGTERM: a warm shutdown) act
on the main process only, as an orchestrator would; `stop` ends the whole process group
(pool children included) and is always called by the fixtures. What the tests check of
the workers' rows is `lifecycle`'s.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest
from processes import ManagedProcess
from waiting import wait_until

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

    def wait_logged(self, text: str, *, what: str, timeout_s: float = 20.0) -> None:
        """Wait until `text` shows in the worker's log (the framework says what it does)."""
        wait_until(
            lambda: text in self.log.read_text(errors="replace"),
            timeout_s=timeout_s,
            what=what,
            seen=self.log_tail,
        )


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

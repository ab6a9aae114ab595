"""Real `redis-presence serve` processes (and demo brokers) for the web tests.

`ServeProcess` runs the CLI as a child process with ``--port 0``, reads the address it
prints, polls ``/healthz`` with a deadline, and stops it with SIGTERM (SIGKILL as a last
resort). Its stderr (startup line, access log, warnings) is kept for assertions.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from binaries import REQUIRE_SERVERS_ENV, require_servers
from processes import ManagedProcess
from waiting import wait_until

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 30.0
SERVING = re.compile(r"serving (http://\S+)")


def cli_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "redis_presence.cli", *args]


class ServeProcess(ManagedProcess):
    """`redis-presence [global options] serve --port 0 [serve options]` as a child: ready
    once it printed the address it serves and ``/healthz`` answers there."""

    start_timeout_s = START_TIMEOUT_S

    def __init__(
        self,
        url: str,
        *,
        global_options: Sequence[str] = (),
        serve_options: Sequence[str] = (),
        env: dict[str, str] | None = None,
        token: str | None = None,
    ) -> None:
        super().__init__(
            cli_argv("--url", url, *global_options, "serve", "--port", "0", *serve_options),
            name="serve",
            env={**os.environ, **(env or {})},
            cwd=ROOT,
            discard_stdout=True,
        )
        self.token = token
        self.base_url = ""

    def ready(self) -> bool:
        """It printed the address it serves (read from complete lines only)."""
        found = SERVING.search("".join(self.lines(stderr=True)))
        if found is not None:
            self.base_url = found.group(1)
        return found is not None

    def wait_ready(self, timeout_s: float) -> None:
        super().wait_ready(timeout_s)
        wait_until(
            self._healthy,
            timeout_s=timeout_s,
            what=f"/healthz at {self.base_url}",
            alive=self.check_alive,
            interval_s=0.02,
            max_interval_s=0.25,
        )

    def _healthy(self) -> bool:
        try:
            return httpx.get(self.base_url + "/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def client(self, **kwargs: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=30, **kwargs)


class Broker(ManagedProcess):
    """A real demo broker process (`redis-presence demo-broker`) heartbeating consumers
    `NAME-c1`, `NAME-c2`, ... onto the demo groups (see `broker_consumers`). `stop` closes
    its control input (it deregisters and quits); `kill` is a crash: nothing deregistered."""

    stop_timeout_s = 10.0

    def __init__(self, url: str, name: str, *, consumers: int, ttl_ms: int, offset: int = 0):
        super().__init__(
            cli_argv(
                "--url",
                url,
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
            ),
            name=f"demo broker {name}",
            cwd=ROOT,
            stdin_pipe=True,
        )

    def _ask_to_stop(self) -> None:
        self.close_stdin()  # end of input: the broker deregisters and quits


def need_tool(name: str, package: str) -> str:
    """Path of `name`; skip without it, or fail when CI requires every server."""
    path = shutil.which(name)
    if path is not None:
        return path
    message = f"{name!r} is not on PATH (install Debian's {package} package)"
    if require_servers():
        pytest.fail(f"{message}, and {REQUIRE_SERVERS_ENV}=1 forbids skipping", pytrace=False)
    pytest.skip(message)

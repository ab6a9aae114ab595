"""Real `redis-presence serve` processes (and demo brokers) for the web tests.

`ServeProcess` runs the CLI as a child process with ``--port 0``, reads the address it
prints, polls ``/healthz`` with a deadline, and stops it with SIGTERM (SIGKILL as a last
resort). Its stderr (startup line, access log, warnings) is kept for assertions.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import pytest
from servers import REQUIRE_SERVERS_ENV, require_servers

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 30.0
SERVING = re.compile(r"serving (http://\S+)")


def cli_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "redis_presence.cli", *args]


def poll(check: Callable[[], Any], *, timeout: float, what: str) -> Any:
    """Call `check` until it returns something truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    pause = 0.02
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(pause)
        pause = min(pause * 1.5, 0.25)


class ServeProcess:
    """`redis-presence [global options] serve --port 0 [serve options]` as a child."""

    def __init__(
        self,
        url: str,
        *,
        global_options: Sequence[str] = (),
        serve_options: Sequence[str] = (),
        env: dict[str, str] | None = None,
        token: str | None = None,
    ) -> None:
        self.argv = cli_argv("--url", url, *global_options, "serve", "--port", "0", *serve_options)
        self.env = {**os.environ, **(env or {})}
        self.token = token
        self.base_url = ""
        self.proc: subprocess.Popen[str] | None = None
        self._lines: list[str] = []
        self._reader: threading.Thread | None = None
        self._seen = threading.Condition()

    @property
    def stderr(self) -> str:
        with self._seen:
            return "".join(self._lines)

    def _read(self) -> None:
        assert self.proc is not None
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._seen:
                self._lines.append(line)
                self._seen.notify_all()

    def start(self) -> ServeProcess:
        self.proc = subprocess.Popen(
            self.argv,
            cwd=ROOT,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        found = None
        with self._seen:
            while found is None and self.proc.poll() is None and time.monotonic() < deadline:
                found = SERVING.search("".join(self._lines))
                if found is None:
                    self._seen.wait(0.1)
        if found is None:
            self.stop()
            raise AssertionError(f"serve did not start:\n{self.stderr}")
        self.base_url = found.group(1)
        poll(self._healthy, timeout=START_TIMEOUT_S, what="/healthz")
        return self

    def _healthy(self) -> bool:
        try:
            return httpx.get(self.base_url + "/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def client(self, **kwargs: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=30, **kwargs)

    def stop(self, timeout: float = 15.0) -> int | None:
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._reader is not None:
            self._reader.join(5)
        if proc.stderr is not None:
            proc.stderr.close()
        return proc.returncode

    def __enter__(self) -> ServeProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class Broker:
    """A real demo broker process (`redis-presence demo-broker`) heartbeating consumers
    `NAME-c1`, `NAME-c2`, ... onto the demo groups (see `broker_consumers`)."""

    def __init__(self, url: str, name: str, *, consumers: int, ttl_ms: int, offset: int = 0):
        self.name = name
        self.proc = subprocess.Popen(
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
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    def kill(self) -> None:
        """A crash: SIGKILL, nothing deregistered."""
        self.proc.kill()
        self.proc.wait()
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    def stop(self) -> None:
        assert self.proc.stdin is not None
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()  # end of input: the broker deregisters and quits
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        if not self.proc.stdin.closed:
            self.proc.stdin.close()


def need_tool(name: str, package: str) -> str:
    """Path of `name`; skip without it, or fail when CI requires every server."""
    path = shutil.which(name)
    if path is not None:
        return path
    message = f"{name!r} is not on PATH (install Debian's {package} package)"
    if require_servers():
        pytest.fail(f"{message}, and {REQUIRE_SERVERS_ENV}=1 forbids skipping", pytrace=False)
    pytest.skip(message)

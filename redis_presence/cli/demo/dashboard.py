"""`demo --serve`: the dashboard as a child process (`redis-presence serve` on loopback,
reading the demo's Redis), started after the server and stopped with the brokers."""

from __future__ import annotations

import collections
import os
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field

from ..embedded import LocalRedis, die_with_parent, stop_process
from ..errors import CliError
from .broker import _package_root, cli_argv

HOST = "127.0.0.1"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
SERVING = re.compile(r"serving (http://\S+)")
_NOT_PASSED_ON = (
    "REDIS_PRESENCE_URL",
    "REDIS_URL",
    "REDIS_PRESENCE_PREFIX",
    "REDIS_PRESENCE_TTL_MS",  # the dashboard reads the TTL the demo stores
    "REDIS_PRESENCE_HOST",
    "REDIS_PRESENCE_PORT",
)


@dataclass
class Dashboard:
    """The running `serve` child: where it listens, and the tail of its log."""

    url: str
    process: subprocess.Popen[str]
    tail: collections.deque[str] = field(repr=False)
    reader: threading.Thread = field(repr=False)

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> int:
        """SIGTERM (open event streams close, exit status 0), SIGKILL after a grace period;
        returns the exit status."""
        process = self.process
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.reader.join(timeout=5)  # its stderr reaches EOF with the process
        stop_process(process, timeout_s=0)  # closes the pipes
        return process.returncode


def serve_argv(url: str, prefix: str, port: int) -> list[str]:
    """The dashboard's command line: this Python, `serve` on loopback, a quiet log."""
    return cli_argv(
        url, prefix, "serve", "--host", HOST, "--port", str(port), "--log-level", "warning"
    )


def start_dashboard(server: LocalRedis, prefix: str, port: int) -> Dashboard:
    """Start `redis-presence serve` on `port` (0: a free one) and wait for the address it
    prints; `CliError` with its last words if it does not start."""
    env = {k: v for k, v in os.environ.items() if k not in _NOT_PASSED_ON}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_package_root(), env.get("PYTHONPATH")) if p)
    process = subprocess.Popen(
        serve_argv(server.url, prefix, port),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # Ctrl-C reaches the demo only; it stops us in order
        preexec_fn=die_with_parent(),  # noqa: PLW1509 (SIGTERM if the demo dies uncleanly)
    )
    tail: collections.deque[str] = collections.deque(maxlen=20)
    found: list[str] = []
    seen = threading.Condition()

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:  # drained to the end: a full pipe would stall it
            with seen:
                tail.append(line.rstrip("\n"))
                if not found and (match := SERVING.search(line)):
                    found.append(match.group(1))
                seen.notify_all()
        with seen:
            seen.notify_all()

    reader = threading.Thread(target=read, name="demo-dashboard-log", daemon=True)
    reader.start()
    dashboard = Dashboard("", process, tail, reader)
    deadline = time.monotonic() + START_TIMEOUT_S
    with seen:
        while not found and reader.is_alive() and time.monotonic() < deadline:
            seen.wait(0.1)
    if not found:
        dashboard.stop()
        last = next((line for line in reversed(tail) if line.strip()), "no output")
        raise CliError(f"the demo's dashboard did not start: {last.removeprefix('Error: ')}")
    dashboard.url = found[0]
    return dashboard

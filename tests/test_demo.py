"""The demo end to end as a real process, its broker, and the local servers it starts."""

from __future__ import annotations

import io
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

import redis_presence
from redis_presence import ConsumerPresenceRegistry
from redis_presence.cli import cli
from redis_presence.cli.demo import DEMO_GROUPS, broker_consumers, run_broker
from redis_presence.cli.embedded import die_with_parent, start_local_redis

REPO = Path(redis_presence.__file__).resolve().parents[1]
CLI = [sys.executable, "-c", "from redis_presence.cli import main; main()"]
PID = re.compile(r"\bpid (\d+)\b")
SHORT = ["--duration", "3", "--ttl-ms", "500", "--brokers", "2", "--consumers", "2"]
CONSUMER_LINE = re.compile(r"^  consumer (\S+) \((\S+)\): (active|stale|expired|left),", re.M)


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    for name in ("REDIS_PRESENCE_URL", "REDIS_URL", "REDIS_PRESENCE_TTL_MS", "FORCE_COLOR"):
        env.pop(name, None)
    return env


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.05)


def alive(pid: int) -> bool:
    """Whether a process with this pid exists and is not a zombie (reads /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def assert_all_gone(pids: set[int]) -> None:
    assert pids, "the demo printed no child pids"
    wait_until(lambda: not any(alive(pid) for pid in pids), 10.0, f"children {pids} to exit")


def run_demo_process(*args: str) -> subprocess.CompletedProcess[str]:
    """`redis-presence demo --no-tui ARGS` to its end, as a real process."""
    return subprocess.run(
        [*CLI, "demo", "--no-tui", *args],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


@contextmanager
def demo_process(*args: str) -> Iterator[tuple[subprocess.Popen[str], list[str]]]:
    """A running `demo --no-tui ARGS` and the stdout lines it printed so far (a thread reads
    them); killed and reaped on the way out if the test left it running."""
    lines: list[str] = []
    with subprocess.Popen(
        [*CLI, "demo", "--no-tui", *args],
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
        reader.start()
        try:
            wait_until(lambda: any("the story begins" in ln for ln in lines), 30, "the story")
            yield proc, lines
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            reader.join(timeout=10)


def states_by_consumer(output: str) -> dict[str, list[str]]:
    """Each consumer's successive states, as the plain output named them."""
    seen: dict[str, list[str]] = {}
    for consumer, _, state in CONSUMER_LINE.findall(output):
        states = seen.setdefault(consumer, [])
        if not states or states[-1] != state:
            states.append(state)
    return seen


def check_story(output: str) -> set[int]:
    """Some consumer went active -> stale -> expired; counts changed; returns child pids."""
    histories = states_by_consumer(output)
    assert any(h[:3] == ["active", "stale", "expired"] for h in histories.values()), histories
    counts = re.findall(r"^  counts: (.*)$", output, re.M)
    assert len(set(counts)) >= 2, counts
    assert "done: every process the demo started has stopped" in output
    return {int(pid) for pid in PID.findall(output)}


@pytest.mark.slow
def test_demo_no_tui_shows_stale_then_expired_and_stops_every_child() -> None:
    proc = run_demo_process("--duration", "8")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert "TTL 2000 ms" in proc.stdout
    pids = check_story(proc.stdout)
    assert len(pids) >= 4  # three brokers, a replacement, and redis-server when on PATH
    assert_all_gone(pids)


@pytest.mark.slow
def test_demo_on_the_embedded_server() -> None:
    pytest.importorskip("fakeredis")
    proc = run_demo_process("--server", "embedded", *SHORT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "embedded fakeredis inside this process" in proc.stdout
    assert_all_gone(check_story(proc.stdout))


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_demo_cleans_up_when_interrupted(signum: int) -> None:
    with demo_process("--duration", "300") as (proc, lines):
        proc.send_signal(signum)
        proc.wait(timeout=30)
        assert proc.stderr is not None
        stderr = proc.stderr.read()
    output = "".join(lines)
    assert proc.returncode == 0, output + stderr
    assert "Traceback" not in stderr
    assert "interrupted: stopping everything" in output
    assert_all_gone({int(pid) for pid in PID.findall(output)})


@pytest.mark.slow
def test_a_sigkilled_demo_leaves_no_server_and_no_broker_behind() -> None:
    """No cleanup code runs: the kernel SIGTERMs the server (PR_SET_PDEATHSIG) and each
    broker quits when its stdin (a pipe from the demo) closes."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux-only")
    pytest.importorskip("servers").need_binary("redis-server")
    with demo_process("--duration", "30") as (proc, lines):
        output = "".join(lines)
        server = re.search(r"started redis-server pid (\d+)", output)
        assert server is not None, output
        brokers = {int(pid) for pid in re.findall(r"started broker-\d+ pid (\d+)", output)}
        assert len(brokers) == 3, output
        pids = {int(server.group(1)), *brokers}
        assert all(alive(pid) for pid in pids)
        proc.kill()
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert "stopped" not in "".join(lines)  # the demo's own cleanup never ran
    assert_all_gone(pids)


def test_demo_command_in_process_with_clicks_runner() -> None:
    """The command's wiring, in this process: a short story, then every child gone.

    REDIS_PRESENCE_READ_ONLY in the environment does not reach the brokers: they write to
    the demo's own server.
    """
    env = {"NO_COLOR": None, "FORCE_COLOR": None, "REDIS_PRESENCE_READ_ONLY": "1"}
    result = CliRunner(env=env).invoke(
        cli, ["demo", "--no-tui", "--duration", "1", "--ttl-ms", "200", "--brokers", "2"]
    )
    assert result.exit_code == 0, result.output
    assert "TTL 200 ms" in result.stdout
    assert re.search(r"consumer broker-1-c1 \(\S+\): active", result.stdout)
    assert_all_gone({int(pid) for pid in PID.findall(result.stdout)})


# ---------------------------------------------------------------- the broker


def test_broker_obeys_its_control_lines_and_deregisters_on_eof() -> None:
    registry = ConsumerPresenceRegistry()
    control = io.StringIO("stop-one\nleave-one\n")  # then EOF: quit
    run_broker(registry, "b", 3, beat_s=0.01, offset=0, control=control, log=lambda _: None)
    # c3 hung (still tracked, never deregistered); c2 left; c1 deregistered at exit.
    assert [row.consumer for row in registry.snapshot()] == ["b-c3"]


def test_broker_consumers_are_dealt_over_the_demo_groups() -> None:
    triples = broker_consumers("broker-2", 5, offset=3)
    assert [c for _, _, c in triples] == [f"broker-2-c{i}" for i in range(1, 6)]
    assert [(q, g) for q, g, _ in triples] == [DEMO_GROUPS[(3 + i) % 4] for i in range(5)]
    assert broker_consumers("x", 2) == broker_consumers("x", 2)  # stable without offset


def test_broker_keeps_going_when_redis_is_down() -> None:
    logged: list[str] = []
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    registry = redis_presence.RedisPresenceRegistry.from_url(
        f"redis://127.0.0.1:{port}/0", socket_connect_timeout=1
    )
    with registry:
        control = io.StringIO("")  # EOF at once: one round of beats, then quit
        run_broker(registry, "b", 2, beat_s=0.01, control=control, log=logged.append)
    assert len(logged) == 1
    assert logged[0].startswith("b: heartbeat failed, retrying: cannot reach Redis")


# ---------------------------------------------------------------- local servers


@pytest.mark.parametrize("choice", ["redis-server", "embedded"])
def test_local_redis_starts_answers_and_stops(choice: str) -> None:
    if choice == "redis-server":
        pytest.importorskip("servers").need_binary("redis-server")
    else:
        pytest.importorskip("fakeredis")
    server = start_local_redis(choice)  # type: ignore[arg-type]
    try:
        with redis.Redis.from_url(server.url) as client:
            assert client.ping()
            script = client.register_script("return redis.call('TIME')[1]")
            assert int(script()) > 0
        assert (server.pid is None) is (choice == "embedded")
        pid = server.pid
    finally:
        server.stop()
    server.stop()  # idempotent
    if pid is not None:
        assert not alive(pid)
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", server.port)) != 0


@pytest.mark.parametrize("platform", ["darwin", "win32", "freebsd14"])
def test_parent_death_signal_is_linux_only(monkeypatch: pytest.MonkeyPatch, platform: str) -> None:
    """Elsewhere the server starts without a `preexec_fn` (and the demo's own cleanup)."""
    monkeypatch.setattr(sys, "platform", platform)
    assert die_with_parent() is None

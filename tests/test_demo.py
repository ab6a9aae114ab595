"""The demo end to end as a real process, its broker, and the local servers it starts."""

from __future__ import annotations

import io
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner
from processes import ManagedProcess
from servers import MakeRedisServer
from waiting import wait_until

import redis_presence
from redis_presence import ConsumerPresenceRegistry
from redis_presence.cli import cli
from redis_presence.cli.commands.demo import SERVER_CHOICES
from redis_presence.cli.demo import DEMO_GROUPS, broker_consumers, run_broker
from redis_presence.cli.embedded import SERVER_CHOICES as EMBEDDED_CHOICES
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


def alive(pid: int) -> bool:
    """Whether a process with this pid exists and is not a zombie (reads /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def assert_all_gone(pids: set[int]) -> None:
    assert pids, "the demo printed no child pids"
    wait_until(
        lambda: not any(alive(pid) for pid in pids), timeout_s=10.0, what=f"children {pids} to exit"
    )


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


class Demo(ManagedProcess):
    """`redis-presence demo --no-tui ARGS` as a real process, ready once the story begins;
    SIGKILLed on the way out if the test left it running."""

    def __init__(self, *args: str) -> None:
        argv = [*CLI, "demo", "--no-tui", *args]
        super().__init__(argv, name="demo", env=cli_env(), separate_stderr=True)

    @property
    def printed(self) -> str:
        """What it printed to stdout so far, in complete lines."""
        return "".join(self.lines())

    def ready(self) -> bool:
        return "the story begins" in self.printed

    def _ask_to_stop(self) -> None:
        self.send_signal(signal.SIGKILL)


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
    with Demo("--duration", "300") as demo:
        demo.send_signal(signum)
        demo.wait(30)
    output, stderr = demo.output, demo.stderr
    assert demo.returncode == 0, output + stderr
    assert "Traceback" not in stderr
    assert "interrupted: stopping everything" in output
    assert_all_gone({int(pid) for pid in PID.findall(output)})


@pytest.mark.slow
def test_a_sigkilled_demo_leaves_no_server_and_no_broker_behind() -> None:
    """No cleanup code runs: the kernel SIGTERMs the server (PR_SET_PDEATHSIG) and each
    broker quits when its stdin (a pipe from the demo) closes."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux-only")
    pytest.importorskip("binaries").need_binary("redis-server")
    with Demo("--duration", "30") as demo:
        output = demo.printed
        server = re.search(r"started redis-server pid (\d+)", output)
        assert server is not None, output
        brokers = {int(pid) for pid in re.findall(r"started broker-\d+ pid (\d+)", output)}
        assert len(brokers) == 3, output
        pids = {int(server.group(1)), *brokers}
        assert all(alive(pid) for pid in pids)
        demo.kill()
    assert demo.returncode == -signal.SIGKILL
    assert "stopped" not in demo.output  # the demo's own cleanup never ran
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
        pytest.importorskip("binaries").need_binary("redis-server")
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


def test_the_demo_offers_every_server_the_launcher_knows() -> None:
    assert SERVER_CHOICES == EMBEDDED_CHOICES


@pytest.mark.parametrize("platform", ["darwin", "win32", "freebsd14"])
def test_parent_death_signal_is_linux_only(monkeypatch: pytest.MonkeyPatch, platform: str) -> None:
    """Elsewhere the server starts without a `preexec_fn` (and the demo's own cleanup)."""
    monkeypatch.setattr(sys, "platform", platform)
    assert die_with_parent() is None


# ---------------------------------------------------------------- issue 18, item 9


STAMP = re.compile(r"^demo: \[\s*(\d+\.\d)s\] (.*)$", re.M)


def events(output: str) -> list[tuple[float, str]]:
    """`(seconds, text)` of every `demo: [ 1.5s] text` line."""
    return [(float(t), text) for t, text in STAMP.findall(output)]


def at(output: str, text: str) -> float:
    return next(t for t, what in events(output) if what.startswith(text))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "env"),
    [(["--ttl-ms", "500"], {}), ([], {"REDIS_PRESENCE_TTL_MS": "500"})],
    ids=["option", "environment"],
)
def test_demo_takes_the_global_ttl(args: list[str], env: dict[str, str]) -> None:
    proc = subprocess.run(
        [*CLI, *args, "demo", "--no-tui", "--brokers", "2", "--consumers", "2"],
        env={**cli_env(), **env},
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "TTL 500 ms" in proc.stdout
    assert_all_gone(check_story(proc.stdout))


def test_demo_refuses_a_ttl_it_cannot_play() -> None:
    for args, env in (
        (["--ttl-ms", "50", "demo"], {}),
        (["demo"], {"REDIS_PRESENCE_TTL_MS": "120000"}),
    ):
        result = CliRunner(env={"REDIS_PRESENCE_TTL_MS": None, **env}).invoke(cli, args)
        assert result.exit_code == 2
        assert result.stderr.startswith("Error: Invalid value for '--ttl-ms': the demo needs")


@pytest.mark.slow
def test_demo_reports_the_crashed_broker_and_ends_after_its_story() -> None:
    """The SIGKILLed broker is not `stopped` later; by default the demo ends one TTL after
    the prune (its last step) instead of idling; every line has one clock."""
    proc = run_demo_process("--ttl-ms", "500")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    crashed = re.search(r"(broker-\d+) pid (\d+) crashes \(SIGKILL\)", out)
    assert crashed is not None, out
    name, pid = crashed.groups()
    assert f"{name} pid {pid} had already exited (killed by SIGKILL)" in out
    assert f"stopped {name} pid" not in out
    prune = at(out, "operator runs prune")
    assert at(out, "stopped broker-1") - prune <= 1.5  # 1 TTL and one refresh, not 10 s
    stamps = [t for t, _ in events(out)]
    assert stamps == sorted(stamps)  # frames and events share the clock


@pytest.mark.slow
def test_demo_of_one_consumer_speaks_in_the_singular() -> None:
    proc = run_demo_process("--ttl-ms", "300", "--brokers", "1", "--consumers", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "the one consumer is heartbeating; the story begins" in proc.stdout
    assert "all 1 consumers" not in proc.stdout
    assert re.search(r"^demo: \[\s*\d+\.\ds\] 1 consumer: 1 active", proc.stdout, re.M)
    assert not re.search(r"\b1 consumers\b", proc.stdout)


@pytest.mark.slow
def test_the_embedded_server_is_stopped_out_loud() -> None:
    pytest.importorskip("fakeredis")
    proc = run_demo_process("--server", "embedded", *SHORT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    port = re.search(
        r"started embedded fakeredis inside this process on (127\.0\.0\.1:\d+)", proc.stdout
    )
    assert port is not None, proc.stdout
    assert f"stopped embedded fakeredis on {port.group(1)}" in proc.stdout


def test_no_embedded_server_gives_one_error_and_no_done_line(tmp_path: Path) -> None:
    stub = tmp_path / "fakeredis"
    stub.mkdir()
    (stub / "__init__.py").write_text("raise ImportError('not installed')\n")
    env = cli_env()
    env["PYTHONPATH"] = os.pathsep.join((str(tmp_path), env["PYTHONPATH"]))
    proc = subprocess.run(
        [*CLI, "demo", "--no-tui", "--server", "embedded"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "done:" not in proc.stdout
    assert proc.stderr == (
        "Error: the embedded server needs fakeredis: install it with `pip install "
        "'redis-presence[embedded]'`, or install redis-server (e.g. `apt-get install "
        "redis-server`) and use --server redis-server\n"
    )


def test_asking_for_a_missing_redis_server_says_how_to_get_one(tmp_path: Path) -> None:
    result = CliRunner(env={"PATH": str(tmp_path)}).invoke(
        cli, ["demo", "--server", "redis-server"]
    )
    assert result.exit_code == 2
    assert result.stderr == (
        "Error: redis-server is not on PATH: install it (e.g. `apt-get install redis-server`), "
        "or use --server embedded (`pip install 'redis-presence[embedded]'`)\n"
    )
    assert "done:" not in result.stdout


def on_terminal(args: list[str], columns: int = 110, rows: int = 40) -> str:
    """`redis-presence ARGS` on a pseudo-terminal until it exits; the output, escapes gone."""
    from test_cli_terminal import on_terminal as run

    return run(args, columns, rows=rows, timeout_s=90)


@pytest.mark.slow
def test_the_live_demo_logs_each_event_once_on_the_same_clock_as_its_title() -> None:
    """Events print once, above the live table (not again at exit); the title's clock is the
    events' clock, so the last refresh is not older than the last step (the prune)."""
    args = ["--ttl-ms", "500", "demo", "--brokers", "2", "--consumers", "2", "--duration", "2"]
    out = on_terminal(args)
    for text in ("operator runs prune", "crashes (SIGKILL)", "the story begins"):
        assert sum(text in line for line in out.splitlines()) == 1, (text, out)
    titles = [float(t) for t in re.findall(r"demo\s+(\d+\.\d)s \(ends at", out)]
    assert titles, out
    assert titles == sorted(titles)
    assert titles[-1] >= at(out, "operator runs prune")
    assert "done: every process the demo started has stopped" in out


# ---------------------------------------------------------------- issue 18, item 15


def test_the_broker_logs_its_start_and_stop() -> None:
    registry = ConsumerPresenceRegistry()
    lines: list[str] = []
    run_broker(
        registry,
        "b",
        2,
        beat_s=0.01,
        offset=0,
        control=io.StringIO(""),
        log=lines.append,
        lifecycle=lines.append,
        where="somewhere",
    )
    assert lines == [
        "b: started, serving 2 consumers: b-c1 (orders/billing), b-c2 (orders/shipping); somewhere",
        "b: stopped (told to quit, or its control input closed); deregistered 2 of 2 consumers",
    ]


def test_demo_broker_logs_start_outage_and_stop(make_redis_server: MakeRedisServer) -> None:
    """What `docker compose logs broker-a` shows: one line each."""
    server = make_redis_server()
    argv = [*CLI, "--url", server.url, "--ttl-ms", "500", "demo-broker", "--name", "b"]
    argv += ["--consumers", "2", "--offset", "0"]
    with ManagedProcess(argv, name="demo-broker", env=cli_env(), discard_stdout=True) as broker:
        wait_until(lambda: len(broker.lines()) >= 1, timeout_s=30, what="the start line")
        server.kill()
        wait_until(lambda: len(broker.lines()) >= 2, timeout_s=30, what="the outage line")
        server.restart()
        wait_until(lambda: len(broker.lines()) >= 3, timeout_s=30, what="the recovery line")
        broker.send_signal(signal.SIGTERM)
        assert broker.wait(30) == 0
    lines = broker.lines()
    assert lines[0] == (
        "b: started, serving 2 consumers: b-c1 (orders/billing), b-c2 (orders/shipping); "
        f"prefix 'presence' at {server.url}, TTL 500 ms (--ttl-ms), a read every 0.1s\n"
    )
    assert lines[1].startswith("b: heartbeat failed, retrying: cannot reach Redis")
    assert lines[2] == "b: Redis is back\n"
    assert lines[3] == "b: stopped by a signal (SIGTERM or Ctrl-C); deregistered 2 of 2 consumers\n"
    assert len(lines) == 4, lines

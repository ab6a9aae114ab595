"""Issue 18: failures an operator meets, each one line with a cause and a way out.

Item 3 (output that cannot be written, closed pipes), 4 (timeouts), 5 (auth), 6 (the README's
ACL roles on a non-zero database, the janitor's `prune --dry-run`) and 12 (`watch` riding out
an outage). Real `redis-server` processes where Redis is involved; real processes where the
terminal, a pipe or /dev/full is.
"""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_invoke import (
    CLEAN_ENV,
    DEFAULT_TTL_NOTE,
    NOW,
    Backend,
    Scripted,
    backend,
    invoke,
    one_error_line,
    seed,
)
from servers import MakeRedisServer, RedisServer
from test_cli_watch_truth import Watch
from test_security import (
    ACL_BROKER,
    ACL_JANITOR,
    ACL_READER,
    ACL_STRICT_READER,
    BROKER_PASSWORD,
    BROKER_USER,
    JANITOR_PASSWORD,
    JANITOR_USER,
    READER_PASSWORD,
    READER_USER,
)
from tls_files import TlsFiles
from waiting import wait_until

import redis_presence
from redis_presence import PresenceAuthError, PresenceConnectionError, RedisPresenceRegistry
from redis_presence.cli import app as cli_app
from redis_presence.contract import PresenceRegistry

__all__ = ["backend"]  # the fixture, used by name below

REPO = Path(redis_presence.__file__).resolve().parents[1]
CLI = [sys.executable, "-c", "from redis_presence.cli import main; main()"]
S = 1_000_000_000


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CLEAN_ENV}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return {**env, **extra}


# ---------------------------------------------------------------- item 3: the way out


@pytest.mark.parametrize(
    "args",
    [["ls"], ["counts", "--format", "json"], ["watch", "--iterations", "2", "--interval", "0.05"]],
    ids=" ".join,
)
def test_output_to_a_full_disk_is_one_line(redis_url: str, args: list[str]) -> None:
    with RedisPresenceRegistry.from_url(redis_url) as registry:
        registry.heartbeat("orders", "billing", "w1")
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [*CLI, *args],
            stdout=full,
            stderr=subprocess.PIPE,
            env=cli_env(REDIS_PRESENCE_URL=redis_url),
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 1
    assert done.stderr == "Error: cannot write the output: No space left on device\n"


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["ls", "--help"]], ids=" ".join)
def test_help_to_a_full_disk_is_one_line(args: list[str]) -> None:
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [*CLI, *args],
            stdout=full,
            stderr=subprocess.PIPE,
            env=cli_env(),
            text=True,
            check=False,
        )
    assert done.returncode == 1
    assert done.stderr == "Error: cannot write the output: No space left on device\n"


@pytest.mark.parametrize(
    "args", [["ls"], ["watch", "--interval", "0.05"], ["ls", "--format", "csv"]], ids=" ".join
)
def test_a_closed_pipe_ends_every_command_quietly_with_0(redis_url: str, args: list[str]) -> None:
    """`ls | head -1` and `watch | head -1` agree: no message, exit code 0."""
    with RedisPresenceRegistry.from_url(redis_url) as registry:
        beats = [("orders", "billing", f"worker-{i:05}", 0) for i in range(5000)]
        registry.heartbeat_many(beats)
    with subprocess.Popen(
        [*CLI, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(REDIS_PRESENCE_URL=redis_url),
    ) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        assert proc.stdout.readline()  # `head -1`: one line, then the pipe closes
        proc.stdout.close()
        assert proc.wait(timeout=60) == 0
        # No error; at most the note of where the TTL came from, if the rows all fit in
        # the pipe before it closed.
        assert proc.stderr.read() in (b"", b"redis-presence: " + DEFAULT_TTL_NOTE.encode() + b"\n")


# ---------------------------------------------------------------- item 4: timeouts


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A port that accepts connections and never answers (a hung or paused server)."""
    listener = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        listener.close()


def test_a_server_that_never_answers_times_out_with_a_cause(silent_server: int) -> None:
    started = time.monotonic()
    result = invoke(
        ["--timeout", "0.3", "--url", f"redis://:pw-1@127.0.0.1:{silent_server}/0", "ls"]
    )
    line = one_error_line(result)
    assert result.exit_code == 3
    assert time.monotonic() - started < 10  # not redis-py's 30 s
    assert line.startswith(f"Error: cannot reach Redis at redis://:***@127.0.0.1:{silent_server}/0")
    assert "connected, but no reply within 0.3 s (--timeout)" in line
    assert "is it a Redis server" in line
    assert "pw-1" not in result.output


def test_tls_to_a_plain_port_says_tls_is_the_likely_cause(silent_server: int) -> None:
    result = invoke(["--url", f"rediss://127.0.0.1:{silent_server}/0", "ls", "--timeout", "0.3"])
    line = one_error_line(result)
    assert result.exit_code == 3
    assert "the TLS handshake got no answer within 0.3 s (--timeout)" in line
    assert "is this a TLS port?" in line
    assert "use redis:// there" in line


def test_plain_redis_to_a_tls_port_says_use_rediss(
    make_redis_server: MakeRedisServer, tls_files: TlsFiles
) -> None:
    server = make_redis_server(tls=tls_files)
    result = invoke(["--url", f"redis://127.0.0.1:{server.port}/0", "ls"])
    line = one_error_line(result)
    assert result.exit_code == 3
    assert "if this port speaks TLS, use rediss://" in line


@pytest.mark.parametrize(
    ("args", "env", "timeout_s"),
    [
        ([], {}, 5.0),
        (["--timeout", "2"], {}, 2.0),
        ([], {"REDIS_PRESENCE_TIMEOUT": "0.5"}, 0.5),
        (["--timeout", "7"], {"REDIS_PRESENCE_TIMEOUT": "0.5"}, 7.0),
    ],
)
def test_the_timeout_reaches_the_connection(
    monkeypatch: pytest.MonkeyPatch, args: list[str], env: dict[str, str], timeout_s: float
) -> None:
    opened: list[RedisPresenceRegistry] = []
    real = cli_app.open_redis_registry

    def spy(url: str, prefix: str, read_only: bool, timeout: float) -> PresenceRegistry:
        registry = real(url, prefix, read_only, timeout)
        assert isinstance(registry, RedisPresenceRegistry)
        opened.append(registry)
        return registry

    monkeypatch.setattr(cli_app, "open_redis_registry", spy)
    invoke([*args, "--url", "redis://127.0.0.1:1/0", "ls"], env=env)
    [registry] = opened
    kwargs: dict[str, Any] = registry.client.connection_pool.connection_kwargs
    assert kwargs["socket_timeout"] == kwargs["socket_connect_timeout"] == timeout_s


def test_a_bad_timeout_is_a_usage_error() -> None:
    for value in ("0", "-1", "soon"):
        result = invoke(["--timeout", value, "ls"])
        assert "--timeout" in one_error_line(result)
        assert result.exit_code == 2


# ---------------------------------------------------------------- item 5: auth


def test_each_refused_login_says_what_to_do(make_redis_server: MakeRedisServer) -> None:
    server = make_redis_server(requirepass="correct-horse")
    base = f"127.0.0.1:{server.port}/0"
    missing = one_error_line(invoke(["--url", f"redis://{base}", "ls"]))
    assert missing == (
        "Error: Redis refused access: it requires a password (NOAUTH); pass the user name and "
        "password in the URL or REDIS_PRESENCE_URL"
    )
    for url in (f"redis://:wrong-battery@{base}", f"redis://default:wrong-battery@{base}"):
        result = invoke(["--url", url, "counts"])
        assert one_error_line(result) == (
            "Error: Redis refused access: wrong user name or password, or the user is disabled "
            "(WRONGPASS); pass the user name and password in the URL or REDIS_PRESENCE_URL"
        )
        assert result.exit_code == 4
    with pytest.raises(PresenceAuthError, match=r"requires a password \(NOAUTH\)"):
        RedisPresenceRegistry.from_url(f"redis://{base}").snapshot()


# ---------------------------------------------------------------- item 6: ACL roles, db 3


@pytest.fixture
def roles_on_db3(make_redis_server: MakeRedisServer) -> RedisServer:
    """A server with the README's broker, reader and janitor, and consumers in database 3."""
    server = make_redis_server()
    with server.client() as admin:
        for line in (ACL_BROKER, ACL_READER, ACL_JANITOR):
            admin.execute_command(*shlex.split(line))
    with RedisPresenceRegistry.from_url(f"redis://127.0.0.1:{server.port}/3") as owner:
        seed(owner)
    return server


def role_url(server: RedisServer, user: str, password: str) -> str:
    return f"redis://{user}:{password}@127.0.0.1:{server.port}/3"


def test_the_readme_roles_work_on_a_non_zero_database(roles_on_db3: RedisServer) -> None:
    server = roles_on_db3
    broker = role_url(server, BROKER_USER, BROKER_PASSWORD)
    reader = role_url(server, READER_USER, READER_PASSWORD)
    janitor = role_url(server, JANITOR_USER, JANITOR_PASSWORD)
    now = ["--now-ns", str(NOW)]
    for url, args in (
        (broker, ["heartbeat", "orders", "billing", "new"]),
        (broker, ["deregister", "orders", "billing", "new"]),
        (reader, ["ls"]),
        (reader, ["counts"]),
        (reader, ["watch", "--iterations", "1"]),
        (janitor, ["prune", "--dry-run"]),
        (janitor, ["prune"]),
    ):
        result = invoke(["--url", url, *now, *args])
        assert result.exit_code == 0, f"{args}: {result.output}"
    with server.client() as admin:
        admin.execute_command(*shlex.split(ACL_STRICT_READER))
    strict = invoke(["--url", reader, "--read-only", *now, "counts"])
    assert strict.exit_code == 0, strict.output
    assert "orders" in strict.stdout


def test_the_janitor_lists_what_it_would_prune(roles_on_db3: RedisServer) -> None:
    janitor = role_url(roles_on_db3, JANITOR_USER, JANITOR_PASSWORD)
    result = invoke(["--url", janitor, "--now-ns", str(NOW), "prune", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert [line.split()[2] for line in result.stdout.splitlines()[1:-1]] == ["gone"]


def test_a_role_without_select_gets_a_hint(roles_on_db3: RedisServer) -> None:
    with roles_on_db3.client() as admin:
        admin.execute_command("ACL", "SETUSER", READER_USER, "-select")
    reader = role_url(roles_on_db3, READER_USER, READER_PASSWORD)
    result = invoke(["--url", reader, "ls"])
    line = one_error_line(result)
    assert result.exit_code == 4
    assert "'select'" in line
    assert "add +select to its role" in line


# ---------------------------------------------------------------- item 12: watch and outages


class Blinking(Scripted):
    """A registry whose reads fail (Redis unreachable) for the read numbers in `down`."""

    def __init__(self, inner: PresenceRegistry, down: set[int]) -> None:
        super().__init__(inner, {})
        self.down = down

    def snapshot(
        self,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        queue: str | None = None,
        group: str | None = None,
        stuck_after_ms: int | None = None,
        with_meta: bool = False,
    ) -> Any:
        if self.reads in self.down:
            self.reads += 1
            raise PresenceConnectionError("cannot reach Redis: Error 111 connecting. Refused.")
        return super().snapshot(
            now_ns,
            ttl_ms,
            queue=queue,
            group=group,
            stuck_after_ms=stuck_after_ms,
            with_meta=with_meta,
        )


def test_watch_rides_out_an_outage_and_carries_on(backend: Backend) -> None:
    seed(backend.registry)
    made: list[Blinking] = []

    def factory(url: str, prefix: str, read_only: bool) -> PresenceRegistry:
        made.append(Blinking(backend.factory(url, prefix, read_only), {1, 2, 3}))
        return made[-1]

    result = backend.at_now("watch", "--interval", "0.05", "--iterations", "6", obj=factory)
    assert result.exit_code == 0, result.output
    assert made[0].reads == 6
    assert result.stdout.count("redis-presence watch") == 3  # reads 0, 4 and 5
    down, back = result.stderr.splitlines()
    assert re.fullmatch(
        r"watch: Redis unreachable since \d\d:\d\d:\d\d: cannot reach Redis: Error 111 "
        r"connecting\. Refused\.; the table is as read at \d\d:\d\d:\d\d; retrying",
        down,
    )
    assert re.fullmatch(
        r"watch: Redis is back after 0s \(unreachable since \d\d:\d\d:\d\d\): reading it again",
        back,
    )


def test_watch_ends_with_the_error_when_its_last_read_fails(backend: Backend) -> None:
    def factory(url: str, prefix: str, read_only: bool) -> PresenceRegistry:
        return Blinking(backend.factory(url, prefix, read_only), {1})

    result = backend.at_now("watch", "--interval", "0.05", "--iterations", "2", obj=factory)
    assert result.exit_code == 3
    assert result.stderr.splitlines() == [
        "Error: cannot reach Redis: Error 111 connecting. Refused."
    ]


def test_watch_does_not_retry_a_refusal(make_redis_server: MakeRedisServer) -> None:
    server = make_redis_server(requirepass="pw")
    result = invoke(["--url", f"redis://127.0.0.1:{server.port}/0", "watch", "--interval", "0.05"])
    assert "NOAUTH" in one_error_line(result)
    assert result.exit_code == 4


@pytest.mark.slow
def test_watch_survives_a_real_redis_restart(make_redis_server: MakeRedisServer) -> None:
    server = make_redis_server()
    with RedisPresenceRegistry.from_url(server.url) as registry:
        registry.heartbeat("orders", "billing", "w1")
    watch = Watch(server.url).start()
    try:
        wait_until(
            lambda: any("w1" in line for line in watch.out), timeout_s=30, what="a first frame"
        )
        server.kill()
        wait_until(
            lambda: any("retrying" in line for line in watch.err),
            timeout_s=30,
            what="the outage line",
        )
        assert watch.poll() is None  # still running
        server.restart()
        with RedisPresenceRegistry.from_url(server.url) as registry:
            registry.heartbeat("orders", "billing", "w2")
        wait_until(
            lambda: any("Redis is back" in line for line in watch.err),
            timeout_s=30,
            what="the recovery",
        )
        wait_until(
            lambda: any("+ joined" in line for line in watch.out), timeout_s=30, what="w2 joining"
        )
    finally:
        code = watch.stop()
    assert code == 0
    errors = watch.err
    assert errors[0].startswith("watch: Redis unreachable since")
    assert errors[1].startswith("watch: Redis is back after")
    assert len(errors) == 2, errors

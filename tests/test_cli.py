"""Every `redis-presence` command through click's runner, on fakeredis and on a real server.

Time is controlled with the hidden global `--now-ns`; rows are written with explicit
`now_ns`, so ages and states are exact.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result
from servers import MakeRedisServer, RedisServer, free_port
from test_security import ACL_STRICT_READER, READER_PASSWORD, READER_USER

import redis_presence
from redis_presence import ConsumerPresence, RedisPresenceRegistry
from redis_presence.cli import cli
from redis_presence.cli.app import RegistryFactory
from redis_presence.cli.errors import CliError, ReadOnlyRefused
from redis_presence.cli.render import CONSUMER_FIELDS
from redis_presence.contract import PresenceRegistry

S = 1_000_000_000
NOW = 1_750_000_000 * S
DEFAULT_TTL_NOTE = "TTL 30000 ms (the default; 'redis-presence ttl set' stores one)"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
COLOUR = re.compile(r"\x1b\[[0-9;]*(3[0-7]|38;|9[0-7])[0-9;]*m")
CLEAN_ENV: dict[str, str | None] = dict.fromkeys(
    (
        "REDIS_PRESENCE_URL",
        "REDIS_URL",
        "REDIS_PRESENCE_PREFIX",
        "REDIS_PRESENCE_TTL_MS",
        "REDIS_PRESENCE_READ_ONLY",
        "NO_COLOR",
        "FORCE_COLOR",
        "COLUMNS",
        "TTY_COMPATIBLE",
        "TTY_INTERACTIVE",
    )
)


def invoke(
    args: Sequence[str], obj: RegistryFactory | None = None, env: dict[str, str] | None = None
) -> Result:
    """Run the CLI; a Python exception escaping it (a traceback) fails the test."""
    result = CliRunner(env={**CLEAN_ENV, **(env or {})}).invoke(cli, list(args), obj=obj)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"traceback from {args}: {result.exception!r}\n{result.output}")
    assert "Traceback" not in result.output
    return result


def one_error_line(result: Result) -> str:
    """The single `Error: ...` line a failing command must print on stderr (and nothing else)."""
    assert result.exit_code != 0
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ")
    return lines[0]


@dataclass
class Backend:
    """A registry to seed and inspect, and how the CLI reaches the same data."""

    name: str
    url: str
    registry: RedisPresenceRegistry
    factory: RegistryFactory
    obj: RegistryFactory | None  # None: the CLI's own default factory opens `url`

    def run(self, *args: str, obj: RegistryFactory | None = None, **kw: Any) -> Result:
        return invoke(["--url", self.url, *args], obj=obj or self.obj, **kw)

    def at_now(self, *args: str, **kw: Any) -> Result:
        return self.run("--now-ns", str(NOW), *args, **kw)


@pytest.fixture(
    params=[
        pytest.param("fakeredis"),
        pytest.param("redis-server", marks=pytest.mark.redis_server),
    ]
)
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "fakeredis":
        client = request.getfixturevalue("fake_client")

        def fake_factory(url: str, prefix: str, read_only: bool) -> PresenceRegistry:
            return RedisPresenceRegistry(client, prefix=prefix, read_only=read_only)

        registry = RedisPresenceRegistry(client)
        yield Backend("fakeredis", "redis://fake.invalid:1/0", registry, fake_factory, fake_factory)
        return
    url = request.getfixturevalue("redis_url")

    def real_factory(url: str, prefix: str, read_only: bool) -> PresenceRegistry:
        return RedisPresenceRegistry.from_url(url, prefix=prefix, read_only=read_only)

    with RedisPresenceRegistry.from_url(url) as registry:
        yield Backend("redis-server", url, registry, real_factory, None)


def seed(registry: RedisPresenceRegistry) -> None:
    """Four consumers at NOW with the default 30 s TTL: two active, one stale, one expired."""
    registry.heartbeat("orders", "billing", "fresh", lease_count=2, now_ns=NOW - 1 * S)
    registry.heartbeat("orders", "billing", "quiet", now_ns=NOW - 45 * S)
    registry.heartbeat("orders", "shipping", "gone", lease_count=7, now_ns=NOW - 300 * S)
    registry.heartbeat("emails", "sender", "mailer", now_ns=NOW - 2 * S)


def snapshot_dicts(registry: RedisPresenceRegistry) -> list[dict[str, object]]:
    return [row.to_dict() for row in registry.snapshot(now_ns=NOW)]


# ---------------------------------------------------------------- ls / snapshot


def test_ls_table(backend: Backend) -> None:
    seed(backend.registry)
    result = backend.at_now("ls")
    assert result.exit_code == 0, result.output
    assert result.stderr == f"redis-presence: {DEFAULT_TTL_NOTE}\n"  # where the TTL came from
    assert "\x1b" not in result.stdout  # not a terminal: no colour
    lines = [line.split() for line in result.stdout.splitlines()]
    assert lines[0][:4] == ["QUEUE", "GROUP", "CONSUMER", "STATE"]
    assert lines[1:] == [
        ["emails", "sender", "mailer", "active", "2s", "ago", "0", "2025-06-15T15:06:38Z"],
        ["orders", "billing", "fresh", "active", "1s", "ago", "2", "2025-06-15T15:06:39Z"],
        ["orders", "billing", "quiet", "stale", "45s", "ago", "0", "2025-06-15T15:05:55Z"],
        ["orders", "shipping", "gone", "expired", "5m", "ago", "7", "2025-06-15T15:01:40Z"],
    ]


def test_ls_json_is_the_snapshot(backend: Backend) -> None:
    seed(backend.registry)
    result = backend.at_now("ls", "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data == snapshot_dicts(backend.registry)
    assert all(list(item) == list(CONSUMER_FIELDS) for item in data)
    assert [item["state"] for item in data] == ["active", "active", "stale", "expired"]


def test_ls_csv(backend: Backend) -> None:
    seed(backend.registry)
    result = backend.at_now("ls", "--format", "csv")
    assert result.exit_code == 0, result.output
    records = list(csv.DictReader(io.StringIO(result.stdout)))
    expected = [
        {k: str(v) for k, v in row.items()}
        | {"last_progress_ns": "", "stuck": "false", "meta": ""}  # none of these here
        for row in snapshot_dicts(backend.registry)
    ]
    assert records == expected


def test_snapshot_is_an_alias_of_ls(backend: Backend) -> None:
    seed(backend.registry)
    assert backend.at_now("snapshot").stdout == backend.at_now("ls").stdout
    listing = invoke(["--help"]).stdout
    assert re.search(r"^\s+ls\s", listing, re.MULTILINE)
    assert not re.search(r"^\s+snapshot\s", listing, re.MULTILINE)


@pytest.mark.parametrize(
    ("filters", "consumers"),
    [
        (["--queue", "orders"], ["fresh", "quiet", "gone"]),
        (["--group", "billing"], ["fresh", "quiet"]),
        (["--state", "stale", "--state", "expired"], ["quiet", "gone"]),
        (["--queue", "orders", "--state", "ACTIVE"], ["fresh"]),
        (["--queue", "emails", "--group", "billing"], []),
    ],
)
def test_ls_filters(backend: Backend, filters: list[str], consumers: list[str]) -> None:
    seed(backend.registry)
    result = backend.at_now("ls", *filters, "--format", "json")
    assert result.exit_code == 0, result.output
    assert [item["consumer"] for item in json.loads(result.stdout)] == consumers


def test_ls_uses_the_global_ttl(backend: Backend) -> None:
    seed(backend.registry)
    result = backend.at_now("--ttl-ms", "50000", "ls", "--format", "json")
    states = {item["consumer"]: item["state"] for item in json.loads(result.stdout)}
    assert states == {"mailer": "active", "fresh": "active", "quiet": "active", "gone": "expired"}


def test_ls_of_an_empty_registry_names_what_it_read(backend: Backend) -> None:
    """Issue 18 item 13: an empty answer names the prefix and the URL it read."""
    where = f"under prefix 'presence' at {backend.url}"
    assert backend.at_now("ls").stdout == f"(no consumers {where})\n"
    assert backend.at_now("counts").stdout == f"(no groups {where})\n"
    other = backend.at_now("--prefix", "other", "ls", "--queue", "orders", "--state", "stale")
    assert other.stdout == (
        f"(no consumers with queue 'orders', state stale under prefix 'other' at {backend.url})\n"
    )
    assert json.loads(backend.at_now("ls", "--format", "json").stdout) == []
    assert backend.at_now("ls", "--format", "csv").stdout == ",".join(CONSUMER_FIELDS) + "\n"


def test_names_round_trip_exactly(backend: Backend) -> None:
    names = ("q:{x}|*", "g roup\nline", "c*\u00e9\U0001f600")
    result = backend.run("heartbeat", *names)
    assert result.exit_code == 0, result.output
    data = json.loads(backend.run("ls", "--format", "json").stdout)
    assert [(d["queue"], d["group"], d["consumer"]) for d in data] == [names]
    table = backend.run("ls").stdout
    assert "g roup\\nline" in table
    assert len(table.splitlines()) == 2


# ---------------------------------------------------------------- counts


def test_counts_show_tracked_groups_without_active_consumers_as_zero(backend: Backend) -> None:
    seed(backend.registry)
    result = backend.at_now("counts", "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [
        {"queue": "emails", "group": "sender", "active": 1},
        {"queue": "orders", "group": "billing", "active": 1},
        {"queue": "orders", "group": "shipping", "active": 0},
    ]
    table = [line.split() for line in backend.at_now("counts").stdout.splitlines()]
    assert table == [
        ["QUEUE", "GROUP", "ACTIVE"],
        ["emails", "sender", "1"],
        ["orders", "billing", "1"],
        ["orders", "shipping", "0"],
    ]
    records = list(csv.DictReader(io.StringIO(backend.at_now("counts", "--format", "csv").stdout)))
    assert records[2] == {"queue": "orders", "group": "shipping", "active": "0"}


# ---------------------------------------------------------------- prune


def test_prune_dry_run_leaves_data_untouched(backend: Backend) -> None:
    seed(backend.registry)
    before = snapshot_dicts(backend.registry)
    result = backend.at_now("prune", "--dry-run")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line.split()[2] for line in lines[1:-1]] == ["gone"]
    assert lines[-1] == "would prune 1 expired consumer(s)"
    listed = json.loads(backend.at_now("prune", "--dry-run", "--format", "json").stdout)
    assert [item["consumer"] for item in listed] == ["gone"]
    assert snapshot_dicts(backend.registry) == before
    assert len(backend.registry) == 4


def test_prune_removes_exactly_the_expired(backend: Backend) -> None:
    seed(backend.registry)
    result = backend.at_now("prune")
    assert result.exit_code == 0, result.output
    assert result.stdout == "pruned 1 expired consumer(s)\n"
    assert [row.consumer for row in backend.registry.snapshot(now_ns=NOW)] == [
        "mailer",
        "fresh",
        "quiet",
    ]
    assert backend.at_now("prune").stdout == "pruned 0 expired consumer(s)\n"


# ---------------------------------------------------------------- heartbeat / deregister


def test_heartbeat_then_deregister(backend: Backend) -> None:
    result = backend.at_now("heartbeat", "orders", "billing", "w7", "--lease-count", "5")
    assert result.exit_code == 0, result.output
    assert "w7" in result.stdout
    [row] = backend.registry.snapshot(now_ns=NOW)
    assert (row.key, row.lease_count, row.last_heartbeat_ns) == (
        ("orders", "billing", "w7"),
        5,
        NOW,
    )
    first = backend.run("deregister", "orders", "billing", "w7")
    assert first.exit_code == 0
    assert first.stdout.endswith("deregistered\n")
    again = backend.run("deregister", "orders", "billing", "w7")
    assert again.exit_code == 0
    assert again.stdout.endswith("was not tracked\n")
    assert len(backend.registry) == 0


def test_heartbeat_without_now_uses_the_server_clock(backend: Backend) -> None:
    assert backend.run("heartbeat", "orders", "billing", "live").exit_code == 0
    [item] = json.loads(backend.run("ls", "--format", "json").stdout)
    assert item["state"] == "active"
    assert item["last_seen_age_ms"] < 30_000


# ---------------------------------------------------------------- watch


class Scripted:
    """Wraps a registry: runs `hooks[n]` just before the n-th snapshot (0-based)."""

    def __init__(self, inner: PresenceRegistry, hooks: dict[int, Callable[[], None]]) -> None:
        self.inner = inner
        self.hooks = hooks
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def snapshot(
        self,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        queue: str | None = None,
        group: str | None = None,
        stuck_after_ms: int | None = None,
        with_meta: bool = False,
    ) -> list[ConsumerPresence]:
        hook = self.hooks.get(self.reads)
        self.reads += 1
        if hook is not None:
            hook()
        return self.inner.snapshot(
            now_ns=now_ns,
            ttl_ms=ttl_ms,
            queue=queue,
            group=group,
            stuck_after_ms=stuck_after_ms,
            with_meta=with_meta,
        )


def test_watch_marks_what_changed_between_refreshes(backend: Backend) -> None:
    seed(backend.registry)
    reg = backend.registry

    def second() -> None:
        reg.heartbeat("orders", "billing", "newbie", now_ns=NOW)
        reg.heartbeat("orders", "billing", "fresh", now_ns=NOW - 40 * S)  # now stale
        reg.deregister("emails", "sender", "mailer")

    def third() -> None:
        reg.heartbeat("orders", "billing", "quiet", now_ns=NOW)  # active again
        reg.heartbeat("orders", "billing", "fresh", now_ns=NOW - 61 * S)  # expired

    scripted: list[Scripted] = []

    def factory(url: str, prefix: str, read_only: bool) -> PresenceRegistry:
        scripted.append(Scripted(backend.factory(url, prefix, read_only), {1: second, 2: third}))
        return scripted[-1]

    result = backend.at_now("watch", "--interval", "0.05", "--iterations", "3", obj=factory)
    assert result.exit_code == 0, result.output
    assert scripted[0].reads == 3  # one snapshot per refresh, nothing else
    frames = result.stdout.split("redis-presence watch")[1:]
    assert len(frames) == 3

    def marked(frame: str) -> dict[str, str]:
        out = {}
        for line in frame.splitlines()[2:]:
            for marker in ("+ joined", "! went stale", "x expired", "- left", "^ active again"):
                if line.endswith(marker):
                    out[line.split()[2]] = marker
        return out

    assert marked(frames[0]) == {}
    assert marked(frames[1]) == {
        "newbie": "+ joined",
        "fresh": "! went stale",
        "mailer": "- left",
    }
    assert marked(frames[2]) == {"quiet": "^ active again", "fresh": "x expired"}
    assert (
        "counts: orders/billing 2 active, 1 expired; orders/shipping 0 active, 1 expired"
        in (frames[2])
    )


def test_watch_exits_zero_on_ctrl_c(backend: Backend) -> None:
    def interrupt() -> None:
        raise KeyboardInterrupt

    def factory(url: str, prefix: str, read_only: bool) -> PresenceRegistry:
        return Scripted(backend.factory(url, prefix, read_only), {1: interrupt})

    result = backend.at_now("watch", "--interval", "0.05", obj=factory)
    assert result.exit_code == 0
    assert result.stdout.count("redis-presence watch") == 1


# ---------------------------------------------------------------- failures: one line each


COMMANDS = [
    ["ls"],
    ["snapshot", "--format", "json"],
    ["counts"],
    ["watch", "--iterations", "1"],
    ["prune"],
    ["prune", "--dry-run"],
    ["heartbeat", "q", "g", "c"],
    ["deregister", "q", "g", "c"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_unreachable_redis_is_one_line_and_exit_3(args: list[str]) -> None:
    port = free_port()  # nothing listens there
    result = invoke(["--url", f"redis://:pw-secret@127.0.0.1:{port}/0", *args])
    line = one_error_line(result)
    assert result.exit_code == 3
    assert "cannot reach Redis" in line
    assert str(port) in line
    assert "pw-secret" not in result.output


def test_unreachable_unix_socket(tmp_path: Path) -> None:
    result = invoke(["--url", f"unix://{tmp_path}/nothing.sock", "ls"])
    assert "cannot reach Redis" in one_error_line(result)
    assert result.exit_code == 3


def test_a_real_process_prints_one_line_and_no_traceback() -> None:
    port = free_port()
    proc = subprocess.run(
        [sys.executable, "-c", "from redis_presence.cli import main; main()", "ls"],
        env={
            **{k: v for k, v in os.environ.items() if k != "REDIS_PRESENCE_URL"},
            "REDIS_URL": f"redis://user:hunter2@127.0.0.1:{port}/0",
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 3
    assert proc.stdout == ""
    assert proc.stderr.startswith("Error: cannot reach Redis")
    assert proc.stderr.count("\n") == 1
    assert "hunter2" not in proc.stderr


@pytest.mark.parametrize("args", COMMANDS[:3], ids=" ".join)
def test_wrong_password_is_one_line_and_exit_4(
    make_redis_server: MakeRedisServer, args: list[str]
) -> None:
    server = make_redis_server(requirepass="correct-horse")
    for url in (
        f"redis://:wrong-battery@127.0.0.1:{server.port}/0",
        f"redis://default:wrong-battery@127.0.0.1:{server.port}/0",
        f"redis://127.0.0.1:{server.port}/0",  # no password at all
    ):
        result = invoke(["--url", url, *args])
        line = one_error_line(result)
        assert result.exit_code == 4, line
        assert "refused" in line
        assert "wrong-battery" not in result.output
    good = invoke(["--url", server.url, *args])
    assert good.exit_code == 0, good.output
    assert "correct-horse" not in good.output


@pytest.mark.parametrize(
    "url",
    [
        "foo://localhost",
        "localhost:6379",
        "",
        "redis://:pw-secret@127.0.0.1:99999999/0",
        "redis://:pw-secret@[::1/0",
        "redis://user:pw%2Fsecret@127.0.0.1:notaport/0",
    ],
)
def test_bad_urls_are_one_line_and_exit_2(url: str) -> None:
    result = invoke(["--url", url, "ls"])
    line = one_error_line(result)
    assert result.exit_code == 2
    assert "URL" in line
    assert "pw-secret" not in line
    assert "pw/secret" not in line
    assert "pw%2Fsecret" not in line


@pytest.mark.parametrize(
    "args",
    [
        ["--ttl-ms", "0", "ls"],
        ["--ttl-ms", "-5", "ls"],
        ["--ttl-ms", "soon", "ls"],
        ["--bogus", "ls"],
        ["nosuchcommand"],
        ["ls", "--state", "sleeping"],
        ["ls", "--format", "xml"],
        ["counts", "--format", "yaml"],
        ["watch", "--interval", "0"],
        ["heartbeat", "q", "g"],
        ["heartbeat", "q", "g", "c", "--lease-count", "-1"],
        ["heartbeat", "q", "g", "c", "--lease-count", str(2**32)],
        ["deregister", "q"],
        ["demo", "--brokers", "0"],
        ["demo", "--ttl-ms", "5"],
        ["demo", "--duration", "abc"],
    ],
    ids=" ".join,
)
def test_bad_options_are_one_line_and_exit_2(args: list[str]) -> None:
    def never(url: str, prefix: str, read_only: bool) -> PresenceRegistry:
        raise AssertionError("no registry may be opened for a usage error")

    result = invoke(args, obj=never)
    one_error_line(result)
    assert result.exit_code == 2


def test_bad_ttl_from_the_environment_is_a_usage_error() -> None:
    result = invoke(["ls"], env={"REDIS_PRESENCE_TTL_MS": "0"})
    assert "--ttl-ms" in one_error_line(result)
    assert result.exit_code == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["heartbeat", "", "g", "c"], "queue must be a non-empty string"),
        (["heartbeat", "q", "g", "x" * 600], "consumer must be at most 512 UTF-8 bytes"),
        (["deregister", "q", "", "c"], "group must be a non-empty string"),
        (["--prefix", "has space", "ls"], "prefix must not contain"),
        (["--prefix", "{tag}", "counts"], "prefix must not contain"),
    ],
)
def test_library_value_errors_are_one_line_and_exit_2(
    backend: Backend, args: list[str], message: str
) -> None:
    result = backend.run(*args)
    assert message in one_error_line(result)
    assert result.exit_code == 2


# ---------------------------------------------------------------- read-only


@pytest.fixture
def replica(make_redis_server: MakeRedisServer) -> RedisServer:
    """A synced replica of a primary that holds `seed`'s four consumers."""
    primary = make_redis_server()
    replica = make_redis_server(replicaof=primary)
    replica.wait_replica_synced()
    with RedisPresenceRegistry.from_url(primary.url) as writer:
        seed(writer)
    primary.wait_for_replicas(1)
    return replica


READS = [
    ["ls", "--format", "json"],
    ["snapshot", "--state", "expired"],
    ["counts", "--format", "csv"],
    ["prune", "--dry-run"],
    ["watch", "--iterations", "1"],
]


def test_read_only_reads_from_a_replica_with_plain_commands(replica: RedisServer) -> None:
    primary = replica.replicaof
    assert primary is not None
    with replica.client() as client:
        client.config_resetstat()
        for args in READS:
            expected = invoke(["--url", primary.url, "--now-ns", str(NOW), *args])
            for how in (["--read-only"], []):
                env = {} if how else {"REDIS_PRESENCE_READ_ONLY": "1"}
                result = invoke(["--url", replica.url, *how, "--now-ns", str(NOW), *args], env=env)
                assert result.exit_code == 0, result.output
                if args[0] != "watch":  # its title carries the wall clock
                    assert result.stdout == expected.stdout, args
        stats = client.info("commandstats")
        assert stats["cmdstat_zrangebylex"]["calls"] > 0
        assert not {"cmdstat_evalsha", "cmdstat_evalsha_ro"} & set(stats)  # reads need no script


@pytest.mark.parametrize(
    "args",
    [
        ["heartbeat", "orders", "billing", "new"],
        ["deregister", "orders", "billing", "fresh"],
        ["prune"],
    ],
    ids=" ".join,
)
def test_writes_to_a_replica_are_one_line_and_exit_6(replica: RedisServer, args: list[str]) -> None:
    """Without --read-only the write reaches the replica, which answers READONLY."""
    result = invoke(["--url", replica.url, "--now-ns", str(NOW + 10**15), *args])
    line = one_error_line(result)
    assert result.exit_code == 6, line
    assert "read-only replica" in line
    with RedisPresenceRegistry.from_url(replica.url, read_only=True) as reader:
        assert len(reader) == 4


@pytest.mark.parametrize(
    "args",
    [
        ["heartbeat", "q", "g", "c"],
        ["heartbeat", "q", "g", "c", "--lease-count", "2"],
        ["deregister", "q", "g", "c"],
        ["prune"],
        ["prune", "--format", "json"],
        ["demo-broker", "--name", "b"],
    ],
    ids=" ".join,
)
@pytest.mark.parametrize("how", ["flag", "env"])
def test_read_only_refuses_writes_before_opening_redis(args: list[str], how: str) -> None:
    def never(url: str, prefix: str, read_only: bool) -> PresenceRegistry:
        raise AssertionError("a refused write may not open a registry")

    flag, env = (
        (["--read-only"], {}) if how == "flag" else ([], {"REDIS_PRESENCE_READ_ONLY": "yes"})
    )
    result = invoke([*flag, *args], obj=never, env=env)
    line = one_error_line(result)
    assert result.exit_code == 6
    assert line == (
        f"Error: {args[0]} writes to Redis, but --read-only (or REDIS_PRESENCE_READ_ONLY) is "
        "set: only ls, counts, watch, events, ttl get and prune --dry-run run read-only"
    )


@pytest.mark.parametrize(
    ("env", "args", "read_only"),
    [
        ({}, [], False),
        ({}, ["--read-only"], True),
        ({"REDIS_PRESENCE_READ_ONLY": "1"}, [], True),
        ({"REDIS_PRESENCE_READ_ONLY": "true"}, [], True),
        ({"REDIS_PRESENCE_READ_ONLY": "0"}, [], False),
        ({"REDIS_PRESENCE_READ_ONLY": ""}, [], False),
        ({"REDIS_PRESENCE_READ_ONLY": "0"}, ["--read-only"], True),
    ],
)
def test_read_only_reaches_the_registry_factory(
    env: dict[str, str], args: list[str], read_only: bool
) -> None:
    seen: list[bool] = []

    def factory(url: str, prefix: str, read_only: bool) -> PresenceRegistry:
        seen.append(read_only)
        return redis_presence.ConsumerPresenceRegistry()

    result = invoke([*args, "counts"], obj=factory, env=env)
    assert result.exit_code == 0, result.output
    assert seen == [read_only]


def test_bad_read_only_value_from_the_environment_is_a_usage_error() -> None:
    result = invoke(["ls"], env={"REDIS_PRESENCE_READ_ONLY": "maybe"})
    assert "--read-only" in one_error_line(result)
    assert result.exit_code == 2


def test_strict_reader_role_reads_with_or_without_read_only(
    make_redis_server: MakeRedisServer,
) -> None:
    """The README's `%R~` reader: every read is plain read commands, so `ls`, `counts` and
    `prune --dry-run` are served with and without --read-only."""
    server = make_redis_server()
    with server.client() as admin:
        admin.execute_command(*ACL_STRICT_READER.split())
        seed(RedisPresenceRegistry(admin))
    url = f"redis://{READER_USER}:{READER_PASSWORD}@127.0.0.1:{server.port}/0"
    for args in (["ls"], ["counts"], ["prune", "--dry-run"]):
        expected = invoke(["--url", server.url, "--now-ns", str(NOW), *args]).stdout
        plain = invoke(["--url", url, "--now-ns", str(NOW), *args])
        assert plain.exit_code == 0, plain.output
        assert plain.stdout == expected
        served = invoke(["--url", url, "--read-only", "--now-ns", str(NOW), *args])
        assert served.exit_code == 0, served.output
        assert served.stdout == expected
        assert READER_PASSWORD not in plain.output + served.output


def test_readme_documents_every_exit_code() -> None:
    """The CLI guide's exit-code table names exactly the codes the CLI's errors use."""
    guide = Path(redis_presence.__file__).resolve().parents[1] / "docs" / "cli.md"
    readme = guide.read_text(encoding="utf-8")
    section = readme[readme.index("## Errors and exit codes") :]
    table = section[: section.index("```")]
    documented = {int(code) for code in re.findall(r"^\| (\d+) \|", table, re.M)}
    pending = [CliError]
    used = {0}
    while pending:
        cls = pending.pop()
        used.add(cls.exit_code)
        pending.extend(cls.__subclasses__())
    from redis_presence.cli.commands.doctor import EXIT_FAILURES, EXIT_WARNINGS

    assert used == set(range(8))
    assert documented == used | {EXIT_WARNINGS, EXIT_FAILURES} == set(range(10))
    assert ReadOnlyRefused.exit_code == 6


# ---------------------------------------------------------------- environment and colour


def recording_factory() -> tuple[list[tuple[str, str]], RegistryFactory]:
    seen: list[tuple[str, str]] = []

    def factory(url: str, prefix: str, read_only: bool) -> PresenceRegistry:
        seen.append((url, prefix))
        return redis_presence.ConsumerPresenceRegistry()

    return seen, factory


@pytest.mark.parametrize(
    ("env", "args", "expected"),
    [
        ({}, [], ("redis://localhost:6379/0", "presence")),
        ({"REDIS_URL": "redis://b:2/0"}, [], ("redis://b:2/0", "presence")),
        (
            {"REDIS_PRESENCE_URL": "redis://a:1/0", "REDIS_URL": "redis://b:2/0"},
            [],
            ("redis://a:1/0", "presence"),
        ),
        (
            {"REDIS_PRESENCE_URL": "redis://a:1/0", "REDIS_PRESENCE_PREFIX": "p2"},
            ["--url", "redis://c:3/0"],
            ("redis://c:3/0", "p2"),
        ),
        ({"REDIS_PRESENCE_PREFIX": "p2"}, ["--prefix", "p3"], ("redis://localhost:6379/0", "p3")),
    ],
)
def test_global_options_come_from_the_environment(
    env: dict[str, str], args: list[str], expected: tuple[str, str]
) -> None:
    seen, factory = recording_factory()
    result = invoke([*args, "ls"], obj=factory, env=env)
    assert result.exit_code == 0, result.output
    assert seen == [expected]


def test_ttl_comes_from_the_environment() -> None:
    registry = redis_presence.ConsumerPresenceRegistry()
    registry.heartbeat("q", "g", "c", now_ns=NOW - 3 * S)
    for ttl, state in (("2000", "stale"), ("5000", "active"), ("1000", "expired")):
        result = invoke(
            ["--now-ns", str(NOW), "ls", "--format", "json"],
            obj=lambda url, prefix, read_only: registry,
            env={"REDIS_PRESENCE_TTL_MS": ttl},
        )
        assert json.loads(result.stdout)[0]["state"] == state


@pytest.mark.parametrize(
    ("env", "colour", "escapes"),
    [
        ({}, False, False),  # not a terminal
        ({"FORCE_COLOR": "1", "TERM": "xterm"}, True, True),
        ({"FORCE_COLOR": "1", "TERM": "xterm", "NO_COLOR": "1"}, False, True),  # bold only
    ],
)
def test_colour_follows_the_terminal_and_no_color(
    backend: Backend, env: dict[str, str], colour: bool, escapes: bool
) -> None:
    seed(backend.registry)
    for args in (["ls"], ["counts"], ["prune", "--dry-run"]):
        out = backend.at_now(*args, env=env).stdout
        assert bool(COLOUR.search(out)) is colour, args
        assert ("\x1b" in out) is escapes, args
        assert ANSI.sub("", out) == backend.at_now(*args).stdout


# ---------------------------------------------------------------- help


def command_names() -> list[str]:
    return sorted(cli.commands)


@pytest.mark.parametrize("name", [None, *command_names()])
def test_help_shows_examples(name: str | None) -> None:
    args = [name, "--help"] if name else ["--help"]
    result = invoke(args)
    assert result.exit_code == 0
    text = result.stdout
    block = text[text.index("Examples:") :].split("\n\n")[0].splitlines()[1:]
    assert block
    # `\b` kept each example on its own line.
    assert all("redis-presence " in line for line in block), block


def test_hidden_commands_and_options_stay_out_of_the_listing() -> None:
    text = invoke(["--help"]).stdout
    assert "demo-broker" not in text
    assert "--now-ns" not in text
    assert "--iterations" not in invoke(["watch", "--help"]).stdout
    for name in ("ls", "counts", "watch", "prune", "heartbeat", "deregister", "demo"):
        assert re.search(rf"^\s+{name}\s", text, re.MULTILINE), name


def test_real_client_sees_what_the_cli_wrote(redis_url: str) -> None:
    """The CLI writes under the prefix it is given, nothing else."""
    result = invoke(["--url", redis_url, "--prefix", "cli-test", "heartbeat", "q", "g", "c"])
    assert result.exit_code == 0, result.output
    with RedisPresenceRegistry.from_url(redis_url, prefix="cli-test") as mine:
        assert [row.key for row in mine.snapshot()] == [("q", "g", "c")]
    with RedisPresenceRegistry.from_url(redis_url) as other:
        assert len(other) == 0
    with redis.Redis.from_url(redis_url) as client:
        assert all(key.startswith(b"cli-test") for key in client.keys("*"))

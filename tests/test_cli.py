"""Every `redis-presence` command through click's runner, on fakeredis and on a real server.

Time is controlled with the hidden global `--now-ns`; rows are written with explicit
`now_ns`, so ages and states are exact.
"""

from __future__ import annotations

import csv
import io
import json
import re

import pytest
import redis
from cli_invoke import (
    ANSI,
    COLOUR,
    DEFAULT_TTL_NOTE,
    NOW,
    Backend,
    S,
    Scripted,
    backend,
    invoke,
    seed,
    snapshot_dicts,
)

import redis_presence
from redis_presence import RedisPresenceRegistry
from redis_presence.cli import cli
from redis_presence.cli.app import RegistryFactory
from redis_presence.cli.render import CONSUMER_FIELDS
from redis_presence.contract import PresenceRegistry

__all__ = ["backend"]  # the fixture, used by name below

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
        | {"capacity": "", "draining": "false", "drain_requested": "false"}
        | {"conflict": "false", "instance": backend.registry.instance}  # each beat's token
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

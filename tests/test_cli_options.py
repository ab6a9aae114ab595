"""Issue 18: formats and help (item 7), global options after the command (8), names in
messages (10), and what operators missed: filters on watch and counts, --sort and --limit.

Every case runs the real click command through click's runner, on fakeredis and on a real
server (the `backend` fixture of test_cli)."""

from __future__ import annotations

import json
import re

import pytest
from cli_invoke import NOW, Backend, backend, invoke, one_error_line, seed

import redis_presence
from redis_presence import ConsumerPresenceRegistry
from redis_presence.cli import cli
from redis_presence.contract import PresenceRegistry

__all__ = ["backend"]  # the fixture, used by name below

S = 1_000_000_000


# ---------------------------------------------------------------- item 7: formats and help


def test_prune_speaks_json_and_csv(backend: Backend) -> None:
    seed(backend.registry)
    result = backend.at_now("prune", "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"pruned": 1, "ttl_ms": 30_000, "ttl_source": "default"}
    assert backend.at_now("prune", "--format", "csv").stdout == "pruned\n0\n"
    assert backend.at_now("prune").stdout == "pruned 0 expired consumer(s)\n"


def test_heartbeat_and_deregister_speak_json(backend: Backend) -> None:
    beat = backend.at_now("heartbeat", "q", "g", "c", "--lease-count", "3", "--format", "json")
    assert beat.exit_code == 0, beat.output
    assert json.loads(beat.stdout) == {
        "queue": "q",
        "group": "g",
        "consumer": "c",
        "lease_count": 3,
        "recorded": True,
        "drain_requested": False,
    }
    gone = backend.run("deregister", "q", "g", "c", "--format", "json")
    assert json.loads(gone.stdout) == {
        "queue": "q",
        "group": "g",
        "consumer": "c",
        "deregistered": True,
    }
    again = backend.run("deregister", "q", "g", "c", "--format", "json")
    assert json.loads(again.stdout)["deregistered"] is False


def test_counts_help_names_its_own_fields() -> None:
    text = " ".join(invoke(["counts", "--help"]).stdout.split())
    assert "ConsumerPresence" not in text
    assert "queue, group and active" in text


def test_the_snapshot_alias_does_not_call_itself_an_alias_of_itself() -> None:
    text = invoke(["snapshot", "--help"]).stdout
    assert "(alias: snapshot)" not in text
    assert "Usage: cli snapshot [OPTIONS]" in text  # the runner's program name is "cli"
    assert "`redis-presence snapshot` is the same command" in " ".join(text.split())


def test_url_help_names_every_scheme() -> None:
    text = " ".join(invoke(["--help"]).stdout.split())
    for scheme in ("redis://", "rediss://", "unix://", "redis+cluster://", "rediss+cluster://"):
        assert scheme in text, scheme


# ---------------------------------------------------------------- item 8: options after


def recording() -> tuple[list[tuple[str, str, bool]], object]:
    seen: list[tuple[str, str, bool]] = []

    def factory(url: str, prefix: str, read_only: bool) -> PresenceRegistry:
        seen.append((url, prefix, read_only))
        return ConsumerPresenceRegistry()

    return seen, factory


@pytest.mark.parametrize(
    "args",
    [
        ["--url", "redis://a:1/2", "--prefix", "p", "--read-only", "ls"],
        ["ls", "--url", "redis://a:1/2", "--prefix", "p", "--read-only"],
        ["--url", "redis://x:9/9", "ls", "--url", "redis://a:1/2", "--prefix", "p", "--read-only"],
        ["--prefix", "p", "counts", "--read-only", "--url", "redis://a:1/2"],
        ["watch", "--iterations", "1", "--url", "redis://a:1/2", "--prefix", "p", "--read-only"],
    ],
    ids=" ".join,
)
def test_global_options_work_after_the_command(args: list[str]) -> None:
    seen, factory = recording()
    result = invoke(args, obj=factory)  # type: ignore[arg-type]
    assert result.exit_code == 0, result.output
    assert seen == [("redis://a:1/2", "p", True)]


def test_ttl_and_clock_after_the_command() -> None:
    registry = ConsumerPresenceRegistry()
    registry.heartbeat("q", "g", "c", now_ns=NOW - 3 * S)
    for ttl, state in (("2000", "stale"), ("5000", "active"), ("1000", "expired")):
        result = invoke(
            ["ls", "--format", "json", "--ttl-ms", ttl, "--now-ns", str(NOW)],
            obj=lambda url, prefix, read_only: registry,
        )
        assert json.loads(result.stdout)[0]["state"] == state


def test_read_only_after_the_command_refuses_writes() -> None:
    def never(url: str, prefix: str, read_only: bool) -> PresenceRegistry:
        raise AssertionError("a refused write may not open a registry")

    result = invoke(["prune", "--read-only"], obj=never)
    assert "prune writes to Redis, but --read-only" in one_error_line(result)
    assert result.exit_code == 6


def test_bad_global_values_after_the_command_are_usage_errors() -> None:
    result = invoke(["ls", "--ttl-ms", "0"])
    assert "--ttl-ms" in one_error_line(result)
    assert result.exit_code == 2


def test_every_command_accepts_and_mentions_the_global_options() -> None:
    for name, command in cli.commands.items():
        opts = {opt for param in command.params for opt in getattr(param, "opts", ())}
        assert {"--url", "--prefix", "--ttl-ms", "--timeout", "--read-only"} <= opts, name
        if not command.hidden:
            text = " ".join(invoke([name, "--help"]).stdout.split())
            assert "also work after the command" in text, name


# ---------------------------------------------------------------- item 10: names once


def test_names_in_messages_are_escaped_once(backend: Backend) -> None:
    result = backend.run("heartbeat", "q\nx", "g", "cons\tumer")
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        "heartbeat recorded: consumer 'cons\\tumer' (queue 'q\\nx', group 'g'), 0 lease(s)\n"
    )
    gone = backend.run("deregister", "q\nx", "g", "cons\tumer")
    assert gone.stdout == "consumer 'cons\\tumer' (queue 'q\\nx', group 'g') deregistered\n"


# ---------------------------------------------------------------- filters, sort, limit


def fleet(backend: Backend) -> None:
    reg = backend.registry
    reg.heartbeat("orders", "billing", "b-new", now_ns=NOW - 1 * S)
    reg.heartbeat("orders", "billing", "b-old", now_ns=NOW - 45 * S)
    reg.heartbeat("orders", "shipping", "s-dead", now_ns=NOW - 300 * S)
    reg.heartbeat("emails", "sender", "e-mid", now_ns=NOW - 20 * S)
    reg.heartbeat("emails", "sender", "e-dead", now_ns=NOW - 90 * S)


def names(result_stdout: str) -> list[str]:
    return [item["consumer"] for item in json.loads(result_stdout)]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], ["e-dead", "e-mid", "b-new", "b-old", "s-dead"]),
        (["--sort", "age"], ["s-dead", "e-dead", "b-old", "e-mid", "b-new"]),
        (["--sort", "state"], ["e-dead", "s-dead", "b-old", "e-mid", "b-new"]),
        (["--sort", "AGE", "--limit", "2"], ["s-dead", "e-dead"]),
        (["--queue", "orders", "--sort", "age", "--limit", "2"], ["s-dead", "b-old"]),
        (["--limit", "10"], ["e-dead", "e-mid", "b-new", "b-old", "s-dead"]),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_ls_sorts_and_limits(backend: Backend, args: list[str], expected: list[str]) -> None:
    fleet(backend)
    result = backend.at_now("ls", "--format", "json", *args)
    assert result.exit_code == 0, result.output
    assert names(result.stdout) == expected


def test_a_limited_table_says_how_many_it_left_out(backend: Backend) -> None:
    fleet(backend)
    lines = backend.at_now("ls", "--sort", "age", "--limit", "2").stdout.splitlines()
    assert [line.split()[2] for line in lines[1:3]] == ["s-dead", "e-dead"]
    assert lines[3] == "(showing 2 of 5 consumers: --limit)"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], {"emails/sender": 1, "orders/billing": 1, "orders/shipping": 0}),
        (["--queue", "orders"], {"orders/billing": 1, "orders/shipping": 0}),
        (["--group", "shipping"], {"orders/shipping": 0}),
        (["--queue", "emails", "--group", "billing"], {}),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_counts_filter_by_queue_and_group(
    backend: Backend, args: list[str], expected: dict[str, int]
) -> None:
    fleet(backend)
    result = backend.at_now("counts", "--format", "json", *args)
    assert result.exit_code == 0, result.output
    assert {
        f"{d['queue']}/{d['group']}": d["active"] for d in json.loads(result.stdout)
    } == expected


def test_counts_do_not_take_a_state() -> None:
    result = invoke(["counts", "--state", "active"])
    assert "No such option" in one_error_line(result)
    assert result.exit_code == 2


def test_watch_filters_sorts_and_limits_but_diffs_everything(backend: Backend) -> None:
    fleet(backend)
    result = backend.at_now(
        "watch",
        "--iterations",
        "1",
        "--queue",
        "orders",
        "--state",
        "stale",
        "--state",
        "expired",
        "--sort",
        "age",
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line.split()[2] for line in lines[2:4]] == ["s-dead", "b-old"]
    assert "b-new" not in result.stdout  # active: not selected
    assert "e-mid" not in result.stdout  # another queue
    # The counts are those of the selected queue, in every state.
    assert "counts: orders/billing 1 active, 1 stale; orders/shipping 0 active, 1 expired" in lines
    limited = backend.at_now("watch", "--iterations", "1", "--sort", "age", "--limit", "1")
    assert "... and 4 more (--limit)" in limited.stdout
    assert re.search(r"^\S+\s+\S+\s+s-dead\s", limited.stdout, re.M)


def test_every_read_goes_through_one_module() -> None:
    """The switch to server-side filtering is a change in `cli/reads.py` only: no other CLI
    module calls the registry's read methods."""
    from pathlib import Path

    cli_dir = Path(redis_presence.__file__).parent / "cli"
    for path in cli_dir.rglob("*.py"):
        if path.name == "reads.py" or path.parent.name == "demo":
            continue  # the demo reads its own server, which it starts and seeds itself
        text = path.read_text()
        assert ".snapshot(" not in text, path
        assert ".count_active_by_group(" not in text, path

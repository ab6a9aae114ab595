"""Issue 24 item 6 in the CLI: the TTL note says which TTL each group was read with, `ttl`
takes its options without `get`, and the lines of `events`, `doctor`, the TTL note and
the demo fit 80 columns."""

from __future__ import annotations

import json

import pytest
from cli_invoke import NOW, Backend, S, backend, invoke
from servers import MakeRedisServer

__all__ = ["backend"]  # the fixture, used by name below

pytestmark = pytest.mark.timeout(120)

DEFAULT = "the default; 'redis-presence ttl set' stores one"


def test_the_ttl_note_says_which_ttl_each_group_was_read_with(backend: Backend) -> None:
    reg = backend.registry
    reg.set_ttl(60_000, queue="slow", group="batch")
    reg.heartbeat("slow", "batch", "s", now_ns=NOW - 40 * S)  # active under its own 60 s
    reg.heartbeat("fast", "any", "f", now_ns=NOW - 1 * S)
    ls = backend.run("--now-ns", str(NOW), "ls", "--format", "json")
    assert {row["consumer"]: row["state"] for row in json.loads(ls.stdout)} == {
        "f": "active",
        "s": "active",
    }
    assert ls.stderr == (
        "redis-presence: TTL 60000 ms for queue 'slow' group 'batch' (its own)\n"
        "redis-presence: TTL 30000 ms for the other groups (the default)\n"
    )
    for line in ls.stderr.splitlines():
        assert len(line) <= 80, line
    counts = backend.run("--now-ns", str(NOW), "counts", "--queue", "slow")
    assert counts.stderr.splitlines()[0] == (
        "redis-presence: TTL 60000 ms for queue 'slow' group 'batch' (its own)"
    )
    # Past three groups of their own, by value.
    for i in range(4):
        reg.set_ttl(90_000, queue="many", group=f"g{i}")
        reg.heartbeat("many", f"g{i}", "m", now_ns=NOW)
    many = backend.run("--now-ns", str(NOW), "counts")
    assert many.stderr == (
        "redis-presence: TTL 60000 ms for 1 group (their own)\n"
        "redis-presence: TTL 90000 ms for 4 groups (their own)\n"
        "redis-presence: TTL 30000 ms for the other groups (the default)\n"
    )
    single = backend.run("ls", "--queue", "fast", "--group", "any")
    assert single.stderr == f"redis-presence: TTL 30000 ms ({DEFAULT})\n"
    explicit = backend.run("--ttl-ms", "5000", "ls")
    assert explicit.stderr == "redis-presence: TTL 5000 ms (--ttl-ms)\n"


def test_ttl_takes_its_options_without_get(backend: Backend) -> None:
    backend.registry.set_ttl(120_000, queue="reports", group="nightly")
    alone = backend.run("ttl", "--queue", "reports", "--group", "nightly")
    assert alone.exit_code == 0, alone.output
    assert (
        alone.stdout == backend.run("ttl", "get", "--queue", "reports", "--group", "nightly").stdout
    )
    assert alone.stdout == (
        "queue 'reports', group 'nightly': TTL 120000 ms (stored for queue 'reports', "
        "group 'nightly')\n"
    )
    as_json = backend.run("ttl", "--format", "json")
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout)["source"] == "default"
    mixed = backend.run("ttl", "--queue", "reports", "set", "5000")
    assert mixed.exit_code == 2
    assert "after 'set'" in mixed.stderr


def test_the_ttl_note_fits_80_columns(backend: Backend) -> None:
    backend.registry.heartbeat("orders", "billing", "w1", now_ns=NOW)
    for args in (["ls"], ["counts"], ["ls", "--queue", "orders", "--group", "billing"]):
        result = backend.run(*args)
        for line in result.stderr.splitlines():
            assert len(line) <= 80, (args, line)
    assert invoke(["ttl", "--help"]).exit_code == 0


# ---------------------------------------------------------------- 80 columns


def test_the_events_note_wraps_at_80_columns(backend: Backend) -> None:
    backend.registry.set_ttl(20_000)
    result = backend.run("events")
    assert result.exit_code == 0, result.output
    lines = result.stderr.splitlines()
    assert max(map(len, lines)) <= 80, lines
    assert lines[0].startswith("redis-presence: events: TTL 20000 ms (stored for prefix")
    assert " ".join(line.strip() for line in lines) == (
        "redis-presence: events: TTL 20000 ms (stored for prefix 'presence'; a group's own wins)"
    )


def test_doctor_wraps_its_findings_under_their_column(make_redis_server: MakeRedisServer) -> None:
    server = make_redis_server()  # no persistence: a warning with advice
    result = invoke(["--url", server.url, "doctor"])
    assert result.exit_code == 8, result.output
    lines = result.stdout.splitlines()
    assert max(map(len, lines)) <= 80, [line for line in lines if len(line) > 80]
    (start,) = [i for i, line in enumerate(lines) if line.startswith("WARN  persistence")]
    column = lines[start].index("no persistence")
    following = lines[start + 1 : start + 3]
    assert all(line[:column].strip() == "" and line[column] != " " for line in following)
    assert "->" in "".join(lines[start:])


def test_the_demo_title_fits_its_view() -> None:
    from redis_presence.cli.demo.story import demo_title

    assert demo_title(12.3, 20.0, 2000, 120) == (
        "redis-presence demo  12.3s (ends at 20.0s)  TTL 2000 ms (stale after 2s, "
        "expired after 4s)  Ctrl-C stops"
    )
    assert demo_title(12.3, 20.0, 2000, 80) == (
        "demo  12.3s (ends at 20.0s)  TTL 2000 ms: stale after 2s, expired after 4s"
    )
    for width in (80, 60, 40, 22):
        assert len(demo_title(12_345.6, 86_400.0, 60_000, width)) <= width


def test_the_demo_log_wraps_under_its_stamp() -> None:
    import io

    from rich.console import Console

    from redis_presence.cli.demo.story import Log

    out = io.StringIO()
    Log(Console(file=out, width=80), clock=lambda: 0.0).say(
        "TTL 2000 ms: a consumer is active up to 2s after its last heartbeat, stale up to "
        "4s, expired after that"
    )
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert max(map(len, lines)) <= 80
    assert lines[1].startswith(" " * len("demo: [  0.0s] "))
    assert lines[1][len("demo: [  0.0s] ")] != " "


@pytest.mark.slow
def test_the_live_demo_fits_80_columns() -> None:
    from test_cli_terminal import on_terminal

    args = ["--ttl-ms", "500", "demo", "--brokers", "1", "--consumers", "2", "--duration", "1"]
    out = on_terminal(args, 80, rows=30, timeout_s=90)
    assert "demo " in out
    assert "(ends at" in out
    wide = [line for line in out.splitlines() if len(line.rstrip()) > 80]
    assert not wide, wide


def test_events_on_an_80_column_terminal(redis_url: str) -> None:
    """`events` as an operator sees it at 80 columns: the table fits, the TTL note wraps;
    only the cursor (one token, to copy whole) may be longer."""
    from test_cli_terminal import on_terminal

    from redis_presence import RedisPresenceRegistry

    with RedisPresenceRegistry.from_url(redis_url) as registry:
        registry.set_ttl(20_000)
        cursor = registry.changes()[1]
        registry.heartbeat("orders", "shipping", "worker-4", 3)
        registry.heartbeat("orders", "billing", "broker-07.worker-0001234", 2)
        registry.deregister("orders", "billing", "broker-07.worker-0001234")
    out = on_terminal(["--url", redis_url, "events", "--since", cursor], 80)
    lines = [line.rstrip() for line in out.splitlines() if line.strip()]
    assert any("joined" in line for line in lines), out
    wide = [line for line in lines if len(line) > 80 and not line.startswith("cursor: ")]
    assert not wide, wide

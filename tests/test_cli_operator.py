"""Issue 24 item 6 in the CLI: the TTL note says which TTL each group was read with, `ttl`
takes its options without `get`, and the lines of `events`, `doctor`, the TTL note and
the demo fit 80 columns."""

from __future__ import annotations

import json

import pytest
from test_cli import NOW, Backend, S, backend, invoke

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

"""`redis-presence ls --by FIELD` (issue 34 item 4): consumers rolled up by a metadata field,
on fakeredis and a real server, as a table, JSON and CSV."""

from __future__ import annotations

import csv
import io
import json

from cli_invoke import NOW, Backend, S, backend, invoke, one_error_line  # noqa: F401 (the fixture)

from redis_presence.keys import Keyspace


def fleet(backend: Backend) -> None:  # noqa: F811
    registry = backend.registry
    registry.heartbeat("orders", "billing", "a", 2, now_ns=NOW - 1 * S)
    registry.heartbeat("orders", "shipping", "b", 0, now_ns=NOW - 1 * S)
    registry.heartbeat("orders", "billing", "dead", 3, now_ns=NOW - 600 * S)  # expired
    registry.heartbeat("emails", "sender", "plain", 1, now_ns=NOW - 1 * S)
    registry.describe("orders", "billing", "a", {"host": "web-1", "version": "1.2"})
    registry.describe("orders", "shipping", "b", {"host": "web-1", "version": "1.2"})
    registry.describe("orders", "billing", "dead", {"host": "web-2", "version": "1.1"})


def test_ls_by_host_and_version(backend: Backend) -> None:  # noqa: F811
    fleet(backend)
    table = backend.at_now("ls", "--by", "host")
    assert table.exit_code == 0, table.output
    lines = table.stdout.splitlines()
    assert lines[0].split()[:3] == ["HOST", "CONSUMERS", "ACTIVE"]
    assert lines[1].split()[:9] == ["(none)", "1", "1", "0", "0", "0", "1", "1", "0"]
    assert lines[2].split()[:9] == ["web-1", "2", "2", "0", "0", "0", "2", "2", "0"]
    assert lines[3].split()[:9] == ["web-2", "1", "0", "0", "1", "0", "1", "3", "3"]
    assert lines[-1] == "(4 consumers by host: '(none)' have no host)"
    data = json.loads(backend.at_now("ls", "--by", "version", "--format", "json").stdout)
    assert [(d["value"], d["consumers"], d["drained"]) for d in data] == [
        (None, 1, False),
        ("1.1", 1, False),  # its one consumer died holding 3 leases: not drained
        ("1.2", 2, False),
    ]
    rows = list(
        csv.reader(io.StringIO(backend.at_now("ls", "--by", "host", "--format", "csv").stdout))
    )
    assert rows[0][:3] == ["label", "value", "consumers"]
    assert rows[1][:3] == ["(none)", "", "1"]
    # The filters apply first: a queue, states.
    only = json.loads(
        backend.at_now(
            "ls", "--by", "host", "--queue", "orders", "--state", "active", "--format", "json"
        ).stdout
    )
    assert [(d["value"], d["active"]) for d in only] == [("web-1", 2)]
    nothing = backend.at_now("ls", "--by", "host", "--queue", "nowhere")
    assert nothing.exit_code == 0
    assert nothing.stdout.startswith("(no consumers with queue 'nowhere'")


def test_ls_by_with_limit_and_sort(backend: Backend) -> None:  # noqa: F811
    fleet(backend)
    first = backend.at_now("ls", "--by", "host", "--limit", "2")
    assert first.exit_code == 0, first.output
    lines = first.stdout.splitlines()
    assert [line.split()[0] for line in lines[1:-1]] == ["(none)", "web-1"]
    assert lines[-1] == "(4 consumers by host: '(none)' have no host; 2 of 3 values)"
    sorted_ = backend.at_now("ls", "--by", "host", "--sort", "age")
    assert one_error_line(sorted_) == (
        "Error: --sort orders consumers: --by lists the values of FIELD in order"
    )


def test_ls_by_counts_unreadable_metadata_apart(backend: Backend) -> None:  # noqa: F811
    fleet(backend)
    backend.registry.client.hset(Keyspace("presence").group("emails", "sender").meta, "plain", "[[")
    data = json.loads(backend.at_now("ls", "--by", "host", "--format", "json").stdout)
    assert [d["label"] for d in data] == ["(unreadable)", "web-1", "web-2"]


def test_ls_by_a_bad_field_is_one_line() -> None:
    line = one_error_line(invoke(["ls", "--by", "x" * 600]))
    assert "--by" in line

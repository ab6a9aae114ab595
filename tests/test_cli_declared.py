"""The CLI's side of issue 14: expect / unexpect, counts with declared groups, check of every
declared group, ls --stuck and ls --wide with metadata."""

from __future__ import annotations

import json

from cli_invoke import NOW, Backend, S, backend, seed  # noqa: F401 (the fixture)


def test_expect_unexpect_and_counts_show_declared_groups_with_zero(backend: Backend) -> None:  # noqa: F811
    seed(backend.registry)
    result = backend.run("expect", "payments", "settle", "--min-active", "2")
    assert result.exit_code == 0, result.output
    assert result.stdout == "queue 'payments' group 'settle' expects at least 2 active consumers\n"
    backend.run("expect", "orders", "billing")
    table = backend.at_now("counts").stdout
    assert "MIN" in table
    lines = {line.split()[0] + "/" + line.split()[1]: line for line in table.splitlines()[1:]}
    assert lines["payments/settle"].split()[2:4] == ["0", "2"]
    assert "below minimum" in lines["payments/settle"]
    assert "below minimum" not in lines["orders/billing"]  # one active, one wanted
    data = json.loads(backend.at_now("counts", "--format", "json").stdout)
    assert {
        "queue": "payments",
        "group": "settle",
        "active": 0,
        "min_active": 2,
        "below": True,
    } in data
    result = backend.run("unexpect", "payments", "settle", "--format", "json")
    assert json.loads(result.stdout) == {"queue": "payments", "group": "settle", "unexpected": True}
    assert backend.run("unexpect", "payments", "settle").stdout.endswith("was not declared\n")
    assert "payments" not in backend.at_now("counts").stdout


def test_check_without_a_group_checks_every_declared_group(backend: Backend) -> None:  # noqa: F811
    seed(backend.registry)
    assert backend.at_now("check").exit_code == 2  # nothing declared, nothing named
    backend.registry.expect("orders", "billing")
    ok = backend.at_now("check")  # enough readers, but one stale: DEGRADED
    assert ok.exit_code == 10, ok.output
    assert ok.stdout.startswith("DEGRADED queue 'orders' group 'billing': 1 consumer stale")
    assert backend.at_now("check", "--below-only").exit_code == 0
    backend.registry.expect("payments", "settle", 1)
    failed = backend.at_now("check")
    assert failed.exit_code == 1
    assert (
        "STOPPED  queue 'payments' group 'settle': nobody reading: no consumer, at least 1 wanted"
        in failed.stdout
    )


def test_ls_stuck_and_wide_metadata(backend: Backend) -> None:  # noqa: F811
    registry = backend.registry
    registry.heartbeat("orders", "billing", "busy", 3, now_ns=NOW - 400 * S)
    registry.heartbeat("orders", "billing", "busy", 3, now_ns=NOW - 1 * S)
    registry.heartbeat("orders", "billing", "fine", 3, now_ns=NOW - 1 * S, progressed=True)
    registry.describe("orders", "billing", "busy", {"host": "h-1", "pid": "42"})
    stuck = backend.at_now("ls", "--stuck", "--wide")
    assert stuck.exit_code == 0, stuck.output
    (header, row) = stuck.stdout.splitlines()
    assert "META" in header
    assert "busy" in row
    assert "active stuck" in row
    assert "host=h-1 pid=42" in row
    data = json.loads(backend.at_now("ls", "--format", "json").stdout)
    assert [(d["consumer"], d["stuck"], d["meta"]) for d in data] == [
        ("busy", True, {"host": "h-1", "pid": "42"}),
        ("fine", False, {}),
    ]
    assert "META" not in backend.at_now("ls").stdout  # metadata only with --wide

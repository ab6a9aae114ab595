"""Protocol version 2's read side (V2SPEC): stored values of nine fields, read beside
version 1 values in one group, give rows their capacity, draining, drain_requested,
conflict and instance, and groups their capacity, free slots, draining consumers and
conflicts; `group()` and ``groups(capacity=True)`` judge DRAINING and excuse a shortfall
with them. `seed` writes exact values with HSET (a version 1 one among them) over
consumers a beat registered, so each score matches its stored beat; the end-to-end tests
beat with ``capacity=``, ``draining=``, `request_drain` and two instance tokens.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from backends import make_registry, raw_client
from cli_invoke import invoke

from redis_presence import RedisPresenceRegistry, Verdict
from redis_presence.keys import Keyspace

MS = 1_000_000
T0 = 1_796_000_000_123_456_000
TTL = 30_000
KEYS = Keyspace("presence")
G = KEYS.group("q", "g")

BACKENDS = [
    pytest.param("fakeredis", id="fakeredis"),
    pytest.param("redis", id="redis-server", marks=pytest.mark.redis_server),
    pytest.param("cluster", id="cluster", marks=pytest.mark.redis_server),
    pytest.param("async", id="async", marks=pytest.mark.redis_server),
    pytest.param("redis-small", id="redis-small", marks=pytest.mark.redis_server),
]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def v2(registered: int, last: int, lease: int, *rest: object) -> bytes:
    """A version 2 value: `rest` is progress, capacity, flags, conflict, instance, previous."""
    return " ".join(map(str, (registered, last, lease, *rest))).encode()


def seed(registry: Any, client: Any) -> None:
    """q/g (declared, min 4): v1 "a" active (2 leases, version 1 value); "b" active,
    capacity 10, 3 leases, draining; "c" stale, draining; "d" active, capacity 4, 1 lease,
    in conflict (a duplicate 5 ms ago), drain requested; "e" expired, capacity 99 (not
    counted); "f" active, version 2 without capacity."""
    beats = {
        "a": T0 - MS,
        "b": T0 - 2 * MS,
        "c": T0 - (TTL + 5) * MS,
        "d": T0 - 3 * MS,
        "e": T0 - (2 * TTL + 5) * MS,
        "f": T0 - 4 * MS,
    }
    for name, beat in beats.items():
        registry.heartbeat("q", "g", name, 2 if name == "a" else 0, now_ns=beat)
    registry.expect("q", "g", 4)
    client.hset(
        G.data,
        mapping={
            "a": f"{beats['a']} {beats['a']} 2".encode(),  # as a version 1 client wrote it
            "b": v2(beats["b"], beats["b"], 3, beats["b"] - MS, 10, 1, 0, "inst-b", "-"),
            "c": v2(beats["c"], beats["c"], 0, 0, 0, 1, 0, "inst-c", "-"),
            "d": v2(beats["d"], beats["d"], 1, 0, 4, 2, T0 - 5 * MS, "inst-d2", "inst-d1"),
            "e": v2(beats["e"], beats["e"], 7, 0, 99, 0, 0, "-", "-"),
            "f": v2(beats["f"], beats["f"], 5, 0, 0, 0, 0, "inst-f", "-"),
        },
    )


def test_rows_read_version_2_values_beside_version_1_ones(
    request: pytest.FixtureRequest, backend: str
) -> None:
    registry, client = make_registry(request, backend), raw_client(request, backend)
    seed(registry, client)
    rows = {row.consumer: row for row in registry.snapshot(now_ns=T0, ttl_ms=TTL)}
    got = {
        name: (r.state.value, r.capacity, r.draining, r.drain_requested, r.conflict, r.instance)
        for name, r in rows.items()
    }
    assert got == {
        "a": ("active", None, False, False, False, None),
        "b": ("active", 10, True, False, False, "inst-b"),
        "c": ("stale", None, True, False, False, "inst-c"),
        "d": ("active", 4, False, True, True, "inst-d2"),
        "e": ("expired", 99, False, False, False, None),
        "f": ("active", None, False, False, False, "inst-f"),
    }
    assert rows["b"].last_progress_ns == T0 - 3 * MS
    assert rows["f"].last_progress_ns is None  # 0: none recorded
    assert rows["a"].lease_count == 2
    one = registry.consumer("q", "g", "d", now_ns=T0, ttl_ms=TTL)
    assert one == rows["d"]
    # Later the conflict is older than a TTL: no longer one.
    later = registry.consumer("q", "g", "d", now_ns=T0 + TTL * MS, ttl_ms=TTL)
    assert later is not None
    assert not later.conflict


def test_a_group_says_its_capacity_draining_and_conflicts(
    request: pytest.FixtureRequest, backend: str
) -> None:
    """Capacity sums the active consumers that report one (b 10, d 4; not the expired e),
    free is that minus their leases (3 + 1); draining counts b (active) and c (stale)."""
    registry, client = make_registry(request, backend), raw_client(request, backend)
    seed(registry, client)
    row = registry.group("q", "g", now_ns=T0, ttl_ms=TTL)
    assert (row.active, row.stale, row.expired) == (4, 1, 1)
    assert (row.capacity, row.free, row.draining, row.conflicts) == (14, 10, 2, 1)
    assert row.draining_stale == 1
    # 4 active, 4 wanted: the stale one said it was draining, so it lapsed on purpose.
    assert row.verdict is Verdict.DRAINING
    assert row.reason == (
        "planned departure: 1 consumer draining, 1 consumer left on purpose; "
        "4 active, at least 4 wanted; 4 of 14 slots in use"
    )
    (listed,) = registry.groups(now_ns=T0, ttl_ms=TTL, capacity=True)
    assert listed == row
    (detailed,) = registry.groups(now_ns=T0, ttl_ms=TTL, capacity=True, details=True)
    assert detailed[9:] == row[9:]
    (plain,) = registry.groups(now_ns=T0, ttl_ms=TTL)
    assert plain[9:] == (None,) * 5  # not read: the stale one is a fault
    assert plain.verdict is Verdict.DEGRADED


def test_draining_excuses_a_shortfall(request: pytest.FixtureRequest, backend: str) -> None:
    """Declared 5: 4 active and 1 stale that said draining make no shortfall (DRAINING);
    without its draining flag the same group is DEGRADED."""
    registry, client = make_registry(request, backend), raw_client(request, backend)
    seed(registry, client)
    registry.expect("q", "g", 5)
    assert registry.group("q", "g", now_ns=T0, ttl_ms=TTL).verdict is Verdict.DRAINING
    registry.expect("q", "g", 6)
    short = registry.group("q", "g", now_ns=T0, ttl_ms=TTL)
    assert short.verdict is Verdict.DEGRADED
    assert short.reason == "below its minimum: 4 active, at least 6 wanted"
    stale = T0 - (TTL + 5) * MS
    client.hset(G.data, "c", v2(stale, stale, 0, 0, 0, 0, 0, "inst-c", "-"))
    registry.expect("q", "g", 5)
    row = registry.group("q", "g", now_ns=T0, ttl_ms=TTL)
    assert (row.draining, row.verdict) == (1, Verdict.DEGRADED)


def test_a_group_of_version_1_values_reports_no_capacity(
    request: pytest.FixtureRequest, backend: str
) -> None:
    registry = make_registry(request, backend)
    registry.heartbeat("q", "g", "a", 3, now_ns=T0)
    row = registry.group("q", "g", now_ns=T0, ttl_ms=TTL)
    assert (row.capacity, row.free, row.draining, row.conflicts) == (None, None, 0, 0)
    assert row.verdict is Verdict.OK


@pytest.mark.redis_server
def test_the_cli_shows_capacity_and_marks(redis_client: Any, redis_url: str) -> None:
    """``ls``: CAPACITY and NOTE columns, JSON fields; ``counts``: CAPACITY and FREE."""
    seed(RedisPresenceRegistry(redis_client), redis_client)
    at = ["--url", redis_url, "--now-ns", str(T0), "--ttl-ms", str(TTL)]
    table = invoke([*at, "ls", "--wide"])
    assert table.exit_code == 0, table.output
    header, *lines = table.stdout.splitlines()
    assert header.split()[6:9] == ["LEASES", "CAPACITY", "NOTE"]
    by_name = {line.split()[2]: line for line in lines}
    assert "10  draining" in by_name["b"]
    assert "4  ! conflict, drain requested" in by_name["d"]
    listed = json.loads(invoke([*at, "ls", "--format", "json"]).stdout)
    assert {d["consumer"]: (d["capacity"], d["draining"], d["conflict"]) for d in listed} == {
        "a": (None, False, False),
        "b": (10, True, False),
        "c": (None, True, False),
        "d": (4, False, True),
        "e": (99, False, False),
        "f": (None, False, False),
    }
    counts = invoke([*at, "counts"])
    assert counts.exit_code == 0, counts.output
    assert [line.split() for line in counts.stdout.splitlines()] == [
        ["QUEUE", "GROUP", "ACTIVE", "MIN", "CAPACITY", "FREE"],
        ["q", "g", "4", "4", "14", "10"],
    ]


@pytest.mark.parametrize(
    # Not the in-process model: two of its registries are two stores, not two processes.
    "every",
    [*BACKENDS, pytest.param("cluster-small", marks=pytest.mark.redis_server)],
)
def test_end_to_end_beats_with_capacity_draining_and_a_duplicate(
    request: pytest.FixtureRequest, every: str
) -> None:
    """The write side's beats (protocol version 2 scripts) read back: capacity, draining, a
    drain request until a draining beat, and a duplicate (two processes alternating under
    one name) in conflict, in rows, `group()` and ``groups(capacity=True)``."""
    one = make_registry(request, every, instance="proc-one")
    two = make_registry(request, every, instance="proc-two")
    one.heartbeat("q", "g", "w1", 2, now_ns=T0 - 10 * MS, capacity=8)
    one.heartbeat("q", "g", "w2", 1, now_ns=T0 - 10 * MS, capacity=4)
    assert one.request_drain("q", "g", "w2", now_ns=T0 - 9 * MS)
    row = one.consumer("q", "g", "w2", now_ns=T0, ttl_ms=TTL)
    assert (row.drain_requested, row.draining, row.capacity) == (True, False, 4)
    one.heartbeat("q", "g", "w2", 1, now_ns=T0 - 8 * MS, draining=True)
    # A duplicate of w1: the two processes beat in turn (restart, then back: a conflict).
    two.heartbeat("q", "g", "w1", 2, now_ns=T0 - 7 * MS)
    one.heartbeat("q", "g", "w1", 2, now_ns=T0 - 6 * MS)
    rows = {r.consumer: r for r in one.snapshot(now_ns=T0, ttl_ms=TTL)}
    assert (rows["w1"].capacity, rows["w1"].conflict, rows["w1"].instance) == (8, True, "proc-one")
    assert (rows["w2"].draining, rows["w2"].drain_requested) == (True, False)
    group = one.group("q", "g", now_ns=T0, ttl_ms=TTL)
    assert (group.capacity, group.free, group.draining, group.conflicts) == (12, 9, 1, 1)
    assert group.verdict is Verdict.DRAINING
    assert one.groups(now_ns=T0, ttl_ms=TTL, capacity=True) == [group]
    later = one.group("q", "g", now_ns=T0 + (TTL + 10) * MS, ttl_ms=TTL)
    assert later.conflicts == 0  # a TTL later the duplicate is history


@pytest.mark.redis_server
def test_check_passes_a_group_whose_shortfall_draining_excuses(
    redis_client: Any, redis_url: str
) -> None:
    """``check``: 4 active and 1 stale that said it was draining meet a minimum of 5
    (DRAINING, exit 0); a minimum of 6 is short by one (exit 1, below its minimum)."""
    seed(RedisPresenceRegistry(redis_client), redis_client)
    at = ["--url", redis_url, "--now-ns", str(T0), "--ttl-ms", str(TTL), "check"]
    excused = invoke([*at, "--queue", "q", "--group", "g", "--min-active", "5", "--format", "json"])
    assert excused.exit_code == 0, excused.output
    (report,) = json.loads(excused.stdout)
    assert report["verdict"] == "DRAINING"
    short = invoke([*at, "--queue", "q", "--group", "g", "--min-active", "6"])
    assert short.exit_code == 1, short.output


@pytest.mark.redis_server
def test_groups_with_capacity_cost_what_the_live_consumers_are(redis_client: Any) -> None:
    """``groups(capacity=True)``: one round trip more for the page of groups (each group's
    first page of live names), then one a page of 500 live consumers (``HMGET``, with the
    next page's names): 3 more for groups of 1,000 live consumers; 1 more when every
    consumer expired (no value read). ``group()`` reads its first page in its one batch."""
    from test_round_trips import trips_of

    writer = RedisPresenceRegistry(redis_client)
    for g in ("a", "b", "c"):
        writer.heartbeat_many([("q", g, f"c{i}", 1) for i in range(1_000)], now_ns=T0)

    def trips(now_ns: int, capacity: bool) -> int:
        return trips_of(redis_client, lambda plans: plans.groups(now_ns=now_ns, capacity=capacity))

    assert trips(T0, True) == trips(T0, False) + 3
    later = T0 + 3_600_000 * MS  # every consumer expired
    assert trips(later, True) == trips(later, False) + 1
    redis_client.config_resetstat()
    rows = writer.groups(now_ns=later, capacity=True)
    assert [(r.capacity, r.draining) for r in rows] == [(None, 0)] * 3
    stats = redis_client.info("commandstats")
    assert "cmdstat_hmget" not in stats  # no expired consumer's value read


@pytest.mark.redis_server
def test_a_roll_up_counts_draining_and_capacity(redis_client: Any) -> None:
    """``ls --by``: per value, the draining consumers (b active, c stale) and the
    capacities of the active ones (b 10, d 4; not the expired e's 99); the table gains
    DRAINING and CAPACITY only when some value has them."""
    from io import StringIO

    from rich.console import Console

    from redis_presence.cli.render import Styler
    from redis_presence.cli.render_rollup import render_rollup
    from redis_presence.rollup import roll_up

    registry = RedisPresenceRegistry(redis_client)
    seed(registry, redis_client)
    (row,) = roll_up(registry.snapshot(now_ns=T0, ttl_ms=TTL), "host")
    assert (row.draining, row.capacity, row.active, row.stale) == (2, 14, 4, 1)
    assert row.to_dict()["draining"] == 2
    styler = Styler(Console(file=StringIO(), _environ={}))
    header = render_rollup([row], "host", "table", styler).splitlines()[0].split()
    assert header[-2:] == ["DRAINING", "CAPACITY"]
    plain = render_rollup([row._replace(draining=0, capacity=None)], "host", "table", styler)
    assert "DRAINING" not in plain
    assert "CAPACITY" not in plain
    csv_text = render_rollup([row], "host", "csv", styler).splitlines()
    assert csv_text[0].endswith(",drained,draining,capacity")
    assert csv_text[1].endswith(",False,2,14")

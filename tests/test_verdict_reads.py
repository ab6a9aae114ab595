"""The verdict where it is read: `groups()` rows (a real redis-server, fakeredis and the
in-process model give the same), the web API's group JSON, and ``/metrics``'
``redis_presence_group_verdict``; at no cost beyond the read it is judged from."""

from __future__ import annotations

from typing import Any

import pytest
from backends import make_registry
from test_round_trips import trips_of
from web_client import MS, T0, TTL_MS, Clock, client, clock, make_client, metric_samples, writer

from redis_presence import RedisPresenceRegistry
from redis_presence.verdict import GroupFacts, Verdict, judge, verdict_of

__all__ = ["client", "clock", "writer"]  # the fixtures, used by name below

TTL = TTL_MS


@pytest.fixture(
    params=[
        pytest.param("memory", id="memory"),
        pytest.param("fakeredis", id="fakeredis"),
        pytest.param("redis", id="redis-server", marks=pytest.mark.redis_server),
        pytest.param("async", id="async", marks=pytest.mark.redis_server),
        pytest.param("cluster", id="cluster", marks=pytest.mark.redis_server),
    ]
)
def registry(request: pytest.FixtureRequest) -> Any:
    return make_registry(request, request.param)


def fleet(registry: Any) -> None:
    """One group per verdict `groups()` can give, and each boundary of its counts."""
    beat = registry.heartbeat
    beat("q", "ok", "w1", 0, now_ns=T0)  # one active, undeclared: wants one
    registry.expect("q", "at-min", 2)
    beat("q", "at-min", "w1", 0, now_ns=T0)
    beat("q", "at-min", "w2", 0, now_ns=T0 - TTL * MS)  # exactly one TTL old: still active
    registry.expect("q", "below", 2)
    beat("q", "below", "w1", 0, now_ns=T0)
    beat("q", "stale", "w1", 0, now_ns=T0)
    beat("q", "stale", "w2", 0, now_ns=T0 - (TTL + 1) * MS)  # one ms past: stale
    beat("q", "gone", "w1", 3, now_ns=T0 - (2 * TTL + 1) * MS)  # expired only
    registry.expect("q", "never", 1)  # declared, no consumer


EXPECTED = {
    "ok": (Verdict.OK, "1 active"),
    "at-min": (Verdict.OK, "2 active, at least 2 wanted"),
    "below": (Verdict.DEGRADED, "below its minimum: 1 active, at least 2 wanted"),
    "stale": (Verdict.DEGRADED, "1 consumer stale (missed beats without draining)"),
    "gone": (Verdict.STOPPED, "nobody reading: 0 active (1 expired)"),
    "never": (Verdict.STOPPED, "nobody reading: no consumer, at least 1 wanted"),
}


def test_groups_rows_carry_a_verdict_and_its_reason(registry: Any) -> None:
    fleet(registry)
    rows = registry.groups(now_ns=T0, ttl_ms=TTL)
    assert {row.group: (row.verdict, row.reason) for row in rows} == EXPECTED
    for row in rows:  # the counts alone: the pure rule on the row's own fields
        facts = GroupFacts(row.active, row.stale, row.expired, row.min_active)
        assert row.judged == judge(facts)
        assert verdict_of(facts) is row.verdict
    # With details too, and the plain mapping keeps the protocol's fields.
    detailed = registry.groups(now_ns=T0, ttl_ms=TTL, details=True)
    assert [(r.verdict, r.reason) for r in detailed] == [(r.verdict, r.reason) for r in rows]
    assert "verdict" not in rows[0].to_dict()


def test_a_group_moves_through_its_verdicts_as_time_passes(registry: Any) -> None:
    """One consumer that stops beating: OK for one TTL, DEGRADED (stale) the next, then
    STOPPED when it expires: the window is two TTLs."""
    registry.heartbeat("q", "g", "w1", 0, now_ns=T0)
    registry.heartbeat("q", "g", "w2", 0, now_ns=T0)
    seen = []
    for later_ms in (0, TTL, TTL + 1, 2 * TTL, 2 * TTL + 1):
        registry.heartbeat("q", "g", "w1", 0, now_ns=T0 + later_ms * MS)
        (row,) = registry.groups(now_ns=T0 + later_ms * MS, ttl_ms=TTL)
        seen.append(row.verdict)
    assert seen == [Verdict.OK, Verdict.OK, Verdict.DEGRADED, Verdict.DEGRADED, Verdict.OK]
    (row,) = registry.groups(now_ns=T0 + (4 * TTL + 2) * MS, ttl_ms=TTL)
    assert (row.verdict, row.reason) == (Verdict.STOPPED, "nobody reading: 0 active (2 expired)")


@pytest.mark.redis_server
def test_the_verdict_costs_no_round_trip(redis_client: Any) -> None:
    """`groups()` and a scrape's read send what they send without the verdict (32 and 13
    round trips at 1,000 groups, tests/test_round_trips.py), and every row has its verdict."""
    writer = RedisPresenceRegistry(redis_client)
    writer.heartbeat_many([(f"q{i % 10}", f"g{i}", "c", 0) for i in range(1_000)], now_ns=T0)
    assert trips_of(redis_client, lambda plans: plans.groups(now_ns=T0)) == 32
    assert trips_of(redis_client, lambda plans: plans.groups(now_ns=T0, details=True)) == 13
    rows = writer.groups(now_ns=T0)
    assert {row.verdict for row in rows} == {Verdict.OK}


def test_the_api_and_metrics_say_each_groups_verdict(
    redis_url: str, client: Any, writer: RedisPresenceRegistry, clock: Clock
) -> None:
    """The group JSON (list and page) carries `verdict` and `reason`; ``/metrics`` has one
    series a group, 1, labelled with its verdict. STALLED needs the consumers'
    progress: the group's page reads it, the list and a plain scrape do not."""
    fleet(writer)
    # Every active consumer of "stuck" holds leases, registered long before the budget.
    writer.heartbeat("q", "stuck", "w1", 2, now_ns=T0 - 400_000 * MS)
    writer.heartbeat("q", "stuck", "w1", 2, now_ns=T0)
    listed = {g["group"]: g for g in client.get("/api/v1/groups").json()["groups"]}
    assert {name: (g["verdict"], g["reason"]) for name, g in listed.items()} == {
        name: (verdict.value, reason) for name, (verdict, reason) in EXPECTED.items()
    } | {"stuck": ("OK", "1 active")}
    page = client.get("/api/v1/groups/q/stuck").json()["group"]
    assert page["verdict"] == "STALLED"
    assert page["reason"].startswith("alive but not progressing: the only active consumer")

    def verdicts(test_client: Any) -> dict[str, str]:
        samples = metric_samples(test_client.get("/metrics").text)["redis_presence_group_verdict"]
        out: dict[str, str] = {}
        for labels, value in samples.items():
            named = dict(labels)
            assert (named["queue"], value) == ("q", 1.0)
            assert named["group"] not in out  # one series a group: its verdict's
            out[named["group"]] = named["verdict"]
        return out

    plain = verdicts(client)
    assert plain == {name: g["verdict"] for name, g in listed.items()}
    with make_client(redis_url, clock, stuck_metrics=True) as counting:
        assert verdicts(counting) == plain | {"stuck": "STALLED"}


def test_draining_is_judged_once_rows_say_so() -> None:
    """Reads that do not read the stored values (the plain counts) pass None (never
    DRAINING), and a group whose one missing consumer drained is DRAINING
    (tests/test_v2_reads.py reads it from stored values)."""
    left = GroupFacts(1, 1, 0, 2, None, 0, 1)
    assert judge(left).verdict is Verdict.DRAINING
    assert judge(left._replace(draining_active=None, draining_stale=None)).verdict is (
        Verdict.DEGRADED
    )


def test_one_group_reads_as_its_row_of_groups(registry: Any) -> None:
    """`group(queue, group)`: the row ``groups(capacity=True)`` has for it (a group neither
    tracked nor declared: zeros, STOPPED), for `check`; a bad name is refused naming the
    argument."""
    fleet(registry)
    rows = {row.group: row for row in registry.groups(now_ns=T0, ttl_ms=TTL, capacity=True)}
    for name, row in rows.items():
        assert registry.group("q", name, now_ns=T0, ttl_ms=TTL) == row
    nobody = registry.group("q", "unknown", now_ns=T0, ttl_ms=TTL)
    assert (nobody.active, nobody.stale, nobody.expired, nobody.min_active) == (0, 0, 0, None)
    assert nobody.verdict is Verdict.STOPPED
    with pytest.raises(ValueError, match="group"):
        registry.group("q", "", now_ns=T0)
    with pytest.raises(ValueError, match="ttl_ms"):
        registry.group("q", "g", now_ns=T0, ttl_ms=0)


@pytest.mark.redis_server
def test_one_group_reads_its_keys_alone(redis_client: Any) -> None:
    """No index, no other group, no expired consumer's value: ``ZCARD``, the counts, the
    declaration's ``HMGET`` and the first page of live names in one batch after the shared
    TTL, then a round trip a page of live consumers' values (``HMGET``, with the next page's
    names): 2 + 2 round trips for 1,000 live consumers (pages of 500); 2 + 1 for a group
    with no live consumer."""
    writer = RedisPresenceRegistry(redis_client)
    writer.heartbeat_many([("q", "g", f"c{i}", 0) for i in range(1_000)], now_ns=T0)
    writer.heartbeat_many([("q", "gone", f"c{i}", 0) for i in range(1_000)], now_ns=T0)
    writer.heartbeat("q", "other", "c", 0, now_ns=T0)
    assert trips_of(redis_client, lambda plans: plans.group("q", "g", now_ns=T0)) == 4
    later = T0 + 3_600_000 * MS  # every consumer of "gone" expired: none of theirs is read
    assert trips_of(redis_client, lambda plans: plans.group("q", "gone", now_ns=later)) == 2
    redis_client.config_resetstat()
    assert writer.group("q", "g", now_ns=T0).active == 1_000
    commands = {name.removeprefix("cmdstat_") for name in redis_client.info("commandstats")}
    assert {"zcard", "zcount", "hmget", "zrangebyscore"} <= commands
    assert not commands & {"hgetall", "hscan", "zrangebylex", "smembers", "scan"}


def test_the_groups_table_marks_each_verdict_but_ok(
    client: Any, writer: RedisPresenceRegistry
) -> None:
    """A pill with the verdict, its reason as the title (escaped), on the server's page."""
    fleet(writer)
    page = client.get("/").text
    assert (
        '<span class="pill verdict degraded" title="below its minimum: 1 active, at least 2 '
        'wanted">DEGRADED</span>' in page
    )
    assert page.count('class="pill verdict stopped"') == 2  # gone, never
    assert page.count('class="pill verdict ') == 4  # below, stale, gone, never: not OK


def test_the_pages_script_judges_moved_counts_as_the_library(tmp_path: Any) -> None:
    """The overview's script judges a group whose counts the events moved (dashboard.js's
    `countsVerdict`): the same verdict and words as `judge` for every count around the
    boundaries, declared or not."""
    import json
    import re
    import subprocess
    from pathlib import Path

    from binaries import need_binary

    node = need_binary("node")
    script = Path(__file__).parent.parent / "redis_presence/web/static/dashboard.js"
    source = script.read_text(encoding="utf-8")
    found = re.search(r"\n  function countsVerdict\(g\) \{\n.*?\n  \}\n", source, re.S)
    assert found, "countsVerdict in dashboard.js"
    facts = [
        GroupFacts(a, s, e, m)
        for a in range(4)
        for s in range(3)
        for e in range(3)
        for m in (None, 1, 2, 3)
    ]
    cases = [{"active": a, "stale": s, "expired": e, "min_active": m} for a, s, e, m, *_ in facts]
    program = tmp_path / "verdicts.js"
    program.write_text(
        found[0] + f"console.log(JSON.stringify({json.dumps(cases)}.map(countsVerdict)));\n",
        encoding="utf-8",
    )
    done = subprocess.run(
        [node, str(program)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    for case, said in zip(facts, json.loads(done.stdout), strict=True):
        assert said == judge(case).to_dict(), case

"""`redis-presence check`: every exit code, as a real process against a real redis-server."""

from __future__ import annotations

import json
import subprocess

import pytest
import redis
from servers import HOST, MakeRedisServer, free_port
from webservers import ROOT, cli_argv

from redis_presence import RedisPresenceRegistry

MS = 1_000_000
NOW = 1_796_000_000_000 * MS
TTL = ["--ttl-ms", "10000", "--now-ns", str(NOW)]


def check(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cli_argv("--url", url, *TTL, "check", *args),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def fleet(redis_url: str) -> str:
    registry = RedisPresenceRegistry.from_url(redis_url)
    registry.heartbeat("orders", "billing", "w1", now_ns=NOW - 1_000 * MS)
    registry.heartbeat("orders", "billing", "w2", now_ns=NOW - 10_000 * MS)  # active, just
    registry.heartbeat("orders", "billing", "w3", now_ns=NOW - 10_001 * MS)  # stale
    registry.heartbeat("emails", "sender", "m1", now_ns=NOW - 50_000 * MS)  # expired
    registry.close()
    return redis_url


def test_exit_0_when_every_group_has_enough(fleet: str) -> None:
    """--below-only: the minimum alone, as before verdicts (the stale w3 passes)."""
    done = check(
        fleet, "--below-only", "--queue", "orders", "--group", "billing", "--min-active", "2"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "OK   queue 'orders' group 'billing': 2 active (at least 2 wanted)\n"
    assert done.stderr == "redis-presence: TTL 10000 ms (--ttl-ms)\n"  # where the TTL came from


def test_exit_1_when_one_group_has_too_few(fleet: str) -> None:
    done = check(
        fleet,
        "--below-only",
        "--queue",
        "orders",
        "--group",
        "billing",
        "--queue",
        "emails",
        "--group",
        "sender",
        "--queue",
        "never",
        "--group",
        "seen",
    )
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "OK   queue 'orders' group 'billing': 2 active (at least 1 wanted)",
        "FAIL queue 'emails' group 'sender': 0 active (at least 1 wanted)",
        "FAIL queue 'never' group 'seen': 0 active (at least 1 wanted)",
    ]
    assert done.stderr == "redis-presence: TTL 10000 ms (--ttl-ms)\n"


def test_min_active_once_per_pair_and_json(fleet: str) -> None:
    done = check(
        fleet,
        "--below-only",
        "--queue",
        "orders",
        "--group",
        "billing",
        "--min-active",
        "3",
        "--queue",
        "emails",
        "--group",
        "sender",
        "--min-active",
        "0",
        "--format",
        "json",
    )
    assert done.returncode == 1
    assert json.loads(done.stdout) == [
        {"queue": "orders", "group": "billing", "active": 2, "min_active": 3, "ok": False},
        {"queue": "emails", "group": "sender", "active": 0, "min_active": 0, "ok": True},
    ]


def test_exit_2_for_bad_usage(fleet: str) -> None:
    for args in (
        [],
        ["--queue", "orders"],
        [
            "--queue",
            "a",
            "--group",
            "b",
            "--queue",
            "c",
            "--group",
            "d",
            *["--min-active", "1"] * 3,
        ],
        ["--queue", "a", "--group", "b", "--min-active", "-1"],
        ["--queue", "a", "--group", "b", "--format", "xml"],
    ):
        done = check(fleet, *args)
        assert done.returncode == 2, args
        assert done.stdout == ""
        assert done.stderr.startswith("Error: ")
        assert done.stderr.count("\n") == 1


def test_exit_3_when_redis_cannot_be_reached() -> None:
    done = check(f"redis://:s3cret@{HOST}:{free_port()}/0", "--queue", "q", "--group", "g")
    assert done.returncode == 3
    assert done.stderr.startswith("Error: cannot reach Redis")
    assert "s3cret" not in done.stderr + done.stdout
    assert done.stdout == ""


def test_exit_4_when_redis_refuses_the_password(make_redis_server: MakeRedisServer) -> None:
    server = make_redis_server(requirepass="right")
    done = check(f"redis://:n0t-r1ght@{HOST}:{server.port}/0", "--queue", "q", "--group", "g")
    assert done.returncode == 4
    assert "n0t-r1ght" not in done.stderr  # (the message itself says "wrong user name")
    assert done.stderr.count("\n") == 1


def test_exit_5_when_the_prefix_holds_foreign_data(
    redis_url: str, redis_client: redis.Redis
) -> None:
    redis_client.rpush("presence:{q}:g:hb", "not-a-sorted-set")  # the group's own key
    done = check(redis_url, "--queue", "q", "--group", "g")
    assert done.returncode == 5
    assert "WRONGTYPE" in done.stderr


def test_check_reads_no_consumer(redis_client: redis.Redis, fleet: str) -> None:
    redis_client.config_resetstat()
    assert check(fleet, "--queue", "orders", "--group", "billing").returncode == 10  # stale w3
    commands = {name.removeprefix("cmdstat_") for name in redis_client.info("commandstats")}
    assert "zcount" in commands  # the named group's counts ...
    assert not commands & {"hgetall", "hscan", "zrangebylex", "smembers", "scan"}  # ... alone


# -- check --consumer: a per-worker probe ----------------------------------------------


def test_consumer_probe_exit_0_when_active_1_otherwise(fleet: str) -> None:
    probe = ["--queue", "orders", "--group", "billing", "--consumer"]
    done = check(fleet, *probe, "w1")
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "OK   consumer 'w1' of queue 'orders' group 'billing': active, last beat 1000 ms ago\n"
    )
    assert done.stderr == "redis-presence: TTL 10000 ms (--ttl-ms)\n"
    stale = check(fleet, *probe, "w3")
    assert stale.returncode == 1
    assert stale.stdout.startswith("FAIL consumer 'w3' of queue 'orders' group 'billing': stale")
    gone = check(fleet, *probe, "nobody")
    assert gone.returncode == 1
    assert gone.stdout.endswith(": not tracked\n")
    expired = check(fleet, "--queue", "emails", "--group", "sender", "--consumer", "m1")
    assert expired.returncode == 1
    assert "expired, last beat 50000 ms ago" in expired.stdout


def test_consumer_probe_json_and_usage(fleet: str) -> None:
    done = check(
        fleet, "--queue", "orders", "--group", "billing", "--consumer", "w2", "--format", "json"
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "queue": "orders",
        "group": "billing",
        "consumer": "w2",
        "state": "active",
        "last_seen_age_ms": 10_000,
        "lease_count": 0,
        "stuck": False,
        "ok": True,
    }
    for args in (
        ["--consumer", "w1"],
        ["--consumer", "w1", "--queue", "a", "--group", "b", "--queue", "c", "--group", "d"],
        ["--consumer", "w1", "--queue", "a", "--group", "b", "--min-active", "2"],
        ["--queue", "a", "--group", "b", "--stuck"],
        ["--consumer", "w1", "--queue", "a", "--group", "b", "--unreachable", "maybe"],
    ):
        refused = check(fleet, *args)
        assert refused.returncode == 2, args
        assert refused.stderr.startswith("Error: ")
        assert refused.stderr.count("\n") == 1


def test_consumer_probe_stuck_fails_only_with_stuck(redis_url: str) -> None:
    registry = RedisPresenceRegistry.from_url(redis_url)
    registry.set_stuck_after(1_000, queue="orders", group="billing")
    registry.heartbeat("orders", "billing", "busy", 3, now_ns=NOW - 5_000 * MS)  # registered
    registry.heartbeat("orders", "billing", "busy", 3, now_ns=NOW - 100 * MS)  # no progress
    registry.close()
    probe = ["--queue", "orders", "--group", "billing", "--consumer", "busy"]
    assert check(redis_url, *probe).returncode == 0  # active: alive enough for liveness
    done = check(redis_url, *probe, "--stuck")
    assert done.returncode == 1
    assert done.stdout.startswith("FAIL consumer 'busy'")
    assert done.stdout.endswith("active, last beat 100 ms ago, stuck with 3 leases\n")


def test_consumer_probe_reads_that_consumer_alone(redis_client: redis.Redis, fleet: str) -> None:
    redis_client.config_resetstat()
    done = check(fleet, "--queue", "orders", "--group", "billing", "--consumer", "w1")
    assert done.returncode == 0, done.stderr
    commands = {name.removeprefix("cmdstat_") for name in redis_client.info("commandstats")}
    assert "hmget" in commands
    assert not commands & {"hgetall", "hscan", "zrangebylex", "zcount", "smembers", "scan"}


@pytest.mark.parametrize("what", [["--consumer", "w1"], []])
def test_unreachable_ok_exits_0_with_a_line_fail_exits_3(what: list[str]) -> None:
    url = f"redis://:s3cret@{HOST}:{free_port()}/0"
    args = ["--queue", "orders", "--group", "billing", *what]
    ok = check(url, *args, "--unreachable", "ok")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == ""
    assert ok.stderr.startswith("redis-presence: cannot reach Redis")
    assert ok.stderr.endswith("; --unreachable ok: exit 0\n")
    assert ok.stderr.count("\n") == 1
    assert "s3cret" not in ok.stderr
    for fail in (check(url, *args, "--unreachable", "fail"), check(url, *args)):
        assert fail.returncode == 3
        assert fail.stderr.startswith("Error: cannot reach Redis")


def test_a_named_group_is_checked_against_its_declared_minimum(
    redis_client: redis.Redis, fleet: str
) -> None:
    registry = RedisPresenceRegistry.from_url(fleet)
    registry.expect("orders", "billing", 3)  # 2 active: below
    registry.close()
    done = check(fleet, "--queue", "orders", "--group", "billing")
    assert done.returncode == 1
    assert done.stdout == (
        "DEGRADED queue 'orders' group 'billing': below its minimum: 2 active, at least 3 "
        "wanted; 1 consumer stale (missed beats without draining)\n"
    )
    # An explicit --min-active still wins (the stale w3: DEGRADED, 10); undeclared wants 1.
    assert (
        check(fleet, "--queue", "orders", "--group", "billing", "--min-active", "2").returncode
        == 10
    )
    redis_client.config_resetstat()
    both = check(fleet, "--queue", "orders", "--group", "billing", "--queue", "q", "--group", "g")
    assert both.stdout.splitlines()[1] == (
        "STOPPED  queue 'q' group 'g': nobody reading: no consumer, at least 1 wanted"
    )
    commands = {name.removeprefix("cmdstat_") for name in redis_client.info("commandstats")}
    assert "hmget" in commands  # each named group's declaration, read alone
    assert not commands & {"hgetall", "hscan", "zrangebylex", "smembers", "scan"}


# -- the verdict: an exit code per verdict ------------------------------------------------


def test_exit_code_per_verdict(redis_url: str, redis_client: redis.Redis) -> None:
    """0 for OK (and DRAINING), 1 below the minimum (STOPPED is), 10 DEGRADED, 11 STALLED
    (with --progress: the consumers' rows), 12 STOPPED at a minimum of 0; the worst wins,
    1 first."""
    registry = RedisPresenceRegistry.from_url(redis_url)
    beat = registry.heartbeat
    beat("q", "ok", "w1", now_ns=NOW)
    beat("q", "stale", "w1", now_ns=NOW)
    beat("q", "stale", "w2", now_ns=NOW - 10_001 * MS)
    beat("q", "stalled", "w1", 2, now_ns=NOW - 400_000 * MS)  # leases, no progress since
    beat("q", "stalled", "w1", 2, now_ns=NOW)
    beat("q", "gone", "w1", now_ns=NOW - 10_001 * MS)
    registry.close()

    def code(*pairs: str, extra: tuple[str, ...] = ()) -> tuple[int, list[str]]:
        named = [arg for name in pairs for arg in ("--queue", "q", "--group", name)]
        done = check(redis_url, *extra, *named)
        assert done.stderr.startswith("redis-presence: TTL"), done.stderr
        return done.returncode, [line.split()[0] for line in done.stdout.splitlines()]

    assert code("ok") == (0, ["OK"])
    assert code("ok", "stale") == (10, ["OK", "DEGRADED"])
    assert code("stalled") == (0, ["OK"])  # counts alone: its progress is not read
    assert code("stalled", extra=("--progress",)) == (11, ["STALLED"])
    assert code("stale", "stalled", extra=("--progress",)) == (11, ["DEGRADED", "STALLED"])
    assert code("gone") == (1, ["STOPPED"])  # nobody reading: below its minimum of 1
    assert code("gone", "stalled", extra=("--progress",)) == (1, ["STOPPED", "STALLED"])
    assert code("gone", extra=("--min-active", "0")) == (12, ["STOPPED"])
    assert code("gone", extra=("--below-only", "--min-active", "0")) == (0, ["OK"])
    done = check(redis_url, "--progress", "--format", "json", "--queue", "q", "--group", "stale")
    assert json.loads(done.stdout) == [
        {
            "queue": "q",
            "group": "stale",
            "active": 1,
            "min_active": 1,
            "ok": False,
            "stale": 1,
            "expired": 0,
            "stuck": 0,
            "verdict": "DEGRADED",
            "reason": "1 consumer stale (missed beats without draining)",
        }
    ]
    for bad in (["--progress", "--below-only"], ["--consumer", "w1", "--progress"]):
        refused = check(redis_url, *bad, "--queue", "q", "--group", "ok")
        assert refused.returncode == 2, bad
        assert refused.stderr.count("\n") == 1


def test_progress_reads_the_groups_consumers_alone(redis_client: redis.Redis, fleet: str) -> None:
    redis_client.config_resetstat()
    assert check(fleet, "--progress", "--queue", "orders", "--group", "billing").returncode == 10
    commands = {name.removeprefix("cmdstat_") for name in redis_client.info("commandstats")}
    assert "hgetall" in commands  # the named group's rows ...
    assert not commands & {"hscan", "zrangebylex", "smembers", "scan"}  # ... alone

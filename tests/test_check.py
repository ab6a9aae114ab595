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
    done = check(fleet, "--queue", "orders", "--group", "billing", "--min-active", "2")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "OK   queue 'orders' group 'billing': 2 active (at least 2 wanted)\n"
    assert done.stderr == "redis-presence: TTL 10000 ms (--ttl-ms)\n"  # where the TTL came from


def test_exit_1_when_one_group_has_too_few(fleet: str) -> None:
    done = check(
        fleet,
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
    done = check(f"redis://:wrong@{HOST}:{server.port}/0", "--queue", "q", "--group", "g")
    assert done.returncode == 4
    assert "wrong" not in done.stderr.replace("Redis refused access", "")
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
    assert check(fleet, "--queue", "orders", "--group", "billing").returncode == 0
    commands = {name.removeprefix("cmdstat_") for name in redis_client.info("commandstats")}
    assert "zcount" in commands  # the named group's count ...
    assert not commands & {"hgetall", "hscan", "zrangebylex", "smembers", "scan"}  # ... alone

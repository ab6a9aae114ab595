"""`--read-only` (and ``REDIS_PRESENCE_READ_ONLY``): reads served by a replica with plain
commands, writes refused before Redis is opened (exit 6), a write that reaches a replica
refused in one line, and the README's strict reader role."""

from __future__ import annotations

import pytest
from cli_invoke import NOW, invoke, one_error_line, seed
from servers import MakeRedisServer, RedisServer
from test_security import ACL_STRICT_READER, READER_PASSWORD, READER_USER

import redis_presence
from redis_presence import RedisPresenceRegistry
from redis_presence.contract import PresenceRegistry


@pytest.fixture
def replica(make_redis_server: MakeRedisServer) -> RedisServer:
    """A synced replica of a primary that holds `seed`'s four consumers."""
    primary = make_redis_server()
    replica = make_redis_server(replicaof=primary)
    replica.wait_replica_synced()
    with RedisPresenceRegistry.from_url(primary.url) as writer:
        seed(writer)
    primary.wait_for_replicas(1)
    return replica


READS = [
    ["ls", "--format", "json"],
    ["snapshot", "--state", "expired"],
    ["counts", "--format", "csv"],
    ["prune", "--dry-run"],
    ["watch", "--iterations", "1"],
]


def test_read_only_reads_from_a_replica_with_plain_commands(replica: RedisServer) -> None:
    primary = replica.replicaof
    assert primary is not None
    with replica.client() as client:
        client.config_resetstat()
        for args in READS:
            expected = invoke(["--url", primary.url, "--now-ns", str(NOW), *args])
            for how in (["--read-only"], []):
                env = {} if how else {"REDIS_PRESENCE_READ_ONLY": "1"}
                result = invoke(["--url", replica.url, *how, "--now-ns", str(NOW), *args], env=env)
                assert result.exit_code == 0, result.output
                if args[0] != "watch":  # its title carries the wall clock
                    assert result.stdout == expected.stdout, args
        stats = client.info("commandstats")
        assert stats["cmdstat_zrangebylex"]["calls"] > 0
        assert not {"cmdstat_evalsha", "cmdstat_evalsha_ro"} & set(stats)  # reads need no script


@pytest.mark.parametrize(
    "args",
    [
        ["heartbeat", "orders", "billing", "new"],
        ["deregister", "orders", "billing", "fresh"],
        ["prune"],
    ],
    ids=" ".join,
)
def test_writes_to_a_replica_are_one_line_and_exit_6(replica: RedisServer, args: list[str]) -> None:
    """Without --read-only the write reaches the replica, which answers READONLY."""
    result = invoke(["--url", replica.url, "--now-ns", str(NOW + 10**15), *args])
    line = one_error_line(result)
    assert result.exit_code == 6, line
    assert "read-only replica" in line
    with RedisPresenceRegistry.from_url(replica.url, read_only=True) as reader:
        assert len(reader) == 4


@pytest.mark.parametrize(
    "args",
    [
        ["heartbeat", "q", "g", "c"],
        ["heartbeat", "q", "g", "c", "--lease-count", "2"],
        ["deregister", "q", "g", "c"],
        ["drain", "q", "g", "c"],
        ["prune"],
        ["prune", "--format", "json"],
        ["demo-broker", "--name", "b"],
    ],
    ids=" ".join,
)
@pytest.mark.parametrize("how", ["flag", "env"])
def test_read_only_refuses_writes_before_opening_redis(args: list[str], how: str) -> None:
    def never(url: str, prefix: str, read_only: bool) -> PresenceRegistry:
        raise AssertionError("a refused write may not open a registry")

    flag, env = (
        (["--read-only"], {}) if how == "flag" else ([], {"REDIS_PRESENCE_READ_ONLY": "yes"})
    )
    result = invoke([*flag, *args], obj=never, env=env)
    line = one_error_line(result)
    assert result.exit_code == 6
    assert line == (
        f"Error: {args[0]} writes to Redis, but --read-only (or REDIS_PRESENCE_READ_ONLY) is "
        "set: only ls, counts, watch, events, ttl get and prune --dry-run run read-only"
    )


@pytest.mark.parametrize(
    ("env", "args", "read_only"),
    [
        ({}, [], False),
        ({}, ["--read-only"], True),
        ({"REDIS_PRESENCE_READ_ONLY": "1"}, [], True),
        ({"REDIS_PRESENCE_READ_ONLY": "true"}, [], True),
        ({"REDIS_PRESENCE_READ_ONLY": "0"}, [], False),
        ({"REDIS_PRESENCE_READ_ONLY": ""}, [], False),
        ({"REDIS_PRESENCE_READ_ONLY": "0"}, ["--read-only"], True),
    ],
)
def test_read_only_reaches_the_registry_factory(
    env: dict[str, str], args: list[str], read_only: bool
) -> None:
    seen: list[bool] = []

    def factory(url: str, prefix: str, read_only: bool) -> PresenceRegistry:
        seen.append(read_only)
        return redis_presence.ConsumerPresenceRegistry()

    result = invoke([*args, "counts"], obj=factory, env=env)
    assert result.exit_code == 0, result.output
    assert seen == [read_only]


def test_bad_read_only_value_from_the_environment_is_a_usage_error() -> None:
    result = invoke(["ls"], env={"REDIS_PRESENCE_READ_ONLY": "maybe"})
    assert "--read-only" in one_error_line(result)
    assert result.exit_code == 2


def test_strict_reader_role_reads_with_or_without_read_only(
    make_redis_server: MakeRedisServer,
) -> None:
    """The README's `%R~` reader: every read is plain read commands, so `ls`, `counts` and
    `prune --dry-run` are served with and without --read-only."""
    server = make_redis_server()
    with server.client() as admin:
        admin.execute_command(*ACL_STRICT_READER.split())
        seed(RedisPresenceRegistry(admin))
    url = f"redis://{READER_USER}:{READER_PASSWORD}@127.0.0.1:{server.port}/0"
    for args in (["ls"], ["counts"], ["prune", "--dry-run"]):
        expected = invoke(["--url", server.url, "--now-ns", str(NOW), *args]).stdout
        plain = invoke(["--url", url, "--now-ns", str(NOW), *args])
        assert plain.exit_code == 0, plain.output
        assert plain.stdout == expected
        served = invoke(["--url", url, "--read-only", "--now-ns", str(NOW), *args])
        assert served.exit_code == 0, served.output
        assert served.stdout == expected
        assert READER_PASSWORD not in plain.output + served.output

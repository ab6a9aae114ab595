"""`redis-presence doctor` (issue 16, item 3): each finding against a real server configured
to trigger it, the ACL roles as the README gives them, and proof that doctor writes nothing."""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest
import redis
from backends import dump
from cli_invoke import invoke, one_error_line
from clusters import RedisClusterProcesses
from conftest import RUN_COUNTS
from proxy import Proxy
from redis.backoff import NoBackoff
from redis.retry import Retry
from servers import MakeRedisServer, RedisServer, free_port
from test_security import (
    ACL_BROKER,
    ACL_JANITOR,
    ACL_LINES,
    ACL_READER,
    ACL_STRICT_READER,
    BROKER_PASSWORD,
    BROKER_USER,
    JANITOR_PASSWORD,
    JANITOR_USER,
    READER_PASSWORD,
    READER_USER,
)
from waiting import wait_until

from redis_presence import (
    ConsumerPresenceRegistry,
    PresenceAuthError,
    PresenceConnectionError,
    RedisPresenceRegistry,
)
from redis_presence.cli.commands.doctor import EXIT_FAILURES, EXIT_WARNINGS
from redis_presence.doctor import (
    ROLES,
    TESTED_RELEASES,
    Finding,
    Status,
    diagnose,
    version_finding,
    worst,
)

T0 = 1_796_000_000_123_456_000
HEALTHY = ["--appendonly", "yes", "--maxmemory-policy", "noeviction"]

pytestmark = pytest.mark.timeout(60)


def client_of(server: RedisServer, **kwargs: Any) -> redis.Redis:
    return server.client(retry=Retry(NoBackoff(), 0), socket_timeout=5, **kwargs)


def findings_of(server: RedisServer, **kwargs: Any) -> dict[str, Finding]:
    """doctor's findings by check (one server: each check once)."""
    with client_of(server, **kwargs) as client:
        found = diagnose(RedisPresenceRegistry(client))
    by_check = {f.check: f for f in found}
    assert len(by_check) == len(found), found
    RUN_COUNTS["doctor: findings made against real servers"] += len(found)
    return by_check


def statuses(found: dict[str, Finding]) -> dict[str, Status]:
    return {check: f.status for check, f in found.items()}


def make_users(server: RedisServer, *lines: str) -> None:
    with client_of(server) as admin:
        for line in lines:
            assert admin.execute_command(*shlex.split(line)) in (b"OK", True)


def written(server: RedisServer) -> tuple[int, int, dict[bytes, Any]]:
    """What would change if anything were written: the server's count of changes, its
    cached scripts, and every key."""
    with client_of(server) as admin:
        return (
            int(admin.info("persistence")["rdb_changes_since_last_save"]),
            int(admin.info("memory")["number_of_cached_scripts"]),
            dump(admin),
        )


# -- a healthy deployment, and the CLI ----------------------------------------------------


@pytest.fixture
def healthy(make_redis_server: MakeRedisServer) -> RedisServer:
    return make_redis_server(extra_args=HEALTHY)


def test_a_healthy_deployment_has_nothing_wrong(healthy: RedisServer) -> None:
    found = findings_of(healthy)
    assert statuses(found) == {
        "memory-policy": Status.OK,
        "memory-use": Status.OK,
        "persistence": Status.OK,
        "version": Status.OK,
        "acl-broker": Status.OK,
        "acl-reader": Status.OK,
        "acl-janitor": Status.OK,
        "latency": Status.OK,
        "replication": Status.OK,
        "legacy-index": Status.OK,
        "undecodable": Status.OK,
        "conflicts": Status.OK,
    }
    assert (
        found["persistence"].summary == "AOF is on (appendfsync everysec): a restart keeps presence"
    )
    assert "noeviction" in found["memory-policy"].summary
    assert found["version"].summary.startswith("Redis 7.0.")
    assert "(ACL DRYRUN)" in found["acl-broker"].summary  # the default user may dry-run
    assert found["latency"].summary.startswith("5 round trips (PING): median ")


def test_cli_doctor_prints_each_finding_and_exits_0_when_nothing_is_wrong(
    healthy: RedisServer,
) -> None:
    result = invoke(["--url", healthy.url, "doctor"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"redis-presence doctor: prefix 'presence' at {healthy.url}"
    assert lines[-1] == "nothing wrong found"
    findings = [line for line in lines[1:-1] if not line.startswith(" ")]  # not wrapped
    assert [line.split()[0] for line in findings] == ["OK"] * 12
    assert result.stderr == ""
    as_json = invoke(["--url", healthy.url, "doctor", "--format", "json"])
    report = json.loads(as_json.stdout)
    assert report["status"] == "ok"
    assert {f["check"] for f in report["findings"]} >= {"memory-policy", "persistence", "latency"}
    assert set(report["findings"][0]) == {"check", "status", "summary", "advice", "node"}


def test_cli_doctor_exit_codes_say_how_bad(make_redis_server: MakeRedisServer) -> None:
    warned = make_redis_server()  # no persistence: a warning
    result = invoke(["--url", warned.url, "doctor"])
    assert result.exit_code == EXIT_WARNINGS == 8, result.output
    assert result.stdout.splitlines()[-1] == "0 failures, 1 warning"
    assert "WARN  persistence" in result.stdout
    assert "-> CONFIG SET appendonly yes" in result.stdout
    failed = make_redis_server(extra_args=["--maxmemory-policy", "allkeys-lru"])
    result = invoke(["--url", failed.url, "doctor", "--format", "json"])
    assert result.exit_code == EXIT_FAILURES == 9, result.output
    assert json.loads(result.stdout)["status"] == "fail"


def test_cli_doctor_cannot_reach_or_log_in_is_one_line(
    make_redis_server: MakeRedisServer,
) -> None:
    unreachable = invoke(["--url", f"redis://127.0.0.1:{free_port()}/0", "doctor"])
    assert unreachable.exit_code == 3
    assert "cannot reach Redis" in one_error_line(unreachable)
    locked = make_redis_server(requirepass="s3cret-pass")
    url = f"redis://:not-the-password@127.0.0.1:{locked.port}/0"
    refused = invoke(["--url", url, "doctor"])
    assert refused.exit_code == 4
    line = one_error_line(refused)
    assert "WRONGPASS" in line
    assert "not-the-password" not in line
    with client_of(locked, password="wrong") as client, pytest.raises(PresenceAuthError):
        diagnose(RedisPresenceRegistry(client))


def test_doctor_runs_read_only_and_refuses_a_registry_without_redis(healthy: RedisServer) -> None:
    result = invoke(["--url", healthy.url, "--read-only", "doctor"])
    assert result.exit_code == 0, result.output
    in_process = invoke(["doctor"], obj=lambda url, prefix, ro: ConsumerPresenceRegistry())
    assert in_process.exit_code == 2
    assert "keeps nothing in Redis" in one_error_line(in_process)


# -- memory -------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["allkeys-lru", "allkeys-lfu", "allkeys-random"])
def test_an_evicting_policy_is_a_failure(make_redis_server: MakeRedisServer, policy: str) -> None:
    server = make_redis_server(extra_args=["--appendonly", "yes", "--maxmemory-policy", policy])
    found = findings_of(server)
    finding = found["memory-policy"]
    assert finding.status is Status.FAIL
    assert f"maxmemory-policy is {policy}" in finding.summary
    assert "vanish" in finding.summary
    assert finding.advice.startswith("CONFIG SET maxmemory-policy noeviction")
    assert worst(found.values()) is Status.FAIL


@pytest.mark.parametrize("policy", ["volatile-lru", "volatile-ttl", "noeviction"])
def test_policies_that_keep_presence_keys_are_fine(
    make_redis_server: MakeRedisServer, policy: str
) -> None:
    server = make_redis_server(extra_args=["--maxmemory-policy", policy])
    assert findings_of(server)["memory-policy"].status is Status.OK


def fill_to(client: redis.Redis, share: float) -> None:
    """Add 16 KiB ballast keys until used memory is at least `share` of maxmemory."""
    maxmemory = int(str(client.config_get("maxmemory")["maxmemory"]))
    n = int(client.dbsize())
    while int(client.info("memory")["used_memory"]) < share * maxmemory:
        try:
            client.set(f"ballast:{n}", b"x" * 16_384)
        except redis.exceptions.OutOfMemoryError:
            return
        n += 1


def test_memory_close_to_full_is_a_warning_and_full_a_failure(
    make_redis_server: MakeRedisServer,
) -> None:
    server = make_redis_server(extra_args=[*HEALTHY, "--maxmemory", "8mb"])
    with client_of(server) as client:
        fill_to(client, 0.93)
    near = findings_of(server)["memory-use"]
    assert near.status is Status.WARN, near
    assert "of maxmemory 8.0 MiB" in near.summary
    with client_of(server) as client:  # a smaller limit than what is used now
        client.config_set("maxmemory", "6mb")
    full = findings_of(server)["memory-use"]
    assert full.status is Status.FAIL, full
    assert "refuses every write" in full.summary


# -- persistence --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "status", "words"),
    [
        ([], Status.WARN, "no persistence (AOF off, no RDB snapshots)"),
        (["--save", "900 1 300 10"], Status.WARN, "RDB snapshots only (save 900 1 300 10)"),
        (["--appendonly", "yes", "--appendfsync", "no"], Status.NOTE, "appendfsync no"),
        (["--appendonly", "yes", "--appendfsync", "always"], Status.OK, "(appendfsync always)"),
    ],
    ids=["none", "rdb-only", "aof-fsync-no", "aof-always"],
)
def test_persistence(
    make_redis_server: MakeRedisServer, args: list[str], status: Status, words: str
) -> None:
    finding = findings_of(make_redis_server(extra_args=args))["persistence"]
    assert finding.status is status, finding
    assert words in finding.summary


def test_checks_a_user_may_not_run_are_skipped_not_failed(healthy: RedisServer) -> None:
    make_users(healthy, ACL_BROKER)
    found = findings_of(healthy, username=BROKER_USER, password=BROKER_PASSWORD)
    for check in ("memory-policy", "persistence", "version", "replication"):
        assert found[check].status is Status.SKIP, found[check]
    assert "CONFIG GET" in found["memory-policy"].summary
    assert found["version"].status is Status.SKIP
    assert found["latency"].summary.startswith("5 round trips (TIME)")  # no PING in the roles
    # With INFO alone, memory and AOF come from INFO (the RDB schedule stays unknown).
    make_users(healthy, ACL_BROKER.replace(BROKER_USER, "infoer") + " +info")
    found = findings_of(healthy, username="infoer", password=BROKER_PASSWORD)
    assert found["memory-policy"].status is Status.OK
    assert found["persistence"].status is Status.OK  # AOF on, from INFO's aof_enabled


# -- version ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "words"),
    [
        ("redis_server", "Redis 7.0."),
        ("redis8_server", "Redis 8.2."),
        ("valkey9_server", "Valkey 9.1."),
    ],
    ids=["redis-7", "redis-8", "valkey-9"],
)
def test_each_tested_release_is_ok(
    request: pytest.FixtureRequest, fixture: str, words: str
) -> None:
    """doctor on each server of the version matrix (README: Tested versions)."""
    server: RedisServer = request.getfixturevalue(fixture)
    finding = findings_of(server)["version"]
    assert finding.status is Status.OK, finding
    assert finding.summary.startswith(words)


def test_releases_the_machine_cannot_start() -> None:
    """Older, newer and other servers, through the same function."""
    assert TESTED_RELEASES == {"redis": ("7.0", "8.2"), "valkey": ("9.1",)}
    assert version_finding("7.0.15").status is Status.OK
    assert version_finding("7.2.4").status is Status.NOTE
    assert "is not a tested release (tested: Redis 7.0, 8.2)" in version_finding("8.0.1").summary
    assert version_finding("8.4.0").status is Status.NOTE
    assert version_finding("6.2.14").status is Status.WARN
    assert version_finding("5.0.7").status is Status.FAIL
    assert version_finding("9.1.2", "valkey").summary == "Valkey 9.1.2 (tested: Valkey 9.1)"
    assert version_finding("8.1.1", "valkey").status is Status.WARN
    assert version_finding("7.4.0", "dragonfly").status is Status.NOTE
    assert version_finding(None).status is Status.SKIP


# -- ACL rights ---------------------------------------------------------------------------


def test_the_roles_are_the_readme_s_tested_lines() -> None:
    def commands(line: str) -> tuple[str, ...]:
        return tuple(word[1:] for word in line.split() if word.startswith("+"))

    readme = {
        "broker": commands(ACL_BROKER),
        "reader": commands(ACL_READER),
        "janitor": commands(ACL_JANITOR),
    }
    assert readme == ROLES
    assert commands(ACL_STRICT_READER) == ROLES["reader"]
    assert len(ACL_LINES) == 5  # and the operator's, which declares groups (no doctor role)


@pytest.fixture
def acl_server(healthy: RedisServer) -> RedisServer:
    make_users(healthy, ACL_BROKER, ACL_READER, ACL_JANITOR)
    owner = client_of(healthy)
    registry = RedisPresenceRegistry(owner)
    registry.heartbeat("orders", "billing", "w1", 1, now_ns=T0)
    owner.close()
    return healthy


def lacking(finding: Finding) -> list[str]:
    return finding.summary.split("it lacks ")[1].split(" (")[0].split()


def test_each_role_user_is_told_what_it_lacks_for_the_others(acl_server: RedisServer) -> None:
    before = written(acl_server)
    broker = findings_of(acl_server, username=BROKER_USER, password=BROKER_PASSWORD)
    assert broker["acl-broker"].status is Status.OK
    assert "(probes that change nothing)" in broker["acl-broker"].summary
    assert "without" not in broker["acl-broker"].summary  # the probes found copy and rename
    assert lacking(broker["acl-reader"]) == [
        "zrangebylex",
        "hlen",
        "hgetall",
        "hscan",
        "zcount",
        "zrangebyscore",
        "zmscore",
        "hmget",
        "xrange",
        "xinfo|stream",
    ]
    assert lacking(broker["acl-janitor"]) == [
        "zrangebylex",
        "zrangebyscore",
        "zmscore",
        "hlen",
        "hgetall",
        "hscan",
        "hmget",
    ]
    assert broker["acl-janitor"].advice.endswith(
        "+zrangebylex +zrangebyscore +zmscore +hlen +hgetall +hscan +hmget)"
    )
    reader = findings_of(acl_server, username=READER_USER, password=READER_PASSWORD)
    assert reader["acl-reader"].status is Status.OK
    assert lacking(reader["acl-broker"]) == [
        "evalsha",
        "script|load",
        "type",
        "exists",
        "hget",
        "hset",
        "zadd",
        "zscore",
        "set",
        "zrem",
        "hdel",
        "del",
        "xadd",
        "pexpire",
    ]
    janitor = findings_of(acl_server, username=JANITOR_USER, password=JANITOR_PASSWORD)
    assert statuses(janitor)["acl-broker"] is Status.OK
    assert statuses(janitor)["acl-janitor"] is Status.OK
    assert lacking(janitor["acl-reader"]) == ["zcount", "xrange", "xinfo|stream"]
    assert "acl" not in broker  # each plays a role
    # Not one write, not one script loaded, not one key changed.
    assert written(acl_server) == before


@pytest.mark.parametrize("rules", ["+copy +rename", "+copy", "+rename"])
def test_a_broker_line_without_copy_or_rename_still_plays_the_role(
    acl_server: RedisServer, rules: str
) -> None:
    """An earlier release's broker line (or half of the new rights): its beats log the same
    entries, uncompacted. The probes (COPY and RENAME of a missing key) tell each right."""
    line = ACL_BROKER.replace(BROKER_USER, "old-broker").replace(f" {rules}", "")
    make_users(acl_server, line)
    before = written(acl_server)
    found = findings_of(acl_server, username="old-broker", password=BROKER_PASSWORD)
    assert found["acl-broker"].status is Status.OK
    assert "(probes that change nothing)" in found["acl-broker"].summary
    without = rules.replace("+", "")
    assert f"without {without} each new queue's event log keeps a 4 KB node" in (
        found["acl-broker"].summary
    )
    assert written(acl_server) == before


def test_the_strict_reader_with_read_only_keys_is_a_reader(acl_server: RedisServer) -> None:
    make_users(acl_server, ACL_STRICT_READER.replace(READER_USER, "strict"))
    found = findings_of(acl_server, username="strict", password=READER_PASSWORD)
    assert found["acl-reader"].status is Status.OK
    # Every write needs a writable key: %R~ refuses all of them.
    assert {"hset", "zadd", "set", "zrem", "hdel", "del"} <= set(lacking(found["acl-broker"]))


def test_a_user_of_no_role_is_a_warning(acl_server: RedisServer) -> None:
    make_users(acl_server, "ACL SETUSER stranger reset on >pw ~other:* resetchannels +@all")
    before = written(acl_server)
    found = findings_of(acl_server, username="stranger", password="pw")
    assert found["acl"].status is Status.WARN
    assert "none of the roles" in found["acl"].summary
    assert "(ACL DRYRUN)" in found["acl-broker"].summary  # +@all may dry-run: nothing ran
    assert "zadd" in lacking(found["acl-broker"])  # the keys are not its
    assert written(acl_server) == before


def test_dry_run_reports_a_missing_command_of_an_administrator(acl_server: RedisServer) -> None:
    make_users(acl_server, "ACL SETUSER admin2 reset on >pw ~* &* +@all -zadd -hgetall")
    found = findings_of(acl_server, username="admin2", password="pw")
    assert "(ACL DRYRUN)" in found["acl-reader"].summary
    assert lacking(found["acl-broker"]) == ["zadd"]
    assert lacking(found["acl-reader"]) == ["hgetall"]
    assert lacking(found["acl-janitor"]) == ["zadd", "hgetall"]


def test_select_matters_only_on_a_database_other_than_0(acl_server: RedisServer) -> None:
    no_select = ACL_READER.replace(READER_USER, "noselect").replace("+select ", "")
    make_users(acl_server, no_select)
    on_0 = findings_of(acl_server, username="noselect", password=READER_PASSWORD)
    assert on_0["acl-reader"].status is Status.OK
    assert "without SELECT it can use database 0 only" in on_0["acl-reader"].summary
    # On database 3 such a user cannot even connect (redis-py sends SELECT): a refusal.
    url = f"redis://noselect:{READER_PASSWORD}@{acl_server.host}:{acl_server.port}/3"
    result = invoke(["--url", url, "doctor"])
    assert result.exit_code == 4
    assert "add +select to its role" in one_error_line(result)
    on_3 = findings_of(acl_server, username=READER_USER, password=READER_PASSWORD, db=3)
    assert on_3["acl-reader"].status is Status.OK
    assert "database 0 only" not in on_3["acl-reader"].summary


# -- the 0.1 index ------------------------------------------------------------------------


def test_a_leftover_0_1_index_is_a_warning_until_migrated(acl_server: RedisServer) -> None:
    with client_of(acl_server) as admin:
        admin.sadd("presence:index", "orders:billing", "orders:audit")
    admin_view = findings_of(acl_server)["legacy-index"]
    assert admin_view.status is Status.WARN
    assert "presence:index, the index of release 0.1, lists 2 group(s)" in admin_view.summary
    assert "redis-presence migrate" in admin_view.advice
    for user, password in ((READER_USER, READER_PASSWORD), (BROKER_USER, BROKER_PASSWORD)):
        seen = findings_of(acl_server, username=user, password=password)["legacy-index"]
        assert seen.status is Status.WARN, user  # ZCARD (reader) or EXISTS (broker)
        assert "presence:index, the index of release 0.1, exists" in seen.summary
    assert invoke(["--url", acl_server.url, "migrate"]).exit_code == 0
    assert findings_of(acl_server)["legacy-index"].status is Status.OK


def test_a_key_no_read_can_decode_is_a_warning_naming_it(acl_server: RedisServer) -> None:
    """Issue 23, item 3: a queue named by JavaScript's encodeURIComponent ("x!y" left
    unescaped) and a hand-spoilt value: doctor names both keys; the CLI's counts read the
    rest and warn on one line each."""
    foreign = "presence:{x!y}:g:c"
    with client_of(acl_server) as admin:
        admin.zadd("presence:groups", {foreign: 0})
        admin.zadd("presence:{x!y}:g:hb", {"w": T0 // 1_000})
        admin.hset(foreign, "w", f"{T0} {T0} 1")
        admin.hset("presence:{orders}:billing:c", "spoilt", "garbage")
        before = dump(admin)
    found = findings_of(acl_server)["undecodable"]
    assert found.status is Status.WARN
    assert foreign in found.summary
    assert "presence:{orders}:billing:c" in found.summary
    assert "encodeURIComponent" in found.advice
    reader = findings_of(acl_server, username=READER_USER, password=READER_PASSWORD)
    assert reader["undecodable"].status is Status.WARN
    broker = findings_of(acl_server, username=BROKER_USER, password=BROKER_PASSWORD)
    assert broker["undecodable"].status is Status.SKIP  # a broker may not read the index
    with client_of(acl_server) as admin:
        admin.hdel("presence:{orders}:billing:c", "spoilt")
        RedisPresenceRegistry(admin).heartbeat("mail", "send", "w2", 1, now_ns=T0)
    result = invoke(["--url", acl_server.url, "counts", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"orders": {"billing": 1}, "mail": {"send": 1}} or (
        '"billing"' in result.stdout and '"send"' in result.stdout
    )
    lines = [line for line in result.stderr.splitlines() if "warning" in line]
    assert lines == [
        f"redis-presence: warning: redis-presence set aside {foreign}: the index "
        f"presence:groups holds a member this package did not write: '{foreign}'"
    ], result.stderr
    with client_of(acl_server) as admin:
        assert {k: v for k, v in dump(admin).items() if b"x!y" in k} == {
            k: v for k, v in before.items() if b"x!y" in k
        }


# -- latency ------------------------------------------------------------------------------


def test_slow_round_trips_are_a_warning(healthy: RedisServer) -> None:
    with (
        Proxy(healthy.port, delay_s=0.02) as proxy,
        redis.Redis.from_url(proxy.url, retry=Retry(NoBackoff(), 0)) as client,
    ):
        found = diagnose(RedisPresenceRegistry(client))
    latency = {f.check: f for f in found}["latency"]
    assert latency.status is Status.WARN, latency
    assert "slow" in latency.summary
    assert "SLOWLOG GET" in latency.advice
    RUN_COUNTS["doctor: findings made against real servers"] += len(found)


# -- replication and cluster --------------------------------------------------------------


def test_a_replica_and_its_lost_primary(make_redis_server: MakeRedisServer) -> None:
    primary = make_redis_server(extra_args=HEALTHY)
    # No AOF on the replica (Redis 7.0 ignores SIGTERM while it writes its first AOF), and
    # serve-stale-data off once synced (before, the fixture's PING would get MASTERDOWN).
    replica = make_redis_server(replicaof=primary)
    replica.wait_replica_synced()
    with client_of(replica) as client:
        client.config_set("replica-serve-stale-data", "no")
    assert "a primary with 1 replica(s)" in findings_of(primary)["replication"].summary
    up = findings_of(replica)["replication"]
    assert up.status is Status.NOTE
    assert f"a replica of {primary.host}:{primary.port} (link up)" in up.summary
    primary.kill()
    with client_of(replica) as client:  # the replica notices at once: the link is closed
        wait_until(
            lambda: client.info("replication")["master_link_status"] != "up",
            timeout_s=10,
            what="the replica to see its primary go",
        )
    down = findings_of(replica)
    assert down["replication"].status is Status.FAIL, down["replication"]
    assert "link to its primary" in down["replication"].summary
    assert "MASTERDOWN" in down["replication"].summary
    assert "REPLICAOF NO ONE" in down["replication"].advice
    assert down["acl-broker"].status is Status.OK  # MASTERDOWN replies pass the ACL check


def test_a_cluster_is_checked_node_by_node(redis_cluster: RedisClusterProcesses) -> None:
    client = redis_cluster.client()
    try:
        found = diagnose(RedisPresenceRegistry(client))
    finally:
        client.close()
    RUN_COUNTS["doctor: findings made against real servers"] += len(found)
    cluster = [f for f in found if f.check == "cluster"]
    assert [(f.status, f.node) for f in cluster] == [(Status.OK, "")]
    assert "state ok, 3 primaries, 16384 of 16384 slots ok" in cluster[0].summary
    nodes = {f"{h}:{p}" for h, p in redis_cluster.startup_nodes}
    per_node = [f for f in found if f.check == "persistence"]
    assert {f.node for f in per_node} == nodes
    assert all(f.status is Status.WARN for f in per_node)  # the test cluster keeps no data
    assert all(f.status is Status.OK for f in found if f.check.startswith("acl-"))
    legacy = [f for f in found if f.check == "legacy-index"]
    assert [(f.status, f.node) for f in legacy] == [(Status.OK, "")]


def test_an_unreachable_server_ends_doctor(make_redis_server: MakeRedisServer) -> None:
    server = make_redis_server()
    client = client_of(server)
    server.kill()
    with pytest.raises(PresenceConnectionError):
        diagnose(RedisPresenceRegistry(client))
    client.close()


def test_doctor_names_the_consumers_in_conflict(healthy: RedisServer) -> None:
    """Protocol version 2: a consumer whose stored value says a duplicate beat it within a
    TTL (conflict_ns) is named, with its instance; one whose conflict is older is not."""
    with client_of(healthy) as admin:
        registry = RedisPresenceRegistry(admin)
        now = registry.clock_ns()
        for name in ("dup", "old", "fine"):
            registry.heartbeat("orders", "billing", name, 0, now_ns=now)
        data = "presence:{orders}:billing:c"
        admin.hset(data, "dup", f"{now} {now} 0 0 0 0 {now} pod-b pod-a")
        admin.hset(data, "old", f"{now} {now} 0 0 0 0 {now - 3_600 * 10**9} pod-c pod-d")
    found = findings_of(healthy)["conflicts"]
    assert found.status is Status.WARN
    assert "1 consumer(s) in conflict" in found.summary
    assert "orders/billing/dup (instance pod-b)" in found.summary
    assert "old" not in found.summary
    assert "its own consumer name" in found.advice

"""Security: least-privilege ACL roles, and passwords that never leak (TLS: test_tls.py)."""

from __future__ import annotations

import logging
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import redis
from backends import dump, without_logs
from click.testing import CliRunner, Result
from leaks import FAST, PASSWORD, exception_text, log_text, secrets_in
from redis.backoff import NoBackoff
from redis.retry import Retry
from servers import MakeRedisServer, RedisServer, free_port

from redis_presence import (
    AsyncRedisPresenceRegistry,
    FollowCursor,
    FollowSnapshot,
    PresenceAuthError,
    PresenceConfigError,
    PresenceConnectionError,
    PresenceError,
    PresenceReadOnlyError,
    PresenceState,
    RedisPresenceRegistry,
)
from redis_presence.cli import cli
from redis_presence.keys import Keyspace
from redis_presence.scripts import library, script
from redis_presence.urls import redact, secrets_of
from redis_presence.validation import BeatSpec

MS = 1_000_000
T0 = 1_796_000_000_123_456_000
PRODUCTION_DOC = Path(__file__).resolve().parent.parent / "docs" / "production.md"

pytestmark = pytest.mark.timeout(60)

# --- ACL ------------------------------------------------------------------------------------
# The one source of truth for the roles: docs/production.md must contain these lines verbatim,
# and the tests below run exactly them. Commands are those the scripts and plans send:
#   broker: heartbeat.lua (ZSCORE HGET TIME ZADD HSET, and XADD PEXPIRE for an event;
#           TYPE SET on a cluster), heartbeat_many.lua (TYPE TIME HGET HSET ZADD SET XADD
#           PEXPIRE; also a beat with progress), deregister.lua (TYPE HGET ZREM HDEL EXISTS DEL
#           XADD PEXPIRE), describe.lua (TYPE HGET HSET HDEL), GET of the shared TTL, SCRIPT
#           LOAD after NOSCRIPT; on a cluster the indexes' plain ZADD, ZREM, EXISTS are already
#           in the list; SELECT for a database but 0; COPY RENAME (optional, pcall) to compact
#           the event log an entry creates (tests/test_event_log_memory.py).
#   reader: no script at all. TIME (the one instant of a read), GET (the shared TTL),
#           ZRANGEBYLEX (index pages), HLEN HGETALL HSCAN (snapshot), ZCOUNT ZRANGEBYSCORE
#           HMGET (counts, and stale/expired events), ZCARD (len), XRANGE XINFO|STREAM (the
#           event logs).
#   janitor: the broker's, prune.lua's (ZRANGEBYSCORE HMGET) and what prune and prune
#           --dry-run read (the reader's snapshot commands).
#   operator: declares groups (expect.lua: GET HSET ZADD; unexpect.lua: GET HDEL HLEN ZREM,
#           and EXISTS ZADD on a cluster) and stores the shared TTL and progress budget
#           (setting.lua: GET SET DEL, ZADD ZREM of P:ttls), each script checking the
#           protocol version with its write; SCRIPT LOAD after NOSCRIPT; and reads what it
#           declared (expected: ZRANGEBYLEX HSCAN; ttl / stuck_after: GET); no consumer (the
#           heartbeat, prune and metadata scripts need TYPE, TIME or ZSCORE, which it lacks).
BROKER_USER, BROKER_PASSWORD = "presence-broker", "change-me-broker"
READER_USER, READER_PASSWORD = "presence-reader", "change-me-reader"
ACL_BROKER = (
    f"ACL SETUSER {BROKER_USER} reset on >{BROKER_PASSWORD} ~presence:* resetchannels -@all "
    "+evalsha +fcall +script|load +function|load +select +type +time +exists +get +hget +hset "
    "+zadd +zscore +zcard +zrange +set +zrem +hdel +del +xadd +pexpire +copy +rename"
)
ACL_READER = (
    f"ACL SETUSER {READER_USER} reset on >{READER_PASSWORD} ~presence:* resetchannels -@all "
    "+select +time +get +zrangebylex +hlen +hgetall +hscan +zcount +zrangebyscore +zmscore +hmget "
    "+zcard +xrange +xinfo|stream"
)
# The same reader with read-only keys (%R~): every read is a plain read command, so a reader
# needs no right to write, to run a script or to load one.
ACL_STRICT_READER = (
    f"ACL SETUSER {READER_USER} reset on >{READER_PASSWORD} %R~presence:* resetchannels -@all "
    "+select +time +get +zrangebylex +hlen +hgetall +hscan +zcount +zrangebyscore +zmscore +hmget "
    "+zcard +xrange +xinfo|stream"
)
# Someone must prune: the broker's commands plus those that find expired consumers.
JANITOR_USER, JANITOR_PASSWORD = "presence-janitor", "change-me-janitor"
ACL_JANITOR = (
    f"ACL SETUSER {JANITOR_USER} reset on >{JANITOR_PASSWORD} ~presence:* resetchannels -@all "
    "+evalsha +fcall +script|load +function|load +select +type +time +exists +get +hget +hset "
    "+zadd +zscore +zcard +zrange +set +zrem +hdel +del +xadd +pexpire +copy +rename "
    "+zrangebylex +zrangebyscore +zmscore +hlen +hgetall +hscan +hmget"
)
OPERATOR_USER, OPERATOR_PASSWORD = "presence-operator", "change-me-operator"
ACL_OPERATOR = (
    f"ACL SETUSER {OPERATOR_USER} reset on >{OPERATOR_PASSWORD} ~presence:* resetchannels -@all "
    "+evalsha +script|load +select +hset +hdel +hlen +zadd +zrem +exists +zrangebylex +hscan "
    "+get +set +del"
)
ACL_LINES = (ACL_BROKER, ACL_READER, ACL_STRICT_READER, ACL_JANITOR, ACL_OPERATOR)


def test_production_doc_carries_the_tested_acl_lines() -> None:
    text = PRODUCTION_DOC.read_text(encoding="utf-8")
    for line in ACL_LINES:
        assert line in text.splitlines(), f"docs/production.md lacks the tested line:\n{line}"
    assert Keyspace("presence").acl_pattern == "~presence:*"


@pytest.fixture
def acl_server(make_redis_server: MakeRedisServer) -> RedisServer:
    """A fresh server with the broker and reader users created from `ACL_LINES`."""
    server = make_redis_server()
    with server.client() as admin:
        for line in (ACL_BROKER, ACL_READER, ACL_JANITOR, ACL_OPERATOR):
            assert admin.execute_command(*shlex.split(line)) in (b"OK", "OK", True)
    return server


@pytest.fixture
def admin(acl_server: RedisServer) -> Iterator[redis.Redis]:
    with acl_server.client() as client:
        yield client


def role_registry(
    server: RedisServer, user: str, password: str, **kwargs: Any
) -> RedisPresenceRegistry:
    client = server.client(username=user, password=password, retry=Retry(NoBackoff(), 0))
    return RedisPresenceRegistry(client, **kwargs)


Operation = Callable[[RedisPresenceRegistry], object]
WRITES: dict[str, Operation] = {
    "heartbeat": lambda r: r.heartbeat("orders", "billing", "w9", 1, now_ns=T0),
    "heartbeat (server clock)": lambda r: r.heartbeat("orders", "billing", "w9"),
    "heartbeat_many": lambda r: r.heartbeat_many([("orders", "billing", "w9", 0)], now_ns=T0),
    "heartbeat progressed": lambda r: r.heartbeat("orders", "billing", "w9", 1, progressed=True),
    "heartbeat capacity": lambda r: r.heartbeat("orders", "billing", "w9", capacity=4),
    "heartbeat_many draining": lambda r: r.heartbeat_many(
        [BeatSpec("orders", "billing", "w9", 1, draining=False)], now_ns=T0
    ),
    "request_drain": lambda r: r.request_drain("orders", "billing", "w9", now_ns=T0),
    "describe": lambda r: r.describe("orders", "billing", "w9", {"host": "h", "pid": "1"}),
    "deregister": lambda r: r.deregister("orders", "billing", "w1"),
}
DECLARE: dict[str, Operation] = {
    "expect": lambda r: r.expect("orders", "audit", 2),
    "unexpect": lambda r: r.unexpect("mail", "send"),
    "set_stuck_after": lambda r: r.set_stuck_after(60_000),
}
READS: dict[str, Operation] = {
    "snapshot": lambda r: r.snapshot(now_ns=T0),
    "snapshot (server clock)": lambda r: [(row.key, row.lease_count) for row in r.snapshot()],
    "count_active_by_group": lambda r: r.count_active_by_group(now_ns=T0),
    "count (server clock)": lambda r: r.count_active_by_group(),
    "len": len,
    "snapshot with_meta": lambda r: r.snapshot(now_ns=T0, stuck_after_ms=1, with_meta=True),
    "groups": lambda r: r.groups(now_ns=T0),
    "groups details": lambda r: r.groups(now_ns=T0, details=True),
    "expected": lambda r: r.expected(),
    "min_active": lambda r: (r.min_active("mail", "send"), r.min_active("orders", "billing")),
    "consumer": lambda r: r.consumer("orders", "billing", "w2", now_ns=T0),
}
PRUNE: dict[str, Operation] = {
    "prune_expired": lambda r: r.prune_expired(now_ns=T0 + 10**15),
}


def seed(admin: redis.Redis) -> RedisPresenceRegistry:
    owner = RedisPresenceRegistry(admin)
    owner.heartbeat("orders", "billing", "w1", 2, now_ns=T0)
    owner.heartbeat("orders", "billing", "w2", 0, now_ns=T0 - 90_000 * MS)
    owner.heartbeat("mail", "send", "w1", 0, now_ns=T0)
    owner.describe("orders", "billing", "w1", {"host": "h-1"})
    owner.expect("mail", "send")
    return owner


def assert_denied(registry: RedisPresenceRegistry, ops: dict[str, Operation], admin: Any) -> None:
    for name, op in ops.items():
        before = dump(admin)
        with pytest.raises(PresenceAuthError) as info:
            op(registry)
        assert "Redis refused access" in str(info.value), name
        assert dump(admin) == before, f"{name} changed the store although it was refused"


def test_broker_role_may_heartbeat_and_deregister_only(
    acl_server: RedisServer, admin: redis.Redis
) -> None:
    owner = seed(admin)
    broker = role_registry(acl_server, BROKER_USER, BROKER_PASSWORD)
    for op in WRITES.values():
        admin.script_flush()  # the broker may reload the scripts the server forgot
        op(broker)
    rows = {(r.queue, r.group, r.consumer): r for r in owner.snapshot(now_ns=T0, with_meta=True)}
    assert ("orders", "billing", "w9") in rows
    assert dict(rows["orders", "billing", "w9"].meta) == {"host": "h", "pid": "1"}
    assert rows["orders", "billing", "w9"].last_progress_ns is not None
    assert ("orders", "billing", "w1") not in rows  # deregistered by the broker
    assert broker.deregister("mail", "send", "w1") is True  # empties the group and the index
    assert owner.count_active_by_group(now_ns=T0) == {("orders", "billing"): 1}

    # A broker holds the commands declarations take (HSET, ZADD, SET for a cluster's marks):
    # the README says so; the operator role below may declare and do nothing else.
    assert_denied(broker, {**READS, **PRUNE}, admin)
    outside = role_registry(acl_server, BROKER_USER, BROKER_PASSWORD, prefix="other")
    assert_denied(outside, {**WRITES, **READS, **PRUNE}, admin)


def test_reader_role_may_snapshot_and_count_only(
    acl_server: RedisServer, admin: redis.Redis
) -> None:
    owner = seed(admin)
    reader = role_registry(acl_server, READER_USER, READER_PASSWORD)
    read_only = role_registry(acl_server, READER_USER, READER_PASSWORD, read_only=True)
    for registry in (reader, read_only):
        for name, op in READS.items():
            admin.script_flush()
            assert op(registry) == op(owner), name
    pairs = [("orders", "billing"), ("mail", "send")]
    assert reader.ttl_sources(pairs) == owner.ttl_sources(pairs)  # GET, which brokers have too
    assert {r.consumer: r.state for r in reader.snapshot(now_ns=T0)} == {
        "w1": PresenceState.ACTIVE,
        "w2": PresenceState.EXPIRED,
    }

    assert_denied(reader, {**WRITES, **PRUNE, **DECLARE}, admin)
    outside = role_registry(acl_server, READER_USER, READER_PASSWORD, prefix="other")
    assert_denied(outside, {**READS, **WRITES, **PRUNE}, admin)
    for name, op in {**WRITES, **PRUNE}.items():
        with pytest.raises(PresenceReadOnlyError, match=name.split()[0]):
            op(read_only)


def test_a_reader_cannot_request_a_drain_and_a_broker_can(
    acl_server: RedisServer, admin: redis.Redis
) -> None:
    """A drain request is a write (drain.lua, by FCALL): the broker's line allows it, no
    reader's does, and a refused request changes nothing."""
    owner = seed(admin)
    reader = role_registry(acl_server, READER_USER, READER_PASSWORD)
    assert_denied(reader, {"request_drain": WRITES["request_drain"]}, admin)
    assert not owner.heartbeat("orders", "billing", "w1", now_ns=T0).drain_requested
    broker = role_registry(acl_server, BROKER_USER, BROKER_PASSWORD)
    admin.function_flush()
    admin.script_flush()  # the broker loads the library itself
    assert broker.request_drain("orders", "billing", "w1", now_ns=T0) is True
    assert owner.heartbeat("orders", "billing", "w1", now_ns=T0).drain_requested
    assert_denied(reader, {"request_drain": WRITES["request_drain"]}, admin)


def test_strict_reader_with_read_only_keys_reads_through_any_registry(
    acl_server: RedisServer, admin: redis.Redis
) -> None:
    owner = seed(admin)
    admin.execute_command(*shlex.split(ACL_STRICT_READER))  # type: ignore[no-untyped-call]
    for read_only in (True, False):  # every read is plain read commands, scripts or not
        strict = role_registry(acl_server, READER_USER, READER_PASSWORD, read_only=read_only)
        for name, op in READS.items():
            admin.script_flush()
            assert op(strict) == op(owner), name
    normal = role_registry(acl_server, READER_USER, READER_PASSWORD)
    assert_denied(normal, {**WRITES, **PRUNE}, admin)


@pytest.mark.parametrize("line", [ACL_READER, ACL_STRICT_READER], ids=["reader", "strict"])
def test_a_reader_follows_the_events_with_no_write_right(
    acl_server: RedisServer, admin: redis.Redis, line: str
) -> None:
    """`changes` (a fresh cursor after recent writes, then the events) and `follow`'s first
    snapshot need only the reader's commands, plain or read-only registry alike."""
    admin.execute_command(*shlex.split(line))  # type: ignore[no-untyped-call]
    owner = seed(admin)  # the logs were written just now: a new cursor reads where they end
    for read_only in (False, True):
        reader = role_registry(acl_server, READER_USER, READER_PASSWORD, read_only=read_only)
        _, cursor = reader.changes()
        owner.heartbeat("orders", "billing", f"new-{read_only}", 1)
        owner.deregister("orders", "billing", f"new-{read_only}")
        events, cursor = reader.changes(cursor)
        kinds = [(e.kind.value, e.consumer) for e in events if e.consumer.startswith("new")]
        assert kinds == [("joined", f"new-{read_only}"), ("left", f"new-{read_only}")]
        stream = reader.follow(interval_s=0.01)
        first = next(stream)
        assert isinstance(first, FollowSnapshot)
        assert {row.consumer for row in first.rows} >= {"w1"}
        # A read, and the check that the groups it holds are still there (issue 30 item 5).
        assert isinstance(next(stream), FollowCursor)
        reader.close()


@pytest.mark.parametrize("line", [ACL_READER, ACL_STRICT_READER], ids=["reader", "strict"])
def test_a_reader_can_neither_load_nor_run_a_script_nor_write(
    acl_server: RedisServer, admin: redis.Redis, line: str
) -> None:
    """A reader that loads scripts in a loop could grow the script cache past maxmemory and
    have every broker's heartbeat refused: no reader line grants any scripting right."""
    admin.execute_command(*shlex.split(line))  # type: ignore[no-untyped-call]
    seed(admin)
    before = dump(admin)
    with acl_server.client(
        username=READER_USER, password=READER_PASSWORD, retry=Retry(NoBackoff(), 0)
    ) as reader:
        for command in (
            ("SCRIPT", "LOAD", "return 1"),
            ("EVAL", "return 1", "0"),
            ("EVALSHA", script("heartbeat").sha, "0"),
            ("EVALSHA_RO", script("heartbeat").sha, "0"),
            ("FUNCTION", "LOAD", "#!lua name=x\nredis.register_function('f', function() end)"),
            ("FCALL", script("heartbeat").function, "0"),
            ("ZADD", "presence:groups", "0", "x"),
            ("DEL", "presence:groups"),
        ):
            with pytest.raises(redis.exceptions.NoPermissionError):
                reader.execute_command(*command)
    assert dump(admin) == before
    # the broker's, untouched (the heartbeats are functions, the other writes scripts)
    assert admin.function_list(library().name) != []
    assert admin.script_exists(script("describe").sha) == [True]


def test_janitor_role_may_prune(acl_server: RedisServer, admin: redis.Redis) -> None:
    owner = seed(admin)
    janitor = role_registry(acl_server, JANITOR_USER, JANITOR_PASSWORD)
    admin.script_flush()
    assert janitor.prune_expired(now_ns=T0) == 1  # w2, 90 s old
    assert [row.key for row in owner.snapshot(now_ns=T0)] == [
        ("mail", "send", "w1"),
        ("orders", "billing", "w1"),
    ]
    # It lists what it would prune (prune --dry-run reads a snapshot), and counts nothing.
    assert janitor.snapshot(now_ns=T0) == owner.snapshot(now_ns=T0)
    assert_denied(janitor, {"count": READS["count_active_by_group"]}, admin)
    assert janitor.prune_expired(now_ns=T0 + 10**15) == 2  # empties both groups and the index
    # Only the declared group is left: it outlives its last consumer.
    assert without_logs(admin.keys("*")) == [b"presence:expects", b"presence:{mail}:expect"]


def test_operator_role_may_declare_groups_and_store_budgets_only(
    acl_server: RedisServer, admin: redis.Redis
) -> None:
    owner = seed(admin)
    operator = role_registry(acl_server, OPERATOR_USER, OPERATOR_PASSWORD)
    for op in DECLARE.values():
        admin.script_flush()  # the operator may reload the scripts the server forgot
        op(operator)
    operator.set_ttl(20_000, queue="orders", group="billing")
    assert operator.expected() == owner.expected() == {("orders", "audit"): 2}
    assert operator.stuck_after_source() == (60_000, "prefix")
    assert operator.ttl_source("orders", "billing") == (20_000, "group")
    assert [g.key for g in owner.groups(now_ns=T0) if g.below] == [("orders", "audit")]
    operator.set_stuck_after(None)
    assert operator.unexpect("orders", "audit") is True
    assert admin.exists("presence:expects") == 0  # the last declaration unlists its queue
    assert_denied(operator, {**WRITES, **PRUNE, "snapshot": READS["snapshot"]}, admin)


def test_every_role_works_on_a_non_zero_database(acl_server: RedisServer) -> None:
    """redis-py sends SELECT for a database other than 0: every role's line allows it."""
    with acl_server.client(db=5) as admin5:
        owner = seed(admin5)
        admin5.execute_command(*shlex.split(ACL_STRICT_READER.replace(READER_USER, "strict")))

        def on_db5(user: str, password: str, **kwargs: Any) -> RedisPresenceRegistry:
            client = acl_server.client(
                username=user, password=password, db=5, retry=Retry(NoBackoff(), 0)
            )
            return RedisPresenceRegistry(client, **kwargs)

        for op in WRITES.values():
            op(on_db5(BROKER_USER, BROKER_PASSWORD))
        for name, op in READS.items():
            assert op(on_db5(READER_USER, READER_PASSWORD)) == op(owner), name
            strict = on_db5("strict", READER_PASSWORD, read_only=True)
            assert op(strict) == op(owner), name
        janitor = on_db5(JANITOR_USER, JANITOR_PASSWORD)
        assert janitor.snapshot(now_ns=T0) == owner.snapshot(now_ns=T0)
        assert janitor.prune_expired(now_ns=T0 + 10**15) == 3
    with acl_server.client() as admin0:
        assert admin0.keys("*") == []  # nothing reached database 0


def test_nested_prefixes_need_exact_key_patterns(
    acl_server: RedisServer, admin: redis.Redis
) -> None:
    """``~presence:*`` also covers a prefix ``presence:staging``; two exact patterns do not."""
    nested = role_registry(acl_server, BROKER_USER, BROKER_PASSWORD, prefix="presence:staging")
    nested.heartbeat("orders", "billing", "w1", now_ns=T0)  # allowed by ~presence:*
    exact = ACL_BROKER.replace(
        "~presence:*",
        "~presence:groups ~presence:events ~presence:ttl ~presence:protocol ~presence:newest "
        "~presence:oldest ~presence:{*",
    )
    admin.execute_command(*shlex.split(exact))  # type: ignore[no-untyped-call]
    own = role_registry(acl_server, BROKER_USER, BROKER_PASSWORD)
    own.heartbeat("orders", "billing", "w1", now_ns=T0)
    assert own.deregister("orders", "billing", "w1") is True
    assert_denied(nested, WRITES, admin)


# --- passwords ------------------------------------------------------------------------------

WRONG = "wr0ng:p@ss/w%rd-also-never-shown"


@pytest.fixture
def password_server(make_redis_server: MakeRedisServer) -> RedisServer:
    return make_redis_server(requirepass=PASSWORD)


def url_with(password: str, port: int, user: str = "") -> str:
    return f"redis://{user}:{quote(password, safe='')}@127.0.0.1:{port}/0"


def test_password_works_and_never_leaks_on_failure(
    password_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    port = password_server.port
    with RedisPresenceRegistry.from_url(url_with(PASSWORD, port), **FAST) as good:
        good.heartbeat("orders", "billing", "w1", now_ns=T0)
        assert len(good) == 1
        assert not secrets_in(repr(good), PASSWORD)

    failures: dict[str, tuple[str, type[PresenceError]]] = {
        "wrong password": (url_with(WRONG, port), PresenceAuthError),
        "wrong password, named user": (url_with(WRONG, port, "default"), PresenceAuthError),
        "no password": (f"redis://127.0.0.1:{port}/0", PresenceAuthError),
        "nobody listening": (url_with(PASSWORD, free_port()), PresenceConnectionError),
        "malformed port": (
            f"redis://user:{quote(PASSWORD, safe='')}@127.0.0.1:port/0",
            PresenceConfigError,
        ),
        "unknown scheme": (f"http://user:{quote(PASSWORD, safe='')}@h/0", PresenceConfigError),
    }
    for name, (url, error) in failures.items():
        with pytest.raises(error) as info, RedisPresenceRegistry.from_url(url, **FAST) as r:
            r.heartbeat("orders", "billing", "w2", now_ns=T0)
        text = exception_text(info.value)
        assert not secrets_in(text, PASSWORD, WRONG), f"{name}: secret in\n{text}"
    assert not secrets_in(log_text(caplog), PASSWORD, WRONG)


def test_cli_never_prints_a_password(
    password_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    port = password_server.port
    runner = CliRunner()
    ok = runner.invoke(cli, ["--url", url_with(PASSWORD, port), "heartbeat", "q", "g", "c"])
    assert ok.exit_code == 0, ok.output
    cases = {
        "wrong password": url_with(WRONG, port),
        "nobody listening": url_with(PASSWORD, free_port()),
        "malformed port": f"redis://u:{quote(PASSWORD, safe='')}@127.0.0.1:port/0",
    }
    results: list[Result] = []
    for name, url in cases.items():
        for args in (["--url", url, "ls"], ["ls"]):
            env = {"REDIS_PRESENCE_URL": url} if args == ["ls"] else {}
            result = runner.invoke(cli, args, env=env)
            results.append(result)
            assert result.exit_code != 0, f"{name}: {result.output}"
            shown = result.output + result.stderr
            assert not secrets_in(shown, PASSWORD, WRONG), f"{name}: {shown}"
            assert len(result.stderr.strip().splitlines()) == 1, f"{name}: {result.stderr}"
    assert not secrets_in(log_text(caplog), PASSWORD, WRONG)
    assert {r.exit_code for r in results} - {1, 2, 3, 4} == set()


def test_unencoded_special_characters_in_a_password_never_leak(
    password_server: RedisServer,
) -> None:
    url = f"redis://u:{PASSWORD}@127.0.0.1:{password_server.port}/0"  # not percent-encoded
    with pytest.raises(PresenceError) as info, RedisPresenceRegistry.from_url(url, **FAST) as r:
        r.heartbeat("orders", "billing", "w2", now_ns=T0)
    leaked = secrets_in(exception_text(info.value), PASSWORD)
    result = CliRunner().invoke(cli, ["--url", url, "ls"])
    leaked += secrets_in(result.output + result.stderr, PASSWORD)
    assert not leaked


@pytest.mark.parametrize(
    "userinfo",
    [
        pytest.param("u:a/b", id="slash"),
        pytest.param(":x@y/z", id="at-and-slash"),
        pytest.param(":ab?cd", id="question-mark"),
        pytest.param(":ab#cd", id="hash"),
        pytest.param("u/v:secret", id="slash-in-user"),
    ],
)
@pytest.mark.parametrize("opener", [RedisPresenceRegistry, AsyncRedisPresenceRegistry])
def test_a_raw_slash_question_mark_or_hash_in_the_userinfo_is_refused_unparsed(
    userinfo: str, opener: Any
) -> None:
    """The URL parser would end the host there and read the rest of the password as host,
    port or query (and redis-py would show those pieces); from_url refuses it instead."""
    url = f"redis://{userinfo}@127.0.0.1:6399/0"
    user = userinfo.partition(":")[0]
    with pytest.raises(PresenceConfigError) as info:
        opener.from_url(url)
    assert str(info.value) == (
        f"invalid Redis URL 'redis://{user + ':' if ':' in userinfo else ''}***@127.0.0.1:6399/0': "
        "percent-encode '/', '?' and '#' in the user name and password (as %2F, %3F and %23)"
    )
    result = CliRunner().invoke(cli, ["--url", url, "ls"])
    assert result.exit_code == 2
    assert not secrets_in(result.output + result.stderr, userinfo.partition(":")[2] or userinfo)


def test_an_at_sign_in_a_query_value_is_not_userinfo(password_server: RedisServer) -> None:
    """``?client_name=a@b`` is a query value: no password to hide, and the URL works."""
    plain = f"redis://127.0.0.1:{password_server.port}/0?client_name=broker@host-1"
    assert secrets_of(plain) == []
    assert redact(plain) == plain
    url = f"redis://:{quote(PASSWORD, safe='')}@127.0.0.1:{password_server.port}/0"
    named = url + "?client_name=broker@host-1"
    assert secrets_of(named) == sorted({quote(PASSWORD, safe=""), PASSWORD}, key=len)[::-1]
    with RedisPresenceRegistry.from_url(named) as registry:
        registry.heartbeat("orders", "billing", "w1", now_ns=T0)
        assert registry.client.client_getname() in (b"broker@host-1", "broker@host-1")

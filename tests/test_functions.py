"""The heartbeats as a Redis function library (issue 33 item 1): called by FCALL, loaded by
the first heartbeat that misses it, and sent by EVALSHA instead wherever functions are
refused (an ACL without +fcall or +function|load, a server that refuses FUNCTION), with
the same result. Counted on a real server (INFO commandstats)."""

from __future__ import annotations

import asyncio
import shlex
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from redis.backoff import NoBackoff
from redis.retry import Retry
from servers import MakeRedisServer, RedisServer

from redis_presence import AsyncRedisPresenceRegistry, BeatReply, RedisPresenceRegistry
from redis_presence._executor import Functions, Run, fcall_refused, function_missing
from redis_presence.plans import Command, Plan
from redis_presence.scripts import FUNCTIONS, library, script

pytestmark = [pytest.mark.redis_server, pytest.mark.timeout(60)]

MS = 1_000_000
T0 = 1_750_000_000_000 * MS
USER, PASSWORD = "beats", "change-me"
BASE = f"ACL SETUSER {USER} reset on >{PASSWORD} ~presence:* resetchannels -@all " + (
    "+evalsha +script|load +select +type +time +exists +get +hget +hset +zadd +zscore +set "
    "+zrem +hdel +del +xadd +pexpire +zrangebylex +zrangebyscore +hlen +hgetall +hscan +hmget"
)


def calls(client: redis.Redis, command: str) -> int:
    stats = client.info("commandstats").get(f"cmdstat_{command}")
    return int(stats["calls"]) if stats else 0


def beat_all(registry: RedisPresenceRegistry, at: int) -> None:
    registry.heartbeat("orders", "billing", "w1", 1, now_ns=at)
    registry.heartbeat("orders", "billing", "w1", 2)  # the server clock
    registry.heartbeat_many([("orders", "billing", "w2", 0), ("mail", "send", "w1", 3)])
    registry.heartbeat("orders", "billing", "w3", progressed=True)


def rows(registry: RedisPresenceRegistry) -> list[tuple[Any, ...]]:
    return [(r.key, r.lease_count) for r in registry.snapshot()]


def test_the_library_holds_each_hot_script_under_a_versioned_name() -> None:
    found = library()
    assert found.source.startswith(f"#!lua name={found.name}\n")
    for name in FUNCTIONS:
        assert script(name).function == found.functions[name]
        assert found.functions[name].endswith(found.name.removeprefix("redis_presence_"))
        assert script(name).command == ("FCALL", found.functions[name])
    assert script("describe").function is None
    assert script("describe").command == ("EVALSHA", script("describe").sha)


def test_heartbeats_are_function_calls_and_a_flushed_library_is_loaded_again(
    redis_client: redis.Redis,
) -> None:
    redis_client.function_flush()
    registry = RedisPresenceRegistry(redis_client)
    redis_client.config_resetstat()
    beat_all(registry, T0)
    assert calls(redis_client, "function|load") == 1  # the first beat that missed it
    assert calls(redis_client, "evalsha") == 0
    assert calls(redis_client, "fcall") == 5  # four calls, the first twice
    redis_client.function_flush()  # (a restart without persistence, an operator)
    redis_client.config_resetstat()
    beat_all(registry, T0 + MS)
    assert calls(redis_client, "function|load") == 1
    assert calls(redis_client, "evalsha") == 0
    assert registry.functions.refused is False
    assert [r[0] for r in rows(registry)] == [
        ("mail", "send", "w1"),
        ("orders", "billing", "w1"),
        ("orders", "billing", "w2"),
        ("orders", "billing", "w3"),
    ]


def test_a_library_another_process_loaded_meanwhile_is_no_error(
    redis_client: redis.Redis,
) -> None:
    """Two brokers that both miss the library both load it: the second load's "already
    exists" is a success."""
    registry = RedisPresenceRegistry(redis_client)
    registry.heartbeat("q", "g", "c", now_ns=T0)  # the group's TTL read and kept
    redis_client.function_flush()
    call = registry.plans.heartbeat("q", "g", "c", now_ns=T0)
    run: Run[BeatReply] = Run(call, functions=registry.functions)
    assert run.batch is not None
    replies = registry._transport(run.batch)  # "Function not found"
    run.feed(replies)
    assert [type(r) for r in run.batch] == [Command]
    redis_client.function_load(library().source)  # another broker, first
    run.feed(registry._transport(run.batch))  # "already exists"
    while run.batch is not None:
        run.feed(registry._transport(run.batch))
    assert registry.functions.refused is False
    assert [r.key for r in registry.snapshot(now_ns=T0)] == [("q", "g", "c")]


@pytest.fixture
def acl_server(make_redis_server: MakeRedisServer) -> RedisServer:
    return make_redis_server()


def role(server: RedisServer, rules: str) -> RedisPresenceRegistry:
    with server.client() as admin:
        admin.execute_command(*shlex.split(f"{BASE} {rules}"))
    client = server.client(username=USER, password=PASSWORD, retry=Retry(NoBackoff(), 0))
    return RedisPresenceRegistry(client)


@pytest.mark.parametrize(
    ("rules", "loaded", "by_function"),
    [
        ("", False, False),  # a role line of an earlier release: no +fcall
        ("", True, False),
        ("+fcall", False, False),  # may call, may not load: nobody loaded it
        ("+fcall", True, True),  # an administrator loaded it
        ("+fcall +function|load", False, True),  # the documented broker
    ],
    ids=["no-fcall", "no-fcall-loaded", "no-load", "no-load-loaded", "broker"],
)
def test_where_functions_are_refused_the_heartbeats_go_by_evalsha(
    acl_server: RedisServer, rules: str, loaded: bool, by_function: bool
) -> None:
    admin = acl_server.client()
    if loaded:
        admin.function_load(library().source)
    registry = role(acl_server, rules)
    beat_all(registry, T0)
    admin.config_resetstat()
    beat_all(registry, T0 + MS)  # the steady state: no reload, no refusal sent again
    assert registry.functions.refused is not by_function
    assert calls(admin, "fcall") == (4 if by_function else 0)
    assert calls(admin, "evalsha") == (0 if by_function else 4)
    assert (admin.function_list() != []) is (loaded or by_function)
    assert rows(registry) == [
        (("mail", "send", "w1"), 3),
        (("orders", "billing", "w1"), 2),
        (("orders", "billing", "w2"), 0),
        (("orders", "billing", "w3"), 0),
    ]
    # After a SCRIPT FLUSH the fallback reloads the scripts as before.
    admin.script_flush()
    beat_all(registry, T0 + 2 * MS)
    assert len(rows(registry)) == 4
    registry.close()
    admin.close()


def test_the_asyncio_registry_falls_back_alike(acl_server: RedisServer) -> None:
    role(acl_server, "").close()

    async def main() -> list[Any]:
        client = aredis.Redis(
            host=acl_server.host, port=acl_server.port, username=USER, password=PASSWORD
        )
        registry = AsyncRedisPresenceRegistry(client)
        await registry.heartbeat("q", "g", "c", 1, now_ns=T0)
        await registry.heartbeat("q", "g", "c", 2, now_ns=T0 + MS)
        await registry.heartbeat_many([("q", "g", "d", 0)], now_ns=T0 + MS)
        assert registry.functions.refused
        found = [r.key for r in await registry.snapshot(now_ns=T0 + MS)]
        await client.aclose()
        return found

    assert asyncio.run(main()) == [("q", "g", "c"), ("q", "g", "d")]


def test_a_refusal_is_kept_per_registry() -> None:
    functions = Functions()
    assert functions.refused is False
    functions.refuse("NOPERM")
    assert (functions.refused, functions.why) == (True, "NOPERM")

    def plan() -> Plan[list[Any]]:
        replies = yield [registry_call()]
        return replies

    def registry_call() -> Any:
        from redis_presence.plans import ScriptCall

        found = script("heartbeat")
        return ScriptCall(found, (*found.command, 1, "k", "a"))

    run = Run(plan(), functions=functions)
    assert run.batch is not None
    assert run.batch[0].args[:2] == ("EVALSHA", script("heartbeat").sha)


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ("NOPERM this user has no permissions to run the 'fcall' command", True),
        ("unknown command 'FCALL', with args beginning with: 'rp_heartbeat_x'", True),
        ("unknown command `FCALL`, with args beginning with: ", True),  # Redis 6.2
        ("ERR unsupported command 'FCALL'", True),  # a proxy
        ("NOPERM this user has no permissions to access one of the keys", False),
        ("Function not found", False),
        ("WRONGTYPE redis-presence key k holds a list, expected a hash", False),
    ],
)
def test_what_refuses_fcall_itself(text: str, refused: bool) -> None:
    assert fcall_refused(redis.exceptions.ResponseError(text)) is refused
    assert function_missing(redis.exceptions.ResponseError(text)) is (text == "Function not found")

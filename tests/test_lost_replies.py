"""Lost replies (issue 16, item 8): deregister and prune are safe to retry.

A proxy between the registry and a real server lets the command through and drops the
server's reply, closing the connection: the change is applied, the caller sees
`PresenceConnectionError`. A retry answers for what is left (False, 0) and changes nothing
more. With redis-py's own retry policy, redis-py sends the command again by itself, and the
call answers the same way. On a cluster (where the client talks to each node directly) the
reply is dropped at the plan: the script ran, the plan's next steps never did.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.cluster
from backends import dump
from cli_invoke import invoke, one_error_line
from conftest import RUN_COUNTS
from proxy import Proxy
from redis.backoff import NoBackoff
from redis.retry import Retry
from servers import RedisServer

from redis_presence import (
    AsyncRedisPresenceRegistry,
    PresenceConnectionError,
    RedisPresenceRegistry,
)
from redis_presence.plans import Plan, ScriptCall
from redis_presence.scripts import script

MS = 1_000_000
T0 = 1_796_000_000_123_456_000
LATER = T0 + 10 * 60_000 * MS  # ten minutes on: w-old expired, w-new still active

pytestmark = pytest.mark.timeout(60)


def seed(registry: RedisPresenceRegistry) -> None:
    registry.heartbeat("orders", "billing", "w1", 1, now_ns=LATER)
    registry.heartbeat("orders", "billing", "w2", 2, now_ns=LATER)
    registry.heartbeat("orders", "audit", "last", 3, now_ns=LATER)  # the only one of its group
    registry.heartbeat("mail", "send", "w-old", 4, now_ns=T0)
    registry.heartbeat("mail", "send", "w-new", 5, now_ns=LATER)


def lost(count: int = 1) -> None:
    RUN_COUNTS["lost replies: calls retried after the server applied them"] += count


@pytest.fixture
def proxy(redis_server: RedisServer, redis_client: redis.Redis) -> Iterator[Proxy]:
    with Proxy(redis_server.port) as proxy:
        yield proxy


def through(proxy: Proxy, **kwargs: Any) -> redis.Redis:
    """A client through the proxy; by default without redis-py's own retries."""
    options: dict[str, Any] = {"retry": Retry(NoBackoff(), 0), "socket_timeout": 5}
    return redis.Redis(host="127.0.0.1", port=proxy.port, **(options | kwargs))


def members(client: redis.Redis) -> list[Any]:
    return list(client.zrange("presence:groups", 0, -1))


@pytest.mark.parametrize(
    ("group", "consumer", "group_stays"),
    [("billing", "w1", True), ("audit", "last", False)],
    ids=["one-of-two", "last-of-its-group"],
)
def test_a_deregister_whose_reply_is_lost_is_safe_to_retry(
    proxy: Proxy, redis_client: redis.Redis, group: str, consumer: str, group_stays: bool
) -> None:
    with through(proxy) as client:
        registry = RedisPresenceRegistry(client)
        seed(registry)
        assert registry.deregister("orders", "nobody", "x") is False  # loads the script
        proxy.cut_after(script("deregister").sha.encode())
        with pytest.raises(PresenceConnectionError, match="cannot reach Redis"):
            registry.deregister("orders", group, consumer)
        assert proxy.cuts == 1
        # The server had applied it: the consumer is gone, its group unlisted if emptied.
        applied = dump(redis_client)
        rows = {
            (row.group, row.consumer)
            for row in RedisPresenceRegistry(redis_client).snapshot(now_ns=LATER)
        }
        assert (group, consumer) not in rows
        listed = f"presence:{{orders}}:{group}:c".encode()
        assert (listed in members(redis_client)) is group_stays
        # The retry (on a new connection) answers "was not tracked" and changes nothing.
        assert registry.deregister("orders", group, consumer) is False
        assert dump(redis_client) == applied
        assert len(registry) == 4
        counts = registry.count_active_by_group(now_ns=LATER)
        assert counts.get(("orders", group)) == (1 if group_stays else None)
    lost()


def test_a_prune_whose_reply_is_lost_is_safe_to_retry(
    proxy: Proxy, redis_client: redis.Redis
) -> None:
    with through(proxy) as client:
        registry = RedisPresenceRegistry(client)
        seed(registry)
        assert registry.prune_expired(now_ns=T0) == 0  # loads the script
        proxy.cut_after(script("prune").sha.encode())
        with pytest.raises(PresenceConnectionError):
            registry.prune_expired(now_ns=LATER)
        assert proxy.cuts == 1
        applied = dump(redis_client)
        assert [r.consumer for r in RedisPresenceRegistry(redis_client).snapshot(queue="mail")] == [
            "w-new"
        ]
        assert registry.prune_expired(now_ns=LATER) == 0  # the same instant: nothing left
        assert registry.prune_expired(now_ns=LATER + MS) == 0  # a retry a moment later
        assert dump(redis_client) == applied
    lost(2)


def test_redis_py_s_own_retry_resends_and_the_call_answers_for_what_is_left(
    proxy: Proxy, redis_client: redis.Redis
) -> None:
    """With a retry policy on the client (redis-py's default since 6.0), redis-py sends a
    command again after a lost connection: the caller sees no error, and an answer about
    the retry (False, 0) although its first attempt removed the consumers."""
    retrying = Retry(NoBackoff(), 3)
    with through(proxy, retry=retrying) as client:
        registry = RedisPresenceRegistry(client)
        seed(registry)
        assert registry.deregister("orders", "nobody", "x") is False
        assert registry.prune_expired(now_ns=T0) == 0
        proxy.cut_after(script("deregister").sha.encode())
        assert registry.deregister("orders", "billing", "w1") is False  # it was removed
        proxy.cut_after(script("prune").sha.encode())
        assert registry.prune_expired(now_ns=LATER) == 0  # w-old was removed
        assert proxy.cuts == 2
        rows = {row.consumer for row in registry.snapshot(now_ns=LATER)}
        assert rows == {"w2", "last", "w-new"}
    lost(2)


def test_an_async_deregister_whose_reply_is_lost_is_safe_to_retry(
    proxy: Proxy, redis_client: redis.Redis
) -> None:
    seed(RedisPresenceRegistry(redis_client))

    async def scenario() -> tuple[bool, int]:
        client = redis.asyncio.Redis(
            host="127.0.0.1", port=proxy.port, retry=redis.asyncio.retry.Retry(NoBackoff(), 0)
        )
        registry = AsyncRedisPresenceRegistry(client)
        try:
            assert await registry.deregister("orders", "nobody", "x") is False
            proxy.cut_after(script("deregister").sha.encode())
            with pytest.raises(PresenceConnectionError):
                await registry.deregister("orders", "billing", "w1")
            applied = dump(redis_client)
            again = await registry.deregister("orders", "billing", "w1")
            assert dump(redis_client) == applied
            return again, await registry.size()
        finally:
            await client.aclose()

    assert asyncio.run(scenario()) == (False, 4)
    assert proxy.cuts == 1
    rows = {row.consumer for row in RedisPresenceRegistry(redis_client).snapshot(now_ns=LATER)}
    assert rows == {"w2", "last", "w-old", "w-new"}
    lost()


def test_cli_deregister_whose_reply_is_lost_then_again(
    proxy: Proxy, redis_client: redis.Redis
) -> None:
    seed(RedisPresenceRegistry(redis_client))
    RedisPresenceRegistry(redis_client).deregister("orders", "nobody", "x")  # loads it
    proxy.cut_after(script("deregister").sha.encode())
    first = invoke(["--url", proxy.url, "deregister", "orders", "billing", "w1"])
    assert first.exit_code == 3
    assert "cannot reach Redis" in one_error_line(first)
    again = invoke(["--url", proxy.url, "deregister", "orders", "billing", "w1"])
    assert again.exit_code == 0, again.output
    assert again.stdout == "consumer 'w1' (queue 'orders', group 'billing') was not tracked\n"
    lost()


# -- a cluster: the reply dropped at the plan ----------------------------------------------


def applied_then_lost(registry: RedisPresenceRegistry, plan: Plan[Any]) -> None:
    """Run `plan` until its first script call has run on the server, and no further: what a
    connection lost right after the script ran leaves behind."""

    def until_the_script() -> Plan[None]:
        batch = next(plan)
        while True:
            replies = yield batch
            if any(isinstance(request, ScriptCall) for request in batch):
                return
            batch = plan.send(replies)

    registry.execute(until_the_script())


def test_on_a_cluster_a_lost_deregister_leaves_at_most_an_index_entry_prune_removes(
    cluster_client: redis.cluster.RedisCluster,
) -> None:
    registry = RedisPresenceRegistry(cluster_client)
    seed(registry)
    # The last consumer of its group: the script empties the group and asks the plan to
    # unlist it, which the lost reply prevents (docs/protocol.md, section 14, tolerates that).
    applied_then_lost(registry, registry.plans.deregister("orders", "audit", "last"))
    assert registry.deregister("orders", "audit", "last") is False
    assert ("audit", "last") not in {(r.group, r.consumer) for r in registry.snapshot(now_ns=LATER)}
    assert ("orders", "audit") not in registry.count_active_by_group(now_ns=LATER)
    assert len(registry) == 4
    stale = b"presence:{orders}:audit:c"
    assert stale in cluster_client.zrange("presence:groups", 0, -1)  # still listed
    assert registry.prune_expired(now_ns=LATER) == 1  # w-old; and the empty group unlisted
    assert stale not in cluster_client.zrange("presence:groups", 0, -1)
    # A prune whose reply is lost: the retry finds nothing left.
    registry.heartbeat("mail", "send", "w-old2", 0, now_ns=T0)
    applied_then_lost(registry, registry.plans.prune_expired(now_ns=LATER))
    assert registry.prune_expired(now_ns=LATER) == 0
    assert {r.consumer for r in registry.snapshot(now_ns=LATER)} == {"w1", "w2", "w-new"}
    lost(2)


def test_the_readme_says_what_a_caller_sees_after_a_lost_reply() -> None:
    """What the tests above show, as the production page tells it."""
    page = Path(__file__).resolve().parent.parent / "docs" / "production.md"
    readme = page.read_text(encoding="utf-8")
    start = readme.index("## Lost replies: deregister and prune are safe to retry")
    section = " ".join(readme[start : readme.index("\n## ", start + 1)].split())
    for words in (
        "`deregister` and `prune_expired` raise `PresenceConnectionError`, although",
        "`deregister` returns `False`",
        "`prune_expired` returns `0`",
        "changes nothing more",
        "prints `... was not tracked` and exits 0",
        "re-sends the command itself",
        "the next `prune_expired` unlists it",
    ):
        assert words in section, words

"""A store written by release 0.1 keeps working after `migrate`, also while brokers beat.

`tests/data/store-0.1.json` was written by redis-presence 0.1.0 itself (commit 1b65328) on a
real server: every key with its type and content, and the snapshot 0.1 read from it. The
tests replay those keys with plain commands, then read them with this release.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from backends import dump, make_registry, raw_client
from click.testing import CliRunner

from redis_presence import ConsumerPresence, PresenceState, RedisPresenceRegistry
from redis_presence.cli import cli
from redis_presence.keys import Keyspace
from redis_presence.plans import Limits, Plan, Request

STORE = json.loads((Path(__file__).parent / "data" / "store-0.1.json").read_text())
NOW = int(STORE["now_ns"])
SNAPSHOT = [
    ConsumerPresence(*row[:7], PresenceState(row[7]))  # type: ignore[call-arg]
    for row in STORE["snapshot"]
]
MS = 1_000_000

BACKENDS = pytest.mark.parametrize("backend", ["fakeredis", "redis", "cluster"])


def restore(client: Any) -> None:
    """Write the 0.1 store's keys as 0.1 left them (bytes kept exactly: latin-1 in JSON)."""
    for key, entry in STORE["keys"].items():
        name = key.encode("latin-1")
        kind, value = entry["type"], entry["value"]
        if kind == "zset":
            client.zadd(name, {m.encode("latin-1"): score for m, score in value})
        elif kind == "hash":
            client.hset(name, mapping={f.encode("latin-1"): v.encode("latin-1") for f, v in value})
        elif kind == "set":
            client.sadd(name, *(m.encode("latin-1") for m in value))
        else:
            client.set(name, value.encode("latin-1"))


@BACKENDS
def test_a_0_1_store_reads_the_same_after_migrate(
    request: pytest.FixtureRequest, backend: str
) -> None:
    client = raw_client(request, backend)
    restore(client)
    registry = make_registry(request, backend)
    assert registry.snapshot(now_ns=NOW) == []  # 0.1's index is not this release's
    assert registry.migrate() == 4
    assert registry.snapshot(now_ns=NOW) == SNAPSHOT
    assert registry.count_active_by_group(now_ns=NOW) == {
        ("a{b}:c", "g r/p%"): 1,
        ("emails", "sender"): 1,
        ("orders", "billing"): 1,
    }
    assert not client.exists(Keyspace("presence").legacy_index)
    before = dump(client)
    assert registry.migrate() == 0  # idempotent: nothing left to move
    assert dump(client) == before
    # The store is a store of this release now: beats, prunes and deregisters as usual.
    registry.heartbeat("orders", "billing", "worker-2", 1, now_ns=NOW)
    assert registry.prune_expired(now_ns=NOW) == 1  # worker-3, expired in 0.1 already
    assert registry.deregister("a{b}:c", "g r/p%", "ü\nx") is True
    assert [row.consumer for row in registry.snapshot(now_ns=NOW)] == [
        "mailer-a",
        "worker-1",
        "worker-2",
    ]


def step(registry: RedisPresenceRegistry, plan: Plan[Any]) -> Iterator[None]:
    """Run `plan` one batch at a time, yielding control between batches."""
    batch: list[Request] = next(plan)
    while True:
        replies = registry.execute(one_batch(batch))
        yield
        try:
            batch = plan.send(replies)
        except StopIteration:
            return


def one_batch(batch: list[Request]) -> Plan[list[Any]]:
    return (yield batch)


@BACKENDS
def test_migrate_while_brokers_beat_loses_no_group(
    request: pytest.FixtureRequest, backend: str
) -> None:
    """A page of one group at a time, with brokers of both releases writing between steps: a
    0.1 broker lists its group in the old index again, a new one beats, deregisters and
    prunes. After a second migrate, every group with a consumer is listed, once. (A prune
    reaches only listed groups: 0.1's expired consumer goes with the prune between the
    steps when its group was moved before it, else with the next one; migrate moves the
    groups in no set order.)"""
    client = raw_client(request, backend)
    restore(client)
    registry = make_registry(request, backend)
    slow = RedisPresenceRegistry(client, limits=Limits(groups=1))
    legacy = Keyspace("presence").legacy_index
    between: list[Callable[[], object]] = [
        lambda: registry.heartbeat("orders", "billing", "new-1", now_ns=NOW),  # a new broker
        lambda: client.sadd(legacy, "orders:billing"),  # a 0.1 broker lists its group again
        lambda: registry.deregister("emails", "sender", "mailer-a"),  # empties its group
        lambda: registry.heartbeat("fresh", "group", "c", now_ns=NOW),
        lambda: registry.prune_expired(now_ns=NOW),  # empties orders/shipping
    ]
    stepper = step(slow, slow.plans.migrate())
    for hook in between:
        try:
            next(stepper)
        except StopIteration:
            break
        hook()
    for _ in stepper:
        pass
    slow.migrate()  # what an old broker listed meanwhile
    assert not client.exists(legacy)
    rows = registry.snapshot(now_ns=NOW)
    live = {("a{b}:c", "g r/p%"), ("fresh", "group"), ("orders", "billing")}
    seen = {(row.queue, row.group) for row in rows}
    assert seen in (live, live | {("orders", "shipping")})
    assert sorted(row.consumer for row in rows if row.group == "billing") == [
        "new-1",
        "worker-1",
        "worker-2",
    ]
    pruned = registry.prune_expired(now_ns=NOW)  # worker-3, unless it went already
    assert pruned == (1 if ("orders", "shipping") in seen else 0)
    members = client.zrange(Keyspace("presence").groups, 0, -1)
    assert len(members) == 3


def test_the_cli_migrates(redis_client: Any, redis_url: str) -> None:
    restore(redis_client)
    url = redis_url
    runner = CliRunner()
    done = runner.invoke(cli, ["--url", url, "migrate", "--format", "json"], catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout) == {"moved": 4, "seeded": 4, "protocol": "2", "was": None}
    again = runner.invoke(cli, ["--url", url, "migrate"], catch_exceptions=False)
    assert again.stdout == (
        "moved 0 group(s) of the 0.1 index to presence:groups\n"
        "presence:protocol is 2 (was 2); seeded the fleet indexes from 4 group(s)\n"
    )
    listed = runner.invoke(
        cli, ["--url", url, "--now-ns", str(NOW), "ls", "--format", "json"], catch_exceptions=False
    )
    assert [row["consumer"] for row in json.loads(listed.stdout)] == [r.consumer for r in SNAPSHOT]
    read_only = runner.invoke(cli, ["--url", url, "--read-only", "migrate"])
    assert read_only.exit_code == 6

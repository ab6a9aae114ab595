"""Data loss the epoch marker misses (issue 30, item 5), on real servers.

* A failover to a replica that missed the last writes keeps the marker (it replicated with
  the data it had). A cursor holds the id of the last entry it read in each recent log:
  when the log no longer holds that entry, the history the reader saw was lost, and
  `changes` asks for a resync; `follow` re-reads a snapshot.
* A group's keys or the index deleted by hand: `follow` checks that the groups it holds
  consumers of still exist (a bounded slice of them per read) and re-reads a snapshot
  when one vanished without the events that empty a group. The web's group page notices
  the rows it shows vanishing without an event (`test_web_feed.py`).

The replica is made to miss writes deterministically: it is detached (``REPLICAOF NO
ONE``, as a failover promotes it) after it acknowledged the first writes and before the
last ones, which only the old primary receives.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from servers import MakeRedisServer, RedisServer

from redis_presence import (
    AsyncRedisPresenceRegistry,
    EventKind,
    FollowCursor,
    FollowSnapshot,
    PresenceEvent,
    PresenceResyncRequired,
    RedisPresenceRegistry,
)
from redis_presence.events import LOG_LAG_MS, HeldGroups
from redis_presence.keys import INDEX_MARK_MS

pytestmark = [pytest.mark.redis_server, pytest.mark.timeout(120)]

MOST_READS = 100
"""Reads a follow may take to notice a loss (it takes two or three; before, it never did)."""


@pytest.fixture
def pair(make_redis_server: MakeRedisServer) -> tuple[RedisServer, RedisServer]:
    """A primary and its replica, in sync."""
    primary = make_redis_server()
    replica = make_redis_server(replicaof=primary)
    replica.wait_replica_synced()
    return primary, replica


def _promote_behind(primary: RedisServer, replica: RedisServer) -> None:
    """Everything so far reaches the replica; then it is promoted (detached), so what the
    old primary takes from now on is lost to it, as in a failover with replication lag."""
    primary.wait_for_replicas(1)
    with replica.client() as client:
        client.replicaof("NO", "ONE")


def _kinds(events: list[PresenceEvent]) -> list[tuple[str, str]]:
    return [(e.kind.value, e.consumer) for e in events]


def test_a_failover_that_lost_what_a_cursor_read_asks_for_a_resync(
    pair: tuple[RedisServer, RedisServer],
) -> None:
    primary, replica = pair
    old = RedisPresenceRegistry.from_url(primary.url)
    new = RedisPresenceRegistry.from_url(replica.url)
    try:
        old.heartbeat("orders", "billing", "w1")
        old.heartbeat("orders", "billing", "w2")
        _, before = old.changes()
        _, of_mail = old.changes(queue="mail")
        _promote_behind(primary, replica)
        old.heartbeat("orders", "billing", "w3")  # lost: only the old primary has it
        old.heartbeat("mail", "b", "m1")  # the first entry of a log the replica never had
        events, cursor = old.changes(before)
        assert _kinds(events) == [("joined", "w3"), ("joined", "m1")]
        _, mail_cursor = old.changes(of_mail, queue="mail")
        # The marker replicated before: the same epoch on the promoted replica.
        assert new.client.get(new.plans.keys.epoch) == old.client.get(old.plans.keys.epoch)

        # Before: [] and the reader kept w3 and m1, which the new primary never had.
        with pytest.raises(PresenceResyncRequired, match="lost"):
            new.changes(cursor)
        with pytest.raises(PresenceResyncRequired, match="lost"):
            new.changes(mail_cursor, queue="mail")
        # New writes on the new primary go past the lost entries' ids: still told.
        new.heartbeat("orders", "billing", "w4")
        new.heartbeat("mail", "b", "m2")
        with pytest.raises(PresenceResyncRequired, match="lost"):
            new.changes(cursor)
        with pytest.raises(PresenceResyncRequired, match="lost"):
            new.changes(mail_cursor, queue="mail")
        # A cursor that had not read what was lost goes on: nothing it saw is missing.
        events, _ = new.changes(before)
        assert _kinds(events) == [("joined", "w4"), ("joined", "m2")]
    finally:
        old.close()
        new.close()


def test_follow_rereads_a_snapshot_after_a_failover_that_lost_what_it_read(
    pair: tuple[RedisServer, RedisServer],
) -> None:
    primary, replica = pair
    old = RedisPresenceRegistry.from_url(primary.url)
    new = RedisPresenceRegistry.from_url(replica.url)
    try:
        old.heartbeat("orders", "billing", "w1")
        _, cursor = old.changes()
        _promote_behind(primary, replica)
        old.heartbeat("orders", "billing", "ghost")
        events, cursor = old.changes(cursor)
        assert _kinds(events) == [("joined", "ghost")]
        new.heartbeat("orders", "billing", "w2")
        stream = new.follow(cursor=cursor, interval_s=0.01)
        first = next(stream)  # before: a FollowCursor, w2's join, and the ghost kept
        assert isinstance(first, FollowSnapshot), first
        assert {row.consumer for row in first.rows} == {"w1", "w2"}
        stream.close()  # type: ignore[attr-defined]
    finally:
        old.close()
        new.close()


# ---------------------------------------------------------------- keys deleted by hand


@pytest.fixture
def server(make_redis_server: MakeRedisServer) -> RedisServer:
    return make_redis_server()


def _until_snapshot(stream: Iterator[Any]) -> tuple[FollowSnapshot, list[Any]]:
    """The next `FollowSnapshot` of a follow, within MOST_READS reads, and what came first."""
    seen: list[Any] = []
    reads = 0
    for message in stream:
        if isinstance(message, FollowSnapshot):
            return message, seen
        seen.append(message)
        reads += isinstance(message, FollowCursor)
        assert reads < MOST_READS, "no new snapshot: the loss went unnoticed"
    raise AssertionError("the follow ended")


def _group_keys(registry: RedisPresenceRegistry, queue: str, group: str) -> list[str]:
    gk = registry.plans.keys.group(queue, group)
    return [gk.hb, gk.data, gk.meta]


def test_follow_rereads_a_snapshot_when_a_groups_keys_are_deleted(server: RedisServer) -> None:
    registry = RedisPresenceRegistry.from_url(server.url)
    try:
        registry.heartbeat("orders", "billing", "w1")
        registry.heartbeat("orders", "billing", "w2")
        registry.heartbeat("mail", "b", "m1")
        stream = registry.follow(interval_s=0.01)
        first = next(stream)
        assert isinstance(first, FollowSnapshot)
        assert {row.consumer for row in first.rows} == {"w1", "w2", "m1"}
        registry.client.delete(*_group_keys(registry, "orders", "billing"))
        snapshot, before = _until_snapshot(stream)
        assert {row.consumer for row in snapshot.rows} == {"m1"}
        assert not [m for m in before if isinstance(m, PresenceEvent)]
        stream.close()  # type: ignore[attr-defined]
    finally:
        registry.close()


def test_follow_rereads_a_snapshot_when_the_index_is_deleted(server: RedisServer) -> None:
    """A deleted index heals as each group beats again (a batched beat lists its group); a group
    nobody beats in any more stays out of it, with consumers no read finds: a follow that
    holds them re-reads what the index says."""
    registry = RedisPresenceRegistry.from_url(server.url)
    try:
        registry.heartbeat("orders", "billing", "dead")
        registry.heartbeat("mail", "b", "alive")
        stream = registry.follow(interval_s=0.01)
        first = next(stream)
        assert isinstance(first, FollowSnapshot)
        registry.client.delete(registry.plans.keys.groups)
        registry.heartbeat_many([("mail", "b", "alive", 0)])  # lists its group again
        snapshot, _ = _until_snapshot(stream)
        assert {row.consumer for row in snapshot.rows} == {"alive"}
        stream.close()  # type: ignore[attr-defined]
    finally:
        registry.close()


def test_a_group_emptied_by_its_events_is_no_loss(server: RedisServer) -> None:
    """Consumers that leave (or are pruned) empty their group with events: no resync, even
    when the group is gone before the read that gives its last event."""
    registry = RedisPresenceRegistry.from_url(server.url)
    try:
        registry.heartbeat("orders", "billing", "w1")
        registry.heartbeat("orders", "billing", "w2")
        stream = registry.follow(interval_s=0.01)
        assert isinstance(next(stream), FollowSnapshot)
        registry.deregister("orders", "billing", "w1")
        seen: list[Any] = []
        while len([m for m in seen if isinstance(m, FollowCursor)]) < 5:
            seen.append(message := next(stream))
            assert not isinstance(message, FollowSnapshot), seen
            if isinstance(message, FollowCursor) and len(seen) == 2:
                registry.deregister("orders", "billing", "w2")
        assert [e.consumer for e in seen if isinstance(e, PresenceEvent)] == ["w1", "w2"]
        stream.close()  # type: ignore[attr-defined]
    finally:
        registry.close()


def test_async_follow_rereads_a_snapshot_when_a_groups_keys_are_deleted(
    server: RedisServer,
) -> None:
    async def main() -> set[str]:
        async with AsyncRedisPresenceRegistry.from_url(server.url) as registry:
            await registry.heartbeat("orders", "billing", "w1")
            await registry.heartbeat("mail", "b", "m1")
            stream = registry.follow(interval_s=0.01)
            first = await anext(stream)
            assert isinstance(first, FollowSnapshot)
            gk = registry.plans.keys.group("orders", "billing")
            await registry.client.delete(gk.hb, gk.data)
            reads = 0
            async for message in stream:
                if isinstance(message, FollowSnapshot):
                    await stream.aclose()  # type: ignore[attr-defined]
                    return {row.consumer for row in message.rows}
                reads += isinstance(message, FollowCursor)
                assert reads < MOST_READS, "no new snapshot: the loss went unnoticed"
            raise AssertionError("the follow ended")

    assert asyncio.run(main()) == {"m1"}


# ---------------------------------------------------------------- the check, alone


def _row(queue: str, group: str, consumer: str) -> Any:
    return SimpleNamespace(queue=queue, group=group, consumer=consumer)


def _event(kind: EventKind, queue: str, group: str, consumer: str) -> PresenceEvent:
    return PresenceEvent(kind, queue, group, consumer, 1, 0)


def test_a_group_is_lost_only_when_still_gone_at_the_next_check() -> None:
    """The last consumer may leave between a read of the events and the check after it:
    the group is gone, its event not read yet. It is lost only when still gone at the next
    check (a whole read of the events lies between); on a cluster, also LOG_LAG_MS later,
    and INDEX_MARK_MS more for an index entry."""
    name = ("orders", "billing")
    held = HeldGroups(clustered=False, indexed=True)
    held.start([_row(*name, "w1")])
    held.check(held.due(100), {name: "keys"}, 1_000)  # a suspect
    held.apply(_event(EventKind.LEFT, *name, "w1"))  # its event: the group emptied
    assert held.due(100) == []
    held.check([], {}, 1_001)
    held.apply(_event(EventKind.JOINED, *name, "w2"))
    held.check(held.due(100), {name: "keys"}, 1_002)
    with pytest.raises(PresenceResyncRequired, match="'orders' / 'billing', its keys are gone"):
        held.check(held.due(100), {name: "keys"}, 1_003)
    held.start([_row(*name, "w1")])  # a resync starts over
    held.check(held.due(100), {name: "keys"}, 2_000)
    held.check(held.due(100), {}, 2_001)  # back: no longer a suspect
    held.check(held.due(100), {name: "index"}, 2_002)

    clustered = HeldGroups(clustered=True, indexed=True)
    clustered.start([_row(*name, "w1")])
    clustered.check(clustered.due(100), {name: "keys"}, 0)
    clustered.check(clustered.due(100), {name: "keys"}, LOG_LAG_MS - 1)
    with pytest.raises(PresenceResyncRequired):
        clustered.check(clustered.due(100), {name: "keys"}, LOG_LAG_MS)
    clustered.start([_row(*name, "w1")])
    clustered.check(clustered.due(100), {name: "index"}, 0)
    clustered.check(clustered.due(100), {name: "index"}, LOG_LAG_MS + INDEX_MARK_MS - 1)
    with pytest.raises(PresenceResyncRequired, match="no longer in the index"):
        clustered.check(clustered.due(100), {name: "index"}, LOG_LAG_MS + INDEX_MARK_MS)


def test_the_groups_checked_take_turns_suspects_first() -> None:
    held = HeldGroups(clustered=False, indexed=True)
    held.start([_row("q", f"g{i:03}", "c") for i in range(250)])
    seen: list[tuple[str, str]] = []
    for _ in range(3):
        due = held.due(100)
        assert len(due) <= 100
        seen += due
        held.check(due, {}, 0)
    assert set(seen) == set(held.held)  # every group within three reads
    held.check(held.due(100), {("q", "g200"): "keys"}, 1)
    assert held.due(100)[0] == ("q", "g200")


def test_on_a_cluster_a_lost_log_and_vanished_groups_are_told(cluster_client: Any) -> None:
    """The same checks across a cluster's nodes: a log deleted under a cursor that read it
    asks for a resync, and `vanished_groups` reads each group's node and the index's."""
    registry = RedisPresenceRegistry(cluster_client)
    registry.heartbeat("orders", "billing", "w1")
    registry.heartbeat("mail", "b", "m1")
    _, cursor = registry.changes()
    keys = registry.plans.keys
    cluster_client.delete(keys.queue_events("mail"))
    with pytest.raises(PresenceResyncRequired, match="lost events this cursor read"):
        registry.changes(cursor)
    names = [("orders", "billing"), ("mail", "b")]
    assert registry.execute(registry.plans.vanished_groups(names)) == {}
    gk = keys.group("orders", "billing")
    cluster_client.delete(gk.hb, gk.data)
    cluster_client.zrem(keys.groups, keys.group("mail", "b").member)
    gone = registry.execute(registry.plans.vanished_groups(names))
    assert gone == {("orders", "billing"): "keys", ("mail", "b"): "index"}
    one = registry.execute(registry.plans.vanished_groups(names, indexed=False))
    assert one == {("orders", "billing"): "keys"}

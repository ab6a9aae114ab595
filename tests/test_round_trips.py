"""Round trips per read at 1,000 groups: how many batches a plan yields (each batch is one
round trip on a standalone server: one pipeline), counted by stepping the plan through a
real server. Independent requests go in one batch: a snapshot sends each page's ``HLEN``
with the shared TTLs' ``GET``; `groups` sends each page's ``ZCARD`` (with the oldest beat,
for the metrics) with both counts."""

from __future__ import annotations

from typing import Any, TypeVar

import pytest
import redis

from redis_presence import PresenceDataError, PresenceDataWarning, RedisPresenceRegistry
from redis_presence.plans import Plan

T = TypeVar("T")
T0 = 1_796_000_000_123_456_000
GROUPS = 1_000  # ten index pages


def counted(plan: Plan[T], trips: list[int]) -> Plan[T]:
    """`plan`, appending to `trips` once per batch it yields."""
    try:
        batch = next(plan)
        while True:
            trips.append(len(batch))
            batch = plan.send((yield batch))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def trips_of(client: redis.Redis, make: Any) -> int:
    """The batches of one plan from a fresh registry (nothing cached: as a new process,
    or a scrape more than TTL_CACHE_MS after the last)."""
    registry = RedisPresenceRegistry(client)
    trips: list[int] = []
    registry.execute(counted(make(registry.plans), trips))
    return len(trips)


def test_round_trips_per_snapshot_and_per_scrape_at_1000_groups(
    redis_client: redis.Redis,
) -> None:
    writer = RedisPresenceRegistry(redis_client)
    beats = [(f"q{i % 10}", f"g{i}", "c", 0) for i in range(GROUPS)]
    writer.heartbeat_many(beats, now_ns=T0)
    snapshot = trips_of(redis_client, lambda plans: plans.snapshot(now_ns=T0))
    groups = trips_of(redis_client, lambda plans: plans.groups(now_ns=T0))
    scrape = trips_of(redis_client, lambda plans: plans.groups(now_ns=T0, details=True))
    # TIME, then per page of 100 groups: the page (ZRANGEBYLEX), each group's size with the
    # shared TTLs (GET; the protocol's GET rides with the first page's), the rows (HGETALL).
    # Before the batching: 41, as the size and the TTLs went in a round trip each.
    assert snapshot == 31
    # TIME, the declared groups, then per page: the page, its TTLs, and the sizes with both
    # counts. Before: 52, as the sizes and the two counts went in a round trip each.
    assert groups == 32
    # The scrape: TIME, the declared groups, the ten pages of the index (and its end), then
    # every group's size and oldest beat with the TTLs (an MGET and an EXISTS a page) in
    # one round trip; every consumer is active, so nothing else. Before: 32, with a round
    # trip of TTLs and one of counts a page.
    assert scrape == 13


def test_a_group_set_aside_in_the_batch_has_its_settings_ignored(
    redis_client: redis.Redis,
) -> None:
    """A page's sizes and shared settings go in one batch, but a group set aside by its
    size (a key of another type) is read no further: its stored TTL, here not one this
    package wrote, fails nothing (as when the settings were read after the sizes); a read
    of that one group fails on its size, the batch's first error, as it did."""
    registry = RedisPresenceRegistry(redis_client)
    registry.heartbeat("q", "good", "c", now_ns=T0)
    bad = registry.plans.keys.group("q", "bad")
    redis_client.zadd(registry.plans.keys.groups, {bad.member: 0})
    redis_client.set(bad.data, "not a hash")
    redis_client.set(bad.ttl, "not a ttl")
    with pytest.warns(PresenceDataWarning, match="set aside"):
        rows = registry.snapshot(now_ns=T0)
    assert [(row.group, row.consumer) for row in rows] == [("good", "c")]
    with pytest.raises(PresenceDataError, match="WRONGTYPE"):  # the first error of the batch
        registry.snapshot(queue="q", group="bad", now_ns=T0)

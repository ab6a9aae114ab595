"""Readers that pick groups from the fleet indexes (issue 33 items 3 and 4): a whole-fleet
prune visits the groups whose ``P:oldest`` is at or below their horizon, and the groups nobody
reads (``group_page(attention=True)``, the dashboard's ``idle=1``) are counted from those
whose ``P:newest`` is at or below their active horizon, plus the declared ones. Both must
answer what the full visit answers, on random fleets against a real redis-server: per-group
TTLs (kept in ``P:ttls``, some with a stale lower score there), declared groups, groups
missing from the indexes (as `migrate` leaves them before it seeds them) and prefixes in mode
1 (whose version-1 writers never keep the indexes)."""

from __future__ import annotations

import random
import time
from typing import Any, cast

import pytest
import redis
import redis.cluster

from redis_presence import RedisPresenceRegistry
from redis_presence.model import DEFAULT_PRESENCE_TTL_MS, DEFAULT_RETENTION_TTLS
from redis_presence.plans import Limits

MS = 1_000_000
SEEDS = range(16)
PREFIX_TTL_MS = 3_000

Fleet = dict[str, Any]


def _fleet(rng: random.Random, base_ns: int) -> Fleet:
    """Random groups over a few queues: each consumer beats once, at most 60 s before
    `base_ns` (so every state and retention is met); some groups have a TTL of their own,
    some are declared (some of those have no consumer)."""
    beats = []
    own: dict[tuple[str, str], int] = {}
    declared: dict[tuple[str, str], int] = {}
    for n in range(rng.randrange(20, 60)):
        pair = (f"q{n % 4}", f"g{n:03d}")
        if rng.random() < 0.3:
            own[pair] = rng.choice([500, 1_000, 2_000, 10_000])
        if rng.random() < 0.2:
            declared[pair] = rng.randrange(1, 4)
        if rng.random() < 0.1:
            continue  # declared or not, no consumer
        for c in range(rng.randrange(1, 6)):
            age_ms = rng.choice([0, 100, 900, 2_500, 5_000, 20_000, 59_000, rng.randrange(60_000)])
            beats.append((*pair, f"c{c}", base_ns - age_ms * MS - rng.randrange(MS)))
    return {"beats": beats, "own": own, "declared": declared}


def _write(
    client: redis.Redis, prefix: str, fleet: Fleet, rng: random.Random, mode: str
) -> RedisPresenceRegistry:
    # Odd seeds shrink every bound, so that each read crosses its pages (every_group's
    # overlapping ranks, ZMSCORE and ZRANGEBYSCORE pages, prune calls and budgets).
    limits = Limits(*[2] * len(Limits._fields)) if rng.random() < 0.5 else Limits()
    registry = RedisPresenceRegistry(client, prefix=prefix, max_future_ms=None, limits=limits)
    if mode == "1":
        client.set(f"{prefix}:protocol", "1")
    registry.set_ttl(PREFIX_TTL_MS)
    for (q, g), ttl in fleet["own"].items():
        registry.set_ttl(ttl, queue=q, group=g)
    for (q, g), least in fleet["declared"].items():
        registry.expect(q, g, least)
    for q, g, c, at in sorted(fleet["beats"], key=lambda b: b[3]):
        registry.heartbeat(q, g, c, now_ns=at)
    members = _members(client, f"{prefix}:groups")
    if mode == "1":
        # What version-1 writers leave: groups they listed that no index holds, and groups
        # a consumer of theirs joined with an old beat that P:oldest says nothing of.
        for member in members:
            if rng.random() < 0.4:
                client.zrem(f"{prefix}:oldest", member)
                client.zrem(f"{prefix}:newest", member)
            elif rng.random() < 0.4:
                client.zadd(f"{prefix}:oldest", {member: 10**17})
    elif rng.random() < 0.5:
        # A prefix `migrate` said 2 of and has not seeded yet (some groups missing).
        for member in members:
            if rng.random() < 0.2:
                client.zrem(f"{prefix}:oldest", member)
                client.zrem(f"{prefix}:newest", member)
    if mode == "2" and members and rng.random() < 0.5:
        # P:ttls is a hint: a score below a group's TTL (a seed that raced a set_ttl), or
        # an entry of a group with no TTL of its own, only widens the readers' range.
        client.zadd(f"{prefix}:ttls", {rng.choice(members): rng.choice([1, 200, 2_500])})
    return registry


def _members(client: redis.Redis, key: str) -> list[bytes]:
    return cast("list[bytes]", client.zrange(key, 0, -1))


def _ttl_of(fleet: Fleet, pair: tuple[str, str], ttl_ms: int | None) -> int:
    if ttl_ms is not None:
        return ttl_ms
    return int(fleet["own"].get(pair, PREFIX_TTL_MS or DEFAULT_PRESENCE_TTL_MS))


def _calls(client: redis.Redis) -> dict[str, int]:
    stats: dict[str, Any] = client.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}


def _delta(before: dict[str, int], after: dict[str, int], name: str) -> int:
    return after.get(name, 0) - before.get(name, 0)


@pytest.mark.redis_server
@pytest.mark.parametrize("seed", SEEDS)
def test_a_prune_through_p_oldest_removes_what_the_full_visit_removes(
    redis_client: redis.Redis, seed: int
) -> None:
    rng = random.Random(seed)
    base = time.time_ns() - 3_600_000 * MS
    fleet = _fleet(rng, base)
    mode = "1" if seed % 3 == 2 else "2"
    prefix = f"fx{seed}"
    registry = _write(redis_client, prefix, fleet, rng, mode)
    ttl_ms = rng.choice([None, None, 1_000, 3_000])
    retention = rng.choice([0, None, 700, 4_000])
    now = base + rng.randrange(0, 30_000) * MS
    before = {(r.queue, r.group, r.consumer): r.last_heartbeat_ns for r in registry.snapshot()}
    doomed = set()
    for (q, g, c), hb in before.items():
        ttl = _ttl_of(fleet, (q, g), ttl_ms)
        keep = DEFAULT_RETENTION_TTLS * ttl if retention is None else retention
        if max(0, now - hb) // MS > 2 * ttl + keep:
            doomed.add((q, g, c))
    removed = registry.prune_expired(now_ns=now, ttl_ms=ttl_ms, retention_ms=retention)
    after = {(r.queue, r.group, r.consumer) for r in registry.snapshot()}
    assert (removed, after) == (len(doomed), set(before) - doomed)
    # A second pass finds nothing; at version 2 it runs no script at all (every visited
    # group's P:oldest now says its real oldest beat, above the horizon).
    calls = _calls(redis_client)
    assert registry.prune_expired(now_ns=now, ttl_ms=ttl_ms, retention_ms=retention) == 0
    scripts = _delta(calls, _calls(redis_client), "evalsha")
    if mode == "2":
        assert scripts == 0
    else:
        assert scripts >= (1 if after else 0)  # mode 1: every group, as before
    # Every group left holds its real oldest beat in P:oldest (mode 2: kept and raised).
    if mode == "2":
        for member in _members(redis_client, f"{prefix}:groups"):
            hb_key: bytes = member[: -len(b":c")] + b":hb"
            first = redis_client.zrange(hb_key, 0, 0, withscores=True)
            assert redis_client.zscore(f"{prefix}:oldest", member) == first[0][1]


def _attention_pages(
    registry: RedisPresenceRegistry, now: int, ttl_ms: int | None, limit: int
) -> list[tuple[Any, ...]]:
    shown: list[tuple[Any, ...]] = []
    after = None
    while True:
        page = registry.group_page(
            after=after,
            limit=limit,
            match=lambda g: g.active == 0 or g.below,
            now_ns=now,
            ttl_ms=ttl_ms,
            attention=True,
        )
        shown += [
            (g.queue, g.group, g.active, g.stale, g.expired, g.min_active) for g in page.groups
        ]
        if not page.more:
            return shown
        after = (page.groups[-1].queue, page.groups[-1].group)


def _attention_pages_back(
    registry: RedisPresenceRegistry, now: int, ttl_ms: int | None, limit: int, last: tuple[Any, ...]
) -> list[tuple[Any, ...]]:
    """The same rows, paged backwards (``before``) from the last one."""
    shown: list[tuple[Any, ...]] = [last]
    before = (last[0], last[1])
    while True:
        page = registry.group_page(
            before=before,
            limit=limit,
            match=lambda g: g.active == 0 or g.below,
            now_ns=now,
            ttl_ms=ttl_ms,
            attention=True,
        )
        rows = [(g.queue, g.group, g.active, g.stale, g.expired, g.min_active) for g in page.groups]
        shown = rows + shown
        if not page.more or not rows:
            return shown
        before = (rows[0][0], rows[0][1])


@pytest.mark.redis_server
@pytest.mark.parametrize("seed", SEEDS)
def test_groups_nobody_reads_through_p_newest_are_the_full_visits(
    redis_client: redis.Redis, seed: int
) -> None:
    rng = random.Random(1_000 + seed)
    base = time.time_ns() - 3_600_000 * MS
    fleet = _fleet(rng, base)
    mode = "1" if seed % 3 == 2 else "2"
    registry = _write(redis_client, f"fi{seed}", fleet, rng, mode)
    for now in (base, base + rng.randrange(1, 3_000) * MS, base + 25_000 * MS):
        for ttl_ms in (None, 1_000, 5_000):
            full = [
                (g.queue, g.group, g.active, g.stale, g.expired, g.min_active)
                for g in registry.groups(now_ns=now, ttl_ms=ttl_ms)
                if g.active == 0 or g.below
            ]
            calls = _calls(redis_client)
            limit = rng.choice([3, 7, 1_000])
            shown = _attention_pages(registry, now, ttl_ms, limit)
            counted = _delta(calls, _calls(redis_client), "zcard")
            assert shown == full, (now - base, ttl_ms)
            if full:
                back = _attention_pages_back(registry, now, ttl_ms, limit, full[-1])
                assert back == full, (now - base, ttl_ms, "backwards")
            complete = redis_client.zcard(f"fi{seed}:newest") == redis_client.zcard(
                f"fi{seed}:groups"
            )
            if mode == "2" and complete and ttl_ms is not None and limit == 1_000:
                # Only the candidates are counted (one ZCARD each): each consumer beat once,
                # so P:newest is each group's newest beat, and the candidates are the groups
                # shown and the declared ones; and fleet_indexes' three ZCARD.
                assert counted <= len(full) + len(fleet["declared"]) + 3


@pytest.mark.redis_server
def test_a_page_of_groups_nobody_reads_costs_its_candidates(redis_client: redis.Redis) -> None:
    """2,000 groups, 5 of them unread: the page counts those (and the declared one), not
    every group, and reads P:newest once."""
    registry = RedisPresenceRegistry(redis_client, prefix="fcost", max_future_ms=None)
    now = time.time_ns()
    beats = [(f"q{n % 10}", f"g{n:04d}", "c", 0) for n in range(2_000)]
    registry.heartbeat_many(beats, now_ns=now)
    for n in range(0, 2_000, 400):
        registry.deregister(f"q{n % 10}", f"g{n:04d}", "c")
        registry.heartbeat(f"q{n % 10}", f"g{n:04d}", "old", now_ns=now - 120_000 * MS)
    registry.expect("q0", "declared-only", 1)
    calls = _calls(redis_client)
    page = registry.group_page(now_ns=now, ttl_ms=30_000, attention=True, match=lambda g: True)
    counted = _delta(calls, _calls(redis_client), "zcard")
    unread = [f"g{n:04d}" for n in range(0, 2_000, 400)]  # all of queue q0
    assert [g.group for g in page.groups] == ["declared-only", *unread]
    assert [g.active for g in page.groups] == [0] * 6
    assert counted <= 6 + 3  # the six groups, and fleet_indexes: ZCARD of three indexes
    assert _delta(calls, _calls(redis_client), "zrangebylex") == 1  # P:expects, not P:groups


@pytest.mark.timeout(120)
def test_on_a_cluster_both_readers_visit_every_group(
    cluster_client: redis.cluster.RedisCluster,
) -> None:
    """Nobody keeps the fleet indexes on a cluster: the prune and the groups nobody reads
    are the full visit's, and neither index is read or written."""
    registry = RedisPresenceRegistry(cluster_client, prefix="fcl", max_future_ms=None)
    now = time.time_ns()
    for n in range(12):
        age_ms = [0, 5_000, 200_000][n % 3]
        registry.heartbeat(f"q{n % 4}", f"g{n}", "c", now_ns=now - age_ms * MS)
    registry.expect("q0", "nobody", 1)
    full = [
        (g.queue, g.group)
        for g in registry.groups(now_ns=now, ttl_ms=1_000)
        if g.active == 0 or g.below
    ]
    page = registry.group_page(
        limit=100, now_ns=now, ttl_ms=1_000, attention=True, match=lambda g: g.active == 0
    )
    assert [(g.queue, g.group) for g in page.groups] == full
    assert registry.prune_expired(now_ns=now, ttl_ms=1_000) == 8  # all but the 4 active
    assert not cluster_client.exists("fcl:newest", "fcl:oldest")


@pytest.mark.redis_server
@pytest.mark.parametrize("batched", [False, True])
def test_a_group_whose_newest_beat_went_back_in_time_is_unread_at_once(
    redis_client: redis.Redis, batched: bool
) -> None:
    registry = RedisPresenceRegistry(redis_client, prefix="back", max_future_ms=None)
    now = time.time_ns()
    registry.heartbeat("q", "g", "only", now_ns=now)
    if batched:
        registry.heartbeat_many([("q", "g", "only", 0)], now_ns=now - 60_000 * MS)
    else:
        registry.heartbeat("q", "g", "only", now_ns=now - 60_000 * MS)
    page = registry.group_page(now_ns=now, ttl_ms=1_000, attention=True)
    assert [g.group for g in page.groups] == ["g"]


@pytest.mark.redis_server
def test_a_group_whose_newest_consumer_left_is_unread_at_once(redis_client: redis.Redis) -> None:
    registry = RedisPresenceRegistry(redis_client, prefix="flag", max_future_ms=None)
    now = time.time_ns()
    registry.heartbeat("q", "g", "old", now_ns=now - 60_000 * MS)
    registry.heartbeat("q", "g", "new", now_ns=now)
    registry.deregister("q", "g", "new")
    page = registry.group_page(now_ns=now, ttl_ms=1_000, attention=True)
    assert [g.group for g in page.groups] == ["g"]


@pytest.mark.redis_server
def test_that_group_is_unread_a_ttl_after_the_beat_of_the_consumer_that_left(
    redis_client: redis.Redis,
) -> None:
    registry = RedisPresenceRegistry(redis_client, prefix="flag2", max_future_ms=None)
    now = time.time_ns()
    registry.heartbeat("q", "g", "old", now_ns=now - 60_000 * MS)
    registry.heartbeat("q", "g", "new", now_ns=now)
    registry.deregister("q", "g", "new")
    later = now + 1_001 * MS
    page = registry.group_page(now_ns=later, ttl_ms=1_000, attention=True)
    assert [g.group for g in page.groups] == ["g"]

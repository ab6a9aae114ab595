"""What a `/metrics` scrape reads (`groups(details=True)`, issue 33 item 2): the same answer
as the in-process model at every edge, and at most 4 commands a group, counted by stepping
the plan through a real server."""

from __future__ import annotations

import collections
import random
from typing import Any, TypeVar

import pytest
import redis

from redis_presence import ConsumerPresenceRegistry, RedisPresenceRegistry
from redis_presence.plans import Plan
from redis_presence.plans.limits import Limits

T = TypeVar("T")
T0 = 1_796_000_000_123_456_000
TTL = 10_000
MS = 1_000_000
ACTIVE_AFTER = T0 - (TTL + 1) * MS
EXPIRED_AT = T0 - (2 * TTL + 1) * MS


def sent(plan: Plan[T], commands: list[str]) -> Plan[T]:
    """`plan`, noting the name of every command of every batch it yields."""
    try:
        batch = next(plan)
        while True:
            commands += (getattr(request, "name", "script") for request in batch)
            batch = plan.send((yield batch))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def scrape_commands(client: redis.Redis, prefix: str) -> list[str]:
    """The commands of one scrape's read from a fresh registry (nothing cached)."""
    registry = RedisPresenceRegistry(client, prefix=prefix)
    commands: list[str] = []
    registry.execute(sent(registry.plans.groups(now_ns=T0, details=True), commands))
    return commands


# Beats of one group of each kind, relative to the horizons.
KINDS: dict[str, list[int]] = {
    "active": [T0, T0 - 5 * MS, T0 - TTL * MS],
    "one stale": [T0, T0 - 5 * MS, T0 - (TTL + 500) * MS],
    "stale": [T0, T0 - (TTL + 500) * MS, T0 - (TTL + 900) * MS],
    "expired": [T0, T0 - 3 * TTL * MS, T0 - 4 * TTL * MS],
    "stale and expired": [T0, T0 - (TTL + 500) * MS, T0 - (TTL + 900) * MS, T0 - 3 * TTL * MS],
}
"""What one group of each kind costs a scrape, in commands: its size and oldest beat; the
others' two counts; then a read of those on the active edge when more than the oldest may
be stale, and the expired ones' names and stored values (their leases)."""
COST = {"active": 2, "one stale": 4, "stale": 5, "expired": 6, "stale and expired": 7}


def _write(registry: Any, queue: str, group: str, beats: list[int]) -> None:
    for k, ns in enumerate(beats):
        registry.heartbeat(queue, group, f"c{k}", k % 3, now_ns=ns)


@pytest.mark.parametrize("kind", list(KINDS))
def test_commands_per_group_of_each_kind(redis_client: redis.Redis, kind: str) -> None:
    prefix = kind.replace(" ", "-")
    writer = RedisPresenceRegistry(redis_client, prefix=prefix, max_future_ms=None)
    writer.set_ttl(TTL)
    for g in range(100):  # one index page
        _write(writer, "q", f"g{g:03d}", KINDS[kind])
    commands = scrape_commands(redis_client, prefix)
    # The declared groups' index, the page of groups and the end of the index, the shared
    # TTLs (the prefix's and 100 groups': two MGETs and two EXISTS of at most 100 keys) and
    # the protocol version (GET): 8, and the groups' own.
    fixed = collections.Counter({"ZRANGEBYLEX": 3, "GET": 1, "MGET": 2, "EXISTS": 2})
    assert collections.Counter(c for c in commands if c in fixed) == fixed
    assert (len(commands) - 8) / 100 == COST[kind]


CAPACITY_COST = {kind: cost + 2 for kind, cost in COST.items()}
"""With ``capacity=True`` (what ``serve`` scrapes by default, protocol version 2's capacity,
free slots, draining and conflicts): each group's live consumers' names
(``ZRANGEBYSCORE``) and values (``HMGET``), two commands more (up to `Limits.consumers`
live consumers; two more for each further page of them)."""


@pytest.mark.parametrize("kind", list(KINDS))
def test_commands_per_group_with_capacity(redis_client: redis.Redis, kind: str) -> None:
    prefix = kind.replace(" ", "-")
    writer = RedisPresenceRegistry(redis_client, prefix=prefix, max_future_ms=None)
    writer.set_ttl(TTL)
    for g in range(100):
        _write(writer, "q", f"g{g:03d}", KINDS[kind])
    registry = RedisPresenceRegistry(redis_client, prefix=prefix)
    commands: list[str] = []
    plan = registry.plans.groups(now_ns=T0, details=True, capacity=True)
    registry.execute(sent(plan, commands))
    fixed = collections.Counter({"ZRANGEBYLEX": 3, "GET": 1, "MGET": 2, "EXISTS": 2})
    assert collections.Counter(c for c in commands if c in fixed) == fixed
    assert (len(commands) - 8) / 100 == CAPACITY_COST[kind]


def test_a_scrape_of_a_mostly_healthy_fleet_sends_at_most_4_commands_a_group(
    redis_client: redis.Redis,
) -> None:
    """Three groups in five all active, one with stale consumers, one with expired ones
    (and 7 before: a TTL, the size, the oldest beat and two counts with their edges)."""
    writer = RedisPresenceRegistry(redis_client, max_future_ms=None)
    writer.set_ttl(TTL)
    kinds = ["active", "active", "active", "stale", "expired"]
    for g in range(500):
        _write(writer, f"q{g % 7}", f"g{g:03d}", KINDS[kinds[g % 5]])
    commands = scrape_commands(redis_client, "presence")
    assert len(commands) / 500 <= 4.0
    # The declared groups' index, 5 pages of groups and the end, 501 TTLs (6 MGETs and 6
    # EXISTS), the protocol version: 20; and each group's own.
    assert len(commands) == 20 + 100 * (2 + 2 + 2 + 5 + 6)


def _edge_beats(rng: random.Random) -> list[int]:
    """Beats on and around both horizons (their microsecond, to the nanosecond), and some
    anywhere, so that every way a group can be read is taken."""
    near = []
    for horizon in (ACTIVE_AFTER, EXPIRED_AT):
        us = horizon // 1_000 * 1_000
        near += [horizon, horizon + 1, horizon - 1, us, us + 999, us - 1, us + 1_000]
    anywhere = [T0 - rng.randrange(0, 3 * TTL * MS) for _ in range(6)]
    return near + anywhere + [T0]


@pytest.mark.parametrize("seed", range(6))
def test_details_agree_with_the_model_at_every_edge(redis_client: redis.Redis, seed: int) -> None:
    rng = random.Random(seed)
    pool = _edge_beats(rng)
    small = Limits(groups=3, consumers=2)  # every page boundary crossed
    redis_registry = RedisPresenceRegistry(redis_client, max_future_ms=None, limits=small)
    model = ConsumerPresenceRegistry()
    for registry in (redis_registry, model):
        registry.set_ttl(TTL)
    for g in range(12):
        size = rng.choice([1, 1, 2, 3, 5, 8])
        beats = [rng.choice(pool) for _ in range(size)]
        for k, ns in enumerate(beats):
            for registry in (redis_registry, model):
                registry.heartbeat(f"q{g % 4}", f"g{g}", f"c{k}", (g + k) % 4, now_ns=ns)
    # The model keeps a beat to the nanosecond; Redis' oldest beat is its score (whole µs).
    for ttl in (None, TTL, TTL // 2):
        found = redis_registry.groups(now_ns=T0, ttl_ms=ttl, details=True)
        expected = model.groups(now_ns=T0, ttl_ms=ttl, details=True)
        assert found == expected, ttl


OLD_READER = [
    *("select", "time", "get", "zrangebylex", "hlen", "hgetall", "hscan", "zcount"),
    *("zrangebyscore", "hmget", "zcard", "xrange", "xinfo|stream"),
]
"""The reader role of docs/production.md before the scrape read the TTLs by MGET."""


def test_a_refused_mget_reads_a_get_a_key(redis_client: redis.Redis) -> None:
    """A reader whose role predates MGET (``+get`` only) gets the same answer, reading each
    shared TTL by a ``GET``, and asks no more MGETs."""
    writer = RedisPresenceRegistry(redis_client, max_future_ms=None)
    writer.set_ttl(TTL)
    for g in range(5):
        _write(writer, "q", f"g{g}", KINDS["stale and expired"])
    writer.set_ttl(TTL // 2, queue="q", group="g3")
    redis_client.acl_setuser(
        "old-reader",
        enabled=True,
        reset=True,
        passwords=["+secret"],
        keys=["presence:*"],
        reset_channels=True,
        commands=["-@all", *(f"+{c}" for c in OLD_READER)],
    )
    pool = redis_client.connection_pool.connection_kwargs
    reader_client = redis.Redis(
        host=pool["host"], port=pool["port"], username="old-reader", password="secret"
    )
    try:
        reader = RedisPresenceRegistry(reader_client)
        expected = writer.groups(now_ns=T0, details=True)
        assert reader.groups(now_ns=T0, details=True) == expected
        commands: list[str] = []
        reader.plans.settings_cache.forget()  # read the TTLs again
        reader.execute(sent(reader.plans.groups(now_ns=T0, details=True), commands))
        assert "MGET" not in commands
        assert "GET" in commands
    finally:
        reader_client.close()
        redis_client.acl_deluser("old-reader")

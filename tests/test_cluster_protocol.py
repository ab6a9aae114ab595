"""The cluster index protocol (docs/protocol.md, section 14) under every interleaving of its
steps.

Each scenario runs two or three plans of `Planner(clustered=True)` by hand against a real
three-master cluster, one batch at a time, in every possible order (each ordering on a
fresh prefix). After all plans have returned:

- every group with a tracked consumer is in the index (no live consumer is lost), and
- after one more `prune_expired`, the index lists exactly the non-empty groups (no stale
  entry outlives a prune, whatever the race left behind);

and after every step, the invariant the proof rests on holds: a group with a mark is not
empty.

A mutant planner without the protocol's re-check step must fail the first property: the
exploration is thorough enough to find the race the re-check exists for.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis.cluster

from redis_presence import PresenceBatchError, PresenceDataError, RedisPresenceRegistry
from redis_presence.keys import GroupKeys
from redis_presence.plans import Command, Plan, Planner, Request
from redis_presence.plans.index import IndexPlans
from redis_presence.plans.limits import Limits

MS = 1_000_000
T0 = 1_796_000_000_123_456_000
TTL_MS = 30_000
OLD = T0 - 3 * TTL_MS * MS  # expired at T0
Q, G = "q", "g"

pytestmark = pytest.mark.timeout(120)

_prefixes = itertools.count()


@dataclass
class Scenario:
    """Beats written before the race, and the racing operations (name -> plan factory)."""

    name: str
    before: list[tuple[str, int]]  # (consumer, now_ns) of group (Q, G)
    racers: dict[str, Callable[[Planner], Plan[Any]]]
    limits: Limits = field(default_factory=Limits)
    results: dict[str, Any] = field(default_factory=dict)


def beat(consumer: str, now_ns: int = T0) -> Callable[[Planner], Plan[Any]]:
    return lambda p: p.heartbeat_many([(Q, G, consumer, 0)], now_ns)


def deregister(consumer: str) -> Callable[[Planner], Plan[Any]]:
    return lambda p: p.deregister(Q, G, consumer)


def prune() -> Callable[[Planner], Plan[Any]]:
    return lambda p: p.prune_expired(T0, TTL_MS)


SCENARIOS = [
    Scenario("prune-last-vs-new-consumer", [("old", OLD)], {"P": prune(), "H": beat("new")}),
    Scenario(
        "deregister-last-vs-new-consumer", [("c1", T0)], {"D": deregister("c1"), "H": beat("c2")}
    ),
    Scenario("deregister-vs-same-consumer", [("c1", T0)], {"D": deregister("c1"), "H": beat("c1")}),
    Scenario("first-beat-vs-deregister", [], {"H": beat("c1"), "D": deregister("c1")}),
    Scenario(
        "first-beats-vs-prune", [("old", OLD)], {"P": prune(), "H": beat("a"), "I": beat("b")}
    ),
    Scenario(
        "two-removers-vs-beat",
        [("old", OLD), ("c0", T0)],
        {"P": prune(), "D": deregister("c0"), "H": beat("c2")},
    ),
    Scenario(
        "beat-deregister-beat",
        [("c1", T0)],
        {"D": deregister("c1"), "H": beat("c1"), "I": beat("c2")},
    ),
    # A prune whose budget runs out in the group it empties (one consumer a call).
    Scenario(
        "short-prune-empties-vs-new-consumer",
        [("old", OLD)],
        {"P": prune(), "H": beat("new")},
        Limits(prune_consumers=1),
    ),
]


def one_batch(batch: list[Request]) -> Plan[list[Any]]:
    """A plan that sends `batch` and returns its replies: one step of another plan."""
    return (yield batch)


class Runner:
    """Steps plans one batch at a time through a registry's own batch execution."""

    def __init__(
        self,
        client: redis.cluster.RedisCluster,
        planner: type[Planner],
        *,
        each_step: bool = True,
    ) -> None:
        self.client = client
        self.planner = planner
        self.each_step = each_step  # check the invariant after every step

    def fresh(self, limits: Limits) -> tuple[RedisPresenceRegistry, Planner]:
        registry = RedisPresenceRegistry(self.client, prefix=f"p{next(_prefixes)}")
        plans = self.planner(registry.prefix, clustered=True, limits=limits)
        return registry, plans

    def run(self, scenario: Scenario, schedule: list[str], extend: list[list[str]]) -> list[str]:
        """Run `scenario` in the order `schedule` names, completing it with the first
        runnable plan; every other choice beyond the prefix is queued on `extend`."""
        registry, plans = self.fresh(scenario.limits)
        for consumer, now in scenario.before:
            registry.execute(plans.heartbeat_many([(Q, G, consumer, 0)], now))
        running: dict[str, tuple[Plan[Any], list[Request]]] = {}
        for name, make in scenario.racers.items():
            plan = make(plans)
            try:
                running[name] = (plan, next(plan))  # building a batch does no I/O
            except StopIteration as done:
                scenario.results[name] = done.value
        order = list(schedule)
        step = 0
        while running:
            names = sorted(running)
            if step < len(order):
                choice = order[step]
            else:
                choice = names[0]
                extend.extend([*order, other] for other in names[1:])
                order.append(choice)
            plan, batch = running.pop(choice)
            try:
                running[choice] = (plan, plan.send(registry.execute(one_batch(batch))))
            except StopIteration as done:
                scenario.results[choice] = done.value
            step += 1
            if self.each_step:
                self.invariant(registry, f"{scenario.name}, after {''.join(order[:step])}")
        self.check(registry, scenario, order)
        return order

    def invariant(self, registry: RedisPresenceRegistry, where: str) -> None:
        """A group with a mark is not empty (docs/protocol.md, section 14)."""
        gk = registry.plans.keys.group(Q, G)
        if self.client.exists(gk.mark):
            assert self.client.exists(gk.hb), f"empty group with a mark: {where}"

    def check(self, registry: RedisPresenceRegistry, scenario: Scenario, order: list[str]) -> None:
        keys = registry.plans.keys
        gk = keys.group(Q, G)
        where = f"{scenario.name}, order {''.join(order)}"
        if self.client.zcard(gk.hb):
            score = self.client.zscore(keys.groups, gk.member)
            assert score is not None, f"live group unlisted: {where}"
        registry.prune_expired(now_ns=T0, ttl_ms=TTL_MS)
        members: list[bytes] = self.client.zrange(keys.groups, 0, -1)  # type: ignore[assignment]
        listed = {keys.from_member(m) for m in members}
        alive = {gk} if self.client.zcard(gk.hb) else set()
        assert listed == alive, f"index {listed} != non-empty groups {alive}: {where}"
        assert self.client.exists(gk.hb, gk.data, gk.mark) == (3 if alive else 0), where


def explore(runner: Runner, scenario: Scenario) -> int:
    """Run every interleaving of the scenario's batches; returns how many there were."""
    todo: list[list[str]] = [[]]
    seen = 0
    while todo:
        runner.run(scenario, todo.pop(), todo)
        seen += 1
    return seen


SLOW_SCENARIOS = {"first-beats-vs-prune", "two-removers-vs-beat"}
"""Three operations with many steps each: more than 5 s of interleavings (``slow``)."""


@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(s, id=s.name, marks=[pytest.mark.slow] if s.name in SLOW_SCENARIOS else [])
        for s in SCENARIOS
    ],
)
def test_every_interleaving_keeps_live_groups_listed(
    cluster_client: redis.cluster.RedisCluster, scenario: Scenario
) -> None:
    runs = explore(Runner(cluster_client, Planner), scenario)
    assert runs >= 2 ** (len(scenario.racers) - 1)


def test_a_prune_that_runs_out_in_the_group_it_empties_loses_no_live_group(
    cluster_client: redis.cluster.RedisCluster,
) -> None:
    """The race the review found: a deregister empties the group (its mark goes), a delayed
    first beat refills it (mark set), a prune of one consumer a call removes that beat and
    runs out in the group; the beat lists the group, the deregister unlists it and finds it
    empty; a new consumer's beat then finds the mark, if the prune kept it, and is never
    listed (for the mark's 60 s)."""
    scenario = Scenario(
        "deregister-delayed-beat-short-prune-beat",
        [("c1", T0)],
        {"D": deregister("c1"), "H": beat("old", OLD), "P": prune(), "I": beat("new")},
        Limits(prune_consumers=1),
    )
    # D's script, H's script, P's page and first prune.lua call, H's listing, D's log, ZREM
    # and EXISTS, then I whole; the rest in any order.
    Runner(cluster_client, Planner, each_step=False).run(scenario, list("DHPPHDDDII"), [])


@pytest.mark.parametrize("backend", ["cluster_client", "redis_client"])
def test_a_group_whose_every_beat_is_refused_is_neither_marked_nor_listed(
    request: pytest.FixtureRequest, backend: str
) -> None:
    """A beat refused for a spoilt stored value writes nothing, the index included (as
    ``heartbeat.lua`` refuses it), on a cluster and a standalone server alike: the spoilt
    value is reported to the writer and by a read of that consumer, and no prune of the
    fleet meets an empty group holding it, which it would drop with the value."""
    client = request.getfixturevalue(backend)
    registry = RedisPresenceRegistry(client, prefix=f"p{next(_prefixes)}")
    keys = registry.plans.keys
    gk, other = keys.group(Q, G), keys.group(Q, "h")
    client.hset(gk.data, "x", "garbage")
    with pytest.raises(PresenceBatchError) as caught:
        registry.heartbeat_many([(Q, G, "x", 0), (Q, "h", "y", 0)], now_ns=T0)
    assert list(caught.value.refused) == [(Q, G, "x")]
    assert client.exists(gk.hb, gk.mark) == 0
    assert client.zscore(keys.groups, gk.member) is None
    assert client.zscore(keys.groups, other.member) is not None  # written: listed
    assert [(row.queue, row.group) for row in registry.groups(now_ns=T0)] == [(Q, "h")]
    assert registry.prune_expired(now_ns=T0, ttl_ms=TTL_MS) == 0
    assert client.hget(gk.data, "x") == b"garbage"  # set aside, never deleted
    with pytest.raises(PresenceDataError, match="did not write"):
        registry.consumer(Q, G, "x", now_ns=T0)


@pytest.mark.parametrize("backend", ["cluster_client", "redis_client"])
def test_dropping_an_empty_group_leaves_the_values_of_no_consumer_in_place(
    request: pytest.FixtureRequest, backend: str
) -> None:
    """A group's hash goes with its last consumer's field; one still there when its group
    is dropped holds stored values of no consumer (another program's, a spoilt one here).
    A prune that finds the group empty, or empties it, and a deregister that empties it,
    delete its mark and unlist it, but leave those values where they are; the prune
    reports the group."""
    client = request.getfixturevalue(backend)
    registry = RedisPresenceRegistry(client, prefix=f"p{next(_prefixes)}")
    keys = registry.plans.keys
    found, emptied, left = (keys.group(Q, name) for name in ("found", "emptied", "left"))
    registry.heartbeat_many([(Q, "emptied", "old", 0), (Q, "left", "c1", 0)], now_ns=OLD)
    registry.heartbeat_many([(Q, "left", "c1", 0)], now_ns=T0)
    for gk in (found, emptied, left):
        client.hset(gk.data, "x", "garbage")
    registry.deregister(Q, "left", "c1")
    for name in ("found", "emptied"):  # a prune of the fleet never meets "found": unlisted
        with pytest.raises(PresenceBatchError) as caught:
            registry.prune_expired(now_ns=T0, ttl_ms=TTL_MS, queue=Q, group=name)
        assert caught.value.completed == (1 if name == "emptied" else 0)
        assert "stored values of no consumer" in str(caught.value.failed[(Q, name)])
    for gk in (found, emptied, left):
        assert client.hgetall(gk.data) == {b"x": b"garbage"}, gk
        assert client.exists(gk.hb, gk.mark, gk.meta) == 0, gk
    assert client.zcard(keys.groups) == 0


def unlist_without_recheck(self: IndexPlans, groups: list[GroupKeys]) -> Plan[None]:
    """The protocol without step 2's re-check: ZREM and hope."""
    yield [Command("ZREM", (self.keys.groups, *(gk.member for gk in groups)))]


def test_the_exploration_finds_the_race_the_recheck_prevents(
    cluster_client: redis.cluster.RedisCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(IndexPlans, "unlist", unlist_without_recheck)  # every planner's
    with pytest.raises(AssertionError, match="live group unlisted"):
        explore(Runner(cluster_client, Planner), SCENARIOS[0])

"""The planner's shape (docs/concepts.md, "Where the code lives"): a thin facade over job
classes that each own no state, and two caches that own what plans share.

- `Planner.__mro__` holds at most 3 classes of the package;
- every job class is built alone from its parts (its `Scope`, the caches, the jobs it takes
  steps of) and run against a real ``redis-server``, a test of its own each;
- the plans know no wire format: no ``wire`` or ``packed`` identifier under
  ``redis_presence/plans/`` (the executor's `Wire` decides what is sent prebuilt).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis

import redis_presence
from redis_presence import PresenceReadOnlyError, RedisPresenceRegistry
from redis_presence.plans import Plan, Planner, Single
from redis_presence.plans.caches import BeatCache, SettingsCache
from redis_presence.plans.changes import ChangePlans
from redis_presence.plans.core import Scope
from redis_presence.plans.declared import DeclaredPlans
from redis_presence.plans.groups import GroupPlans
from redis_presence.plans.index import IndexPlans
from redis_presence.plans.reads import ReadPlans
from redis_presence.plans.settings import SettingsPlans
from redis_presence.plans.writes import WritePlans

T = TypeVar("T")
T0 = 1_796_000_000_123_456_000
MS = 1_000_000
PLANS = Path(redis_presence.__file__).parent / "plans"


def test_the_planner_is_a_facade_of_at_most_three_package_classes() -> None:
    ours = [cls for cls in Planner.__mro__ if cls.__module__.startswith("redis_presence")]
    assert len(ours) <= 3, ours


def test_each_public_plan_is_its_jobs_own_method() -> None:
    """The facade adds no signature of its own: each public plan is a job's bound method."""
    planner = Planner("p")
    jobs = {
        planner.index_plans,
        planner.settings_plans,
        planner.write_plans,
        planner.read_plans,
        planner.declared_plans,
        planner.group_plans,
        planner.change_plans,
    }
    public = {n: v for n, v in vars(planner).items() if not n.startswith("_") and callable(v)}
    assert len(public) >= 36
    for name, method in public.items():
        assert getattr(method, "__self__", None) in jobs, name
        assert method.__name__ == name


def identifiers(source: str) -> Iterator[str]:
    """Every name a module defines or uses: variables, attributes, arguments, functions,
    classes, keywords and imported names (not strings or comments)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name):
            yield node.id
        elif isinstance(node, ast.Attribute):
            yield node.attr
        elif isinstance(node, ast.arg):
            yield node.arg
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield node.name
        elif isinstance(node, ast.keyword) and node.arg is not None:
            yield node.arg
        elif isinstance(node, ast.alias):
            yield node.asname or node.name


def wire_names(source: str) -> set[str]:
    return {name for name in identifiers(source) if {"wire", "packed"} & set(_words(name))}


def _words(name: str) -> list[str]:
    return name.strip("_").lower().split("_")


def test_the_plans_know_no_wire_format() -> None:
    found = {
        path.name: names
        for path in sorted(PLANS.glob("*.py"))
        if (names := wire_names(path.read_text(encoding="utf-8")))
    }
    assert found == {}


def test_the_wire_check_finds_a_wire_name() -> None:
    source = "def f(wire, *, pack=0):\n    x.packed = self._wire\n    return Single(packed=1)\n"
    assert wire_names(source) == {"wire", "packed", "_wire"}
    assert wire_names("rewired = unpacked = 1\n") == set()  # whole words only


# -- each job class built alone from its parts, against a real redis-server --------------


def parts(prefix: str = "p", **options: Any) -> tuple[Scope, SettingsCache, BeatCache]:
    scope = Scope(prefix, **options)
    return scope, SettingsCache(scope.keys, scope.clock), BeatCache()


@pytest.fixture
def run(redis_client: redis.Redis) -> Any:
    """Runs any plan to its result (a registry's ``execute`` runs plans it did not build)."""
    return RedisPresenceRegistry(redis_client, prefix="unused").execute


def test_index_plans_alone(redis_client: redis.Redis, run: Any) -> None:
    scope, cache, _ = parts(limits=redis_presence.Limits(groups=2))
    index = IndexPlans(scope, cache)
    keys = scope.keys
    skipped: list[Any] = []
    assert run(index.listed(None, None, None, skipped)) == ([], None)
    groups = [keys.group("q", f"g{i}") for i in range(3)]
    redis_client.zadd(keys.groups, {gk.member: 0 for gk in groups})
    first, after = run(index.listed(None, None, None, skipped))
    assert (first, after is not None) == (groups[:2], True)
    assert run(index.listed(None, None, after, skipped)) == ([groups[2]], None)
    assert not cache.protocol_asks()  # the version was read with the first page
    # The migration of release 0.1's index: only groups that still have beats move.
    redis_client.sadd(keys.legacy_index, "old:g", "gone:g")
    redis_client.zadd(keys.group("old", "g").hb, {"c": 1})
    assert run(index.migrate()) == 1
    assert redis_client.zscore(keys.groups, keys.group("old", "g").member) == 0
    assert not redis_client.exists(keys.legacy_index)
    assert cache.claimed  # migrate set the version itself
    assert redis_client.get(keys.protocol) == b"2"
    redis_client.delete(keys.protocol)
    scope, cache, _ = parts()
    assert not cache.claimed
    run(IndexPlans(scope, cache).claim())
    assert cache.claimed
    assert redis_client.get(keys.protocol) == b"2"
    reader = IndexPlans(*parts(read_only=True)[:2])
    with pytest.raises(PresenceReadOnlyError):
        reader.migrate()


def test_settings_plans_alone(redis_client: redis.Redis, run: Any) -> None:
    now = [0]
    scope, cache, beats = parts(clock=lambda: now[0])
    settings = SettingsPlans(scope, cache, beats)
    assert run(settings.ttl_in_use()) == (30_000, "default")
    assert len(cache) == 1  # the prefix's TTL, cached
    beats.keep("q", "g", (("EVALSHA",), (), 10**18))
    run(settings.set_ttl(20_000))
    run(settings.set_ttl(40_000, queue="q", group="g"))
    run(settings.set_stuck_after(1_000, queue="q", group="g"))
    assert (len(cache), len(beats)) == (0, 0)  # its own writes: forgotten at once
    assert run(settings.ttl()) == (20_000, "prefix")
    assert run(settings.ttl("q", "g")) == (40_000, "group")
    assert run(settings.stuck_after("q", "g")) == (1_000, "group")
    assert run(settings.ttl_in_use("q", "other")) == (20_000, "prefix")
    assert run(settings.ttl_sources([("q", "g"), ("q", "h")])) == {
        ("q", "g"): (40_000, "group"),
        ("q", "h"): (20_000, "prefix"),
    }
    redis_client.set(scope.keys.ttl, 25_000)  # another process
    assert run(settings.ttl_in_use()) == (20_000, "prefix")  # trusted for TTL_CACHE_MS
    now[0] += redis_presence.TTL_CACHE_MS * MS + 1
    assert run(settings.ttl_in_use()) == (25_000, "prefix")


def test_write_plans_alone(redis_client: redis.Redis, run: Any) -> None:
    scope, cache, beats = parts()
    index = IndexPlans(scope, cache)
    writes = WritePlans(scope, cache, beats, SettingsPlans(scope, cache, beats), index)
    keys = scope.keys
    gk = keys.group("q", "g")
    run(writes.heartbeat("q", "g", "c1", 2, T0))
    assert len(beats) == 1
    assert cache.claimed
    again = writes.heartbeat("q", "g", "c1", 3, T0 + MS)
    assert isinstance(again, Single)  # the call kept ready: one script call, nothing else
    run(again)
    assert run(writes.heartbeat_many([("q", "g", "c2", 0), ("q", "h", "c3", 1)], T0)) == 2
    assert run(writes.describe("q", "g", "c1", {"host": "a"})) is True
    assert redis_client.zcard(gk.hb) == 2
    assert redis_client.zscore(keys.groups, keys.group("q", "h").member) == 0
    assert run(writes.deregister("q", "g", "c2", T0)) is True
    assert run(writes.prune_expired(T0 + 10**6 * MS, 1_000)) == 2
    assert redis_client.zcard(keys.groups) == 0  # the emptied groups unlisted


def test_read_plans_alone(redis_client: redis.Redis, run: Any) -> None:
    writer = RedisPresenceRegistry(redis_client, prefix="p")
    writer.heartbeat_many([("q", "g", "a", 1), ("q", "g", "b", 0), ("r", "g", "c", 0)], T0)
    writer.describe("q", "g", "a", {"host": "h1"})
    scope, cache, beats = parts()
    index = IndexPlans(scope, cache)
    reads = ReadPlans(scope, cache, SettingsPlans(scope, cache, beats), index)
    rows = run(reads.snapshot(T0 + MS, with_meta=True))
    assert [(r.queue, r.consumer, r.lease_count) for r in rows] == [
        ("q", "a", 1),
        ("q", "b", 0),
        ("r", "c", 0),
    ]
    assert rows[0].meta == {"host": "h1"}
    assert run(reads.count_active_by_group(T0 + MS)) == {("q", "g"): 2, ("r", "g"): 1}
    assert run(reads.count_active("q", "g", T0 + 31_000 * MS)) == 0
    row = run(reads.consumer("q", "g", "a", T0 + MS))
    assert row is not None
    assert row.state.value == "active"
    assert run(reads.consumer_meta("q", "g", "a")) == {"host": "h1"}
    assert run(reads.size()) == 3
    (log,) = run(reads.group_logs([("q", "g")], since_ns=T0 - MS, now_ns=T0 + MS))
    assert (log.queue, log.active_now) == ("q", 2)
    assert run(reads.clock_ns()) > T0 // 10


def test_declared_plans_alone(redis_client: redis.Redis, run: Any) -> None:
    scope, cache, _ = parts()
    declared = DeclaredPlans(scope, cache)
    run(declared.expect("q", "g", 2))
    run(declared.expect("q", "lonely"))
    assert run(declared.expected()) == {("q", "g"): 2, ("q", "lonely"): 1}
    assert run(declared.min_active("q", "g")) == 2
    assert run(declared.min_active("q", "nobody")) is None
    assert run(declared.unexpect("q", "lonely")) is True
    assert run(declared.unexpect("q", "lonely")) is False
    assert run(declared.expected()) == {("q", "g"): 2}


def test_group_plans_alone(redis_client: redis.Redis, run: Any) -> None:
    RedisPresenceRegistry(redis_client, prefix="p").heartbeat("q", "g", "a", now_ns=T0)
    scope, cache, beats = parts()
    index = IndexPlans(scope, cache)
    settings = SettingsPlans(scope, cache, beats)
    declared = DeclaredPlans(scope, cache)
    summary = GroupPlans(
        scope, cache, declared, settings, index, ReadPlans(scope, cache, settings, index)
    )
    run(declared.expect("q", "g", 2))
    run(declared.expect("q", "lonely"))
    summary_of = {(g.queue, g.group): (g.active, g.min_active) for g in run(summary.groups(T0))}
    assert summary_of == {("q", "g"): (1, 2), ("q", "lonely"): (0, 1)}
    page = run(summary.group_page(limit=1, now_ns=T0))
    assert ([g.group for g in page.groups], page.more) == (["g"], True)
    assert run(summary.group_names()) == [("q", "g")]
    one = run(summary.group("q", "g", T0))
    assert (one.active, one.min_active) == (1, 2)


def test_change_plans_alone(redis_client: redis.Redis, run: Any) -> None:
    writer = RedisPresenceRegistry(redis_client, prefix="p")
    scope, cache, beats = parts()
    index = IndexPlans(scope, cache)
    settings = SettingsPlans(scope, cache, beats)
    changes = ChangePlans(scope, cache, settings, index, ReadPlans(scope, cache, settings, index))
    _, cursor = run(changes.changes())
    run(changes.check_cursor(cursor))
    writer.heartbeat("q", "g", "a")
    events, _ = run(changes.changes(cursor))
    assert [(e.kind.value, e.consumer) for e in events] == [("joined", "a")]
    snapshot = run(changes.snapshot_cursor())
    assert [row.consumer for row in snapshot.rows] == ["a"]
    now, rows = run(changes.rows_of([("q", "g", "a"), ("q", "g", "nobody")]))
    assert [row.consumer for row in rows] == ["a"]
    assert now > 0
    assert run(changes.vanished_groups([("q", "g"), ("q", "gone")])) == {("q", "gone"): "keys"}


def test_a_job_runs_as_a_plain_generator(redis_client: redis.Redis) -> None:
    """Built alone, a job's plan steps by hand too: no registry needed (each request sent
    with redis-py's ``execute_command``)."""

    def by_hand(plan: Plan[T]) -> T:
        try:
            batch = next(plan)
            while True:
                batch = plan.send([send(*command(r)) for r in batch])
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    send: Any = redis_client.execute_command

    def command(request: Any) -> tuple[Any, ...]:
        return request.args if hasattr(request, "script") else (request.name, *request.args)

    scope, cache, beats = parts()
    settings = SettingsPlans(scope, cache, beats)
    by_hand(settings.set_ttl(12_000))
    assert by_hand(settings.ttl()) == (12_000, "prefix")

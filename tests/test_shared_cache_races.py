"""Plans that share one planner's cache of shared settings, interleaved as concurrent
asyncio tasks (or threads) interleave them: a plan waiting on Redis while another empties
the cache (past MAX_CACHED_GROUPS) still answers with the settings it read or saw, never a
``KeyError``. Stepped by hand against a real server, so each interleaving is exact."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest
import redis

from redis_presence import RedisPresenceRegistry
from redis_presence.plans import Plan, settings

T = TypeVar("T")
T0 = 1_796_000_000_123_456_000


def _finish(registry: RedisPresenceRegistry, plan: Plan[T], batch: Any) -> T:
    """Send `batch` (the plan's pending one) and every later one; the plan's result."""
    try:
        while True:
            batch = plan.send(registry._transport(list(batch)))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("name", "make", "expected"),
    [
        ("count_active", lambda p: p.count_active("q", "new", T0), 1),
        ("snapshot", lambda p: p.snapshot(T0, queue="q", group="new"), None),
        ("ttl_in_use", lambda p: p.ttl_in_use("q", "new"), (45_000, "prefix")),
        ("stuck_after_in_use", lambda p: p.stuck_after_in_use("q", "new"), None),
    ],
)
def test_a_plan_waiting_on_redis_survives_another_emptying_the_cache(
    redis_client: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    make: Callable[[Any], Plan[Any]],
    expected: object,
) -> None:
    monkeypatch.setattr(settings, "MAX_CACHED_GROUPS", 4)
    registry = RedisPresenceRegistry(redis_client)
    registry.set_ttl(45_000)  # the prefix's
    registry.heartbeat_many([("q", "new", "c", 0), *((f"q{i}", "g", "c", 0) for i in range(6))], T0)
    assert registry.count_active("q0", "g", T0) == 1  # the prefix's settings now cached

    plan = make(registry.plans)
    batch = next(plan)  # waiting on the group's own settings (the prefix's are fresh)
    # Meanwhile another plan asks for more groups than the cache keeps: it starts over,
    # and is itself waiting for its answers when the first plan's come back.
    other = registry.plans.snapshot(T0)
    pending = next(other)
    while not any(getattr(r, "name", "") == "GET" for r in pending):
        pending = other.send(registry._transport(list(pending)))
    result = _finish(registry, plan, batch)
    assert len(_finish(registry, other, pending)) == 7
    if name == "snapshot":
        assert [(row.queue, row.group, row.consumer) for row in result] == [("q", "new", "c")]
    elif expected is not None:
        assert result == expected
    assert registry.ttl_source("q", "new") == (45_000, "prefix")

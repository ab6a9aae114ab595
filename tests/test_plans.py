"""Plans without I/O: the single-beat fast path sends exactly what the batch path sends."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

from redis_presence.core import MAX_CACHED_GROUPS, Command, Eval, EvalSha, Plan, Planner
from redis_presence.keys import Keyspace

T0 = 1_796_000_000_123_456_000
BEATS = [
    ("q", "g", "c", 0),
    ("q", "g", "d", 7),  # same group: from the cache
    ("a:b", "{x}", "ü", 2**32 - 1),
    ("q", "h", "c", 1),
]


def finish(plan: Plan[Any], reply: Any) -> tuple[list[Any], Any]:
    """Send `reply` to the script call; returns the batches that follow and the result."""
    batches = []
    try:
        batch = plan.send([reply])
        while True:
            batches.append(batch)
            batch = plan.send([1] * len(batch))
    except StopIteration as done:
        return batches, done.value


ENCODERS: dict[str, Callable[[Any], Any] | None] = {
    "str": None,
    "utf-8": redis.Redis().get_encoder().encode,
    "latin-1": redis.Redis(encoding="latin-1").get_encoder().encode,
}


def same(value: Any) -> Any:
    return value


@pytest.mark.parametrize("clustered", [False, True], ids=["standalone", "cluster"])
@pytest.mark.parametrize("now", [None, T0], ids=["server-clock", "now_ns"])
@pytest.mark.parametrize("unlisted", [[], [1]], ids=["listed", "unlisted"])
@pytest.mark.parametrize("encoding", list(ENCODERS))
def test_single_beat_is_the_call_of_a_batch_of_one(
    clustered: bool, now: int | None, unlisted: list[int], encoding: str
) -> None:
    encode = ENCODERS[encoding] or same
    planner = Planner(Keyspace("präsenz"), clustered=clustered, encode=ENCODERS[encoding])
    for queue, group, consumer, lease in BEATS:
        batch_plan = planner.heartbeat([(queue, group, consumer, lease, 0)], now)
        beat_plan = planner.beat("f00d", queue, group, consumer, lease, now)
        (call,) = next(batch_plan)
        (beat,) = next(beat_plan)
        assert isinstance(call, Eval)
        assert isinstance(beat, EvalSha)
        assert beat.script == call.script == "heartbeat"
        # The same bytes on the wire: what the client would encode, some of it done already.
        expected = ("EVALSHA", "f00d", len(call.keys), *call.keys, *call.args)
        assert [encode(arg) for arg in beat.args] == [encode(arg) for arg in expected]
        # What follows the script (the index write of a cluster) is the same too.
        after_batch, sent = finish(batch_plan, unlisted)
        after_beat, beaten = finish(beat_plan, unlisted)
        assert after_beat == after_batch
        assert sent == beaten == 1
        if unlisted:
            gk = planner.keys.group(queue, group)
            assert after_beat == [[Command("SADD", (planner.keys.index, gk.member))]]


def test_the_single_beat_cache_is_bounded() -> None:
    planner = Planner(Keyspace("p"), clustered=False)
    for i in range(MAX_CACHED_GROUPS + 10):
        next(planner.beat("f00d", "q", f"g{i}", "c", 0, None))
        assert len(planner._beat_calls) <= MAX_CACHED_GROUPS

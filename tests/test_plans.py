"""Plans without I/O: what the single-beat fast path sends, byte for byte."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

from redis_presence.core import MAX_CACHED_GROUPS, Command, Planner
from redis_presence.keys import INDEX_MARK_MS, Keyspace

T0 = 1_796_000_000_123_456_000
BEATS = [
    ("q", "g", "c", 0),
    ("q", "g", "d", 7),  # same group: from the cache
    ("a:b", "{x}", "ü", 2**32 - 1),
    ("q", "h", "c", 1),
]


ENCODERS: dict[str, Callable[[Any], Any] | None] = {
    "str": None,
    "utf-8": redis.Redis().get_encoder().encode,
    "latin-1": redis.Redis(encoding="latin-1").get_encoder().encode,
}


def same(value: Any) -> Any:
    return value


@pytest.mark.parametrize("clustered", [False, True], ids=["standalone", "cluster"])
@pytest.mark.parametrize("now", [None, T0], ids=["server-clock", "now_ns"])
@pytest.mark.parametrize("encoding", list(ENCODERS))
def test_single_beat_is_one_prebuilt_call_of_the_lean_script(
    clustered: bool, now: int | None, encoding: str
) -> None:
    encode = ENCODERS[encoding] or same
    planner = Planner(Keyspace("präsenz"), clustered=clustered, encode=ENCODERS[encoding])
    for queue, group, consumer, lease in BEATS:
        gk = planner.keys.group(queue, group)
        args = planner.beat_call("f00d", queue, group, consumer, lease, now)
        # KEYS: the group's sorted set and hash, then the index (standalone) or the group's
        # mark (cluster); ARGV: now, the beat, then the member or the mark's lifetime.
        now_arg = "" if now is None else str(now)
        tail = ("", INDEX_MARK_MS) if clustered else (gk.member,)
        third = gk.mark if clustered else planner.keys.index
        expected = ("EVALSHA", "f00d", 3, gk.hb, gk.data, third, now_arg, consumer, lease, *tail)
        # The same bytes on the wire: what the client would encode, some of it done already.
        assert [encode(arg) for arg in args] == [encode(arg) for arg in expected]
        # A reply of 1 (a cluster group without a mark) makes the caller list the group.
        assert planner.beat_listing(queue, group) == Command(
            "SADD", (planner.keys.index, gk.member)
        )


def test_the_single_beat_cache_is_bounded() -> None:
    planner = Planner(Keyspace("p"), clustered=False)
    for i in range(MAX_CACHED_GROUPS + 10):
        planner.beat_call("f00d", "q", f"g{i}", "c", 0, None)
        assert len(planner._beat_calls) <= MAX_CACHED_GROUPS

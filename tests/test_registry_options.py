"""The registry's own options through `from_url`, and the limits of metadata (issue 22,
item 10): ``from_url(events_kept=...)`` was refused as "a redis:// URL takes no option
'events_kept'"; the 512-byte limit of one metadata value was written nowhere."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
import redis

from redis_presence import AsyncRedisPresenceRegistry, PresenceConfigError, RedisPresenceRegistry
from redis_presence.keys import Keyspace
from redis_presence.validation import MAX_META_BYTES, MAX_NAME_BYTES

T0 = 1_796_000_000_123_456_000
CONCEPTS = Path(__file__).resolve().parent.parent / "docs" / "concepts.md"


def test_from_url_takes_events_kept_like_the_constructor(
    redis_url: str, redis_client: redis.Redis
) -> None:
    with RedisPresenceRegistry.from_url(redis_url, events_kept=50) as registry:
        assert registry.plans.events_kept == 50
        for i in range(400):  # 400 joins: one event log entry each
            registry.heartbeat("orders", "billing", f"c{i}", now_ns=T0 + i)
    # XADD ... MAXLEN ~ 50 trims whole stream nodes (100 entries each): far fewer than 400.
    assert redis_client.xlen(Keyspace("presence").queue_events("orders")) <= 150

    async def main() -> int:
        async with AsyncRedisPresenceRegistry.from_url(redis_url, events_kept=7) as registry:
            await registry.size()
            return registry.plans.events_kept

    assert asyncio.run(main()) == 7


@pytest.mark.parametrize("opener", [RedisPresenceRegistry, AsyncRedisPresenceRegistry])
def test_from_url_checks_events_kept_and_names_an_unknown_keyword_as_such(
    redis_url: str, opener: type[RedisPresenceRegistry] | type[AsyncRedisPresenceRegistry]
) -> None:
    with pytest.raises(ValueError, match="events_kept must be a positive int, got 0"):
        opener.from_url(redis_url, events_kept=0)
    with pytest.raises(PresenceConfigError) as info:
        opener.from_url(redis_url, evnts_kept=50)
    assert str(info.value) == (
        "unknown keyword argument 'evnts_kept': neither the registry nor a redis-py "
        "connection takes it"
    )
    # An unknown query parameter is still the URL's fault, and said so.
    with pytest.raises(PresenceConfigError, match="URL takes no option 'evnts_kept'"):
        opener.from_url(f"{redis_url}?evnts_kept=50")


def test_a_metadata_value_over_512_bytes_is_refused_naming_the_field_and_the_limit(
    redis_url: str,
) -> None:
    with RedisPresenceRegistry.from_url(redis_url) as registry:
        registry.heartbeat("orders", "billing", "c1", now_ns=T0)
        assert registry.describe("orders", "billing", "c1", {"pod": "x" * MAX_NAME_BYTES})
        cases = {
            "value": ({"pod": "x" * 513}, "meta['pod'] must be at most 512 UTF-8 bytes, got 513"),
            "value, in UTF-8 bytes": (
                {"pod": "é" * 257},
                "meta['pod'] must be at most 512 UTF-8 bytes, got 514",
            ),
            "key": ({"k" * 513: "x"}, "meta key must be at most 512 UTF-8 bytes, got 513"),
            "in all": (
                {"a": "x" * 500, "b": "x" * 500, "c": "x" * 30},
                f"meta must be at most {MAX_META_BYTES} UTF-8 bytes in all, got 1033",
            ),
        }
        for case, (meta, message) in cases.items():
            with pytest.raises(ValueError, match=re.escape(message)):
                registry.describe("orders", "billing", "c1", meta)
            (row,) = registry.snapshot(queue="orders", with_meta=True)
            assert row.meta == {"pod": "x" * MAX_NAME_BYTES}, case  # nothing written


def test_the_docs_state_the_limits_of_metadata() -> None:
    text = " ".join(CONCEPTS.read_text(encoding="utf-8").split())
    assert "each key and each value at most 512 UTF-8 bytes" in text
    assert "at most 16 keys and 1 KiB" in text

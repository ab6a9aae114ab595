"""A stored shared TTL or progress budget is decimal digits, as both clients read it.

docs/protocol.md: every integer is written as ASCII decimal digits, without sign, leading
``+``, spaces or underscores, and a setting that is anything else is spoilt (section 8).
Before, the Python package read ``P:ttl`` with ``int()``, so ``" 5000"``, ``"+5000"``,
``"5000 "`` and ``"5_000"`` were a TTL of 5 s to it and spoilt to the Node client: the two
clients classified the same consumers with different TTLs. Now both call them spoilt (the
Node client's side: clients/node/test/tolerance.test.mjs).
"""

from __future__ import annotations

import re
import warnings

import pytest
from backends import make_registry, raw_client

from redis_presence import PresenceDataError, PresenceDataWarning
from redis_presence.keys import Keyspace

T0 = 1_796_000_000_123_456_000
KEYS = Keyspace("presence")
LENIENT = [" 5000", "+5000", "5000 ", "5_000", "5000\n"]


@pytest.mark.parametrize("value", LENIENT)
@pytest.mark.parametrize(
    "backend",
    [
        pytest.param("fakeredis", id="fakeredis"),
        pytest.param("redis", id="redis-server", marks=pytest.mark.redis_server),
    ],
)
def test_a_setting_that_is_not_decimal_digits_is_spoilt(
    request: pytest.FixtureRequest, backend: str, value: str
) -> None:
    registry = make_registry(request, backend, max_future_ms=None)
    client = raw_client(request, backend)
    registry.heartbeat("q", "g", "a", now_ns=T0)
    registry.heartbeat("q", "bad", "b", now_ns=T0)
    client.set(KEYS.group("q", "bad").ttl, value)
    client.set(KEYS.stuck, value)
    registry = make_registry(request, backend, max_future_ms=None)  # nothing cached
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        counts = registry.count_active_by_group(now_ns=T0)
    assert dict(counts) == {("q", "g"): 1}
    assert [str(w.message) for w in caught if w.category is PresenceDataWarning] != []
    with pytest.raises(PresenceDataError, match=re.escape(KEYS.group("q", "bad").ttl)):
        registry.ttl("q", "bad")
    with pytest.raises(PresenceDataError, match=re.escape(KEYS.stuck)):
        registry.stuck_after()
    client.set(KEYS.group("q", "bad").ttl, "05000")  # leading zeros: digits still
    assert registry.ttl_source("q", "bad") == (5000, "group")

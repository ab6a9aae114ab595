"""One rule for a declared minimum (issue 35, item 2): an integer from 1 to 1,000,000, stored
as canonical decimal digits (no sign, no leading zero, nothing else). A write of anything else
(0 included: `unexpect` is how a group stops being declared) is refused naming `min_active`,
with nothing written; a stored value that is not canonical is set aside by the readers (one
`PresenceDataWarning`, in `.skipped`), its group then read as undeclared, and a read of that
one group's minimum raises its data error. Python here; the Node client in
clients/node/test/arguments.test.mjs; both in conformance cases 09 and 13.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from backends import BACKENDS, dump, make_registry, raw_client
from cli_invoke import NOW, Backend, backend  # noqa: F401 (the fixture)

from redis_presence import PresenceDataError, PresenceDataWarning
from redis_presence.keys import Keyspace
from redis_presence.validation import MAX_MIN_ACTIVE

T0 = 1_796_000_000_123_456_000
EXPECT = Keyspace("presence").queue_expect("q")

pytestmark = pytest.mark.timeout(60)

T = TypeVar("T")


def warned(read: Callable[[], T]) -> tuple[T, list[str]]:
    """`read()` and the `PresenceDataWarning`s it gave (any other warning fails)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        answer = read()
    assert all(issubclass(w.category, PresenceDataWarning) for w in caught), caught
    return answer, [str(w.message) for w in caught]


@pytest.fixture(params=BACKENDS)
def registry(request: pytest.FixtureRequest) -> Any:
    return make_registry(request, request.param, max_future_ms=None)


@pytest.mark.parametrize(
    ("least", "error"),
    [
        pytest.param(0, ValueError, id="zero"),
        pytest.param(-1, ValueError, id="negative"),
        pytest.param(MAX_MIN_ACTIVE + 1, ValueError, id="above-the-most"),
        pytest.param(1.0, TypeError, id="a-float"),
        pytest.param("2", TypeError, id="a-string"),
        pytest.param(True, TypeError, id="a-bool"),
    ],
)
def test_a_minimum_outside_1_to_a_million_is_refused_naming_it(
    registry: Any, least: Any, error: type[Exception]
) -> None:
    """Before: 0 was accepted (and stored as "0": a declared group never below)."""
    registry.expect("q", "kept", 2)
    with pytest.raises(error, match=r"^min_active"):
        registry.expect("q", "g", least)
    with pytest.raises(error, match=r"^min_active"):
        registry.expect("q", "kept", least)  # an existing declaration is not changed either
    assert registry.expected() == {("q", "kept"): 2}


def test_the_least_and_the_most_are_stored_as_canonical_digits(
    request: pytest.FixtureRequest,
) -> None:
    registry = make_registry(request, "fakeredis")
    client = raw_client(request, "fakeredis")
    registry.expect("q", "least", 1)
    registry.expect("q", "most", MAX_MIN_ACTIVE)
    assert client.hgetall(EXPECT) == {b"least": b"1", b"most": b"1000000"}
    assert registry.expected() == {("q", "least"): 1, ("q", "most"): MAX_MIN_ACTIVE}


NOT_CANONICAL = ["0", "02", "+5", " 5", "5 ", "1_0", "1e3", "5.0", "\u0665", "1000001", "-1", ""]
"""Stored minimums no client writes, each set aside (before, Python's int() read "0", "02",
"+5", " 5", "5 " and "1_0" as numbers)."""


@pytest.mark.parametrize(
    "backend_name",
    [
        pytest.param("fakeredis", id="fakeredis"),
        pytest.param("redis", id="redis-server", marks=pytest.mark.redis_server),
        pytest.param("cluster", id="cluster", marks=pytest.mark.redis_server),
        pytest.param("async", id="async", marks=pytest.mark.redis_server),
    ],
)
def test_a_stored_minimum_that_is_not_canonical_is_set_aside(
    request: pytest.FixtureRequest, backend_name: str
) -> None:
    """Before: expected() read "0" as 0, "02" as 2, "+5", " 5", "5 " and "1_0" as numbers."""
    registry = make_registry(request, backend_name, max_future_ms=None)
    client = raw_client(request, backend_name)
    registry.expect("q", "ok", 3)
    registry.heartbeat("q", "bad", "a", now_ns=T0)
    client.hset(EXPECT, mapping={f"v{i}": value for i, value in enumerate(NOT_CANONICAL)})
    for read in (registry.expected, lambda: registry.groups(now_ns=T0)):
        _, said = warned(read)
        assert len(said) == 1, said
        assert said[0].startswith(f"redis-presence set aside {EXPECT}: "), said
        assert "holds a minimum this package did not write" in said[0]
    assert warned(registry.expected)[0] == {("q", "ok"): 3}
    groups, _ = warned(lambda: registry.groups(now_ns=T0))
    assert [(g.group, g.min_active, g.below) for g in groups] == [
        ("bad", None, False),  # counted, undeclared
        ("ok", 3, True),
    ]
    assert [(s.key, s.queue, s.group) for s in groups.skipped] == [(EXPECT, "q", None)]
    client.hset(EXPECT, "bad", "02")
    with pytest.raises(PresenceDataError, match=re.escape(EXPECT)):
        registry.min_active("q", "bad")
    assert registry.min_active("q", "ok") == 3


def test_the_cli_refuses_a_minimum_of_0_with_nothing_written(backend: Backend) -> None:  # noqa: F811
    """Before: `expect q g --min-active 0` declared a group that is never below."""
    before = backend.registry.expected()
    result = backend.run("expect", "q", "g", "--min-active", "0")
    assert result.exit_code == 2, result.output
    assert "--min-active" in result.stderr
    assert "1<=x<=1000000" in result.stderr
    assert backend.registry.expected() == before
    result = backend.run("expect", "q", "g", "--min-active", "1000001")
    assert result.exit_code == 2, result.output
    shown = " ".join(backend.run("expect", "--help").stdout.split())
    assert "1 to 1,000,000" in shown
    assert "unexpect" in shown
    assert backend.at_now("counts").exit_code == 0


@pytest.mark.redis_server
def test_nothing_is_written_for_a_refused_minimum(redis_client: Any) -> None:
    from redis_presence import RedisPresenceRegistry

    registry = RedisPresenceRegistry(redis_client)
    registry.expect("q", "g", 2)
    before = dump(redis_client)
    with pytest.raises(ValueError, match=r"^min_active must be in \[1, 1000000\], got 0$"):
        registry.expect("q", "g", 0)
    assert dump(redis_client) == before

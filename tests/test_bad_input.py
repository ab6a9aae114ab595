"""Bad input on every backend: a typed error naming the argument, and the store unchanged.

Also: every odd-but-valid name is accepted and round-trips, and a property test shows that
distinct (queue, group, consumer) triples never share storage nor leave the prefix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest
import redis
from backends import BACKENDS, REDIS_BACKENDS, make_registry, raw_client
from hypothesis import given, settings
from hypothesis import strategies as st
from servers import RedisServer

from redis_presence import (
    PresenceConfigError,
    PresenceError,
    PresenceState,
    RedisPresenceRegistry,
)
from redis_presence.keys import Keyspace, decode_name, encode_name
from redis_presence.validation import (
    MAX_LEASE_COUNT,
    MAX_NAME_BYTES,
    MAX_TIMESTAMP_NS,
    MAX_TTL_MS,
)

MS = 1_000_000
T0 = 1_796_000_000_123_456_000
TTL = 30_000

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def dump(client: Any) -> dict[bytes, Any]:
    """Every key with its type and content (and whether it expires), to prove a store unchanged."""
    out: dict[bytes, Any] = {}
    for key in sorted(client.keys("*")):
        kind = client.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else kind
        if kind == "zset":
            value: Any = client.zrange(key, 0, -1, withscores=True)
        elif kind == "hash":
            value = sorted(client.hgetall(key).items())
        elif kind == "set":
            value = sorted(client.smembers(key))
        else:
            value = client.get(key)
        out[key] = (kind, value, client.pttl(key) > 0)
    return out


class Store:
    """A registry seeded with a few rows, and a fingerprint of everything it stores."""

    def __init__(self, request: pytest.FixtureRequest, backend: str) -> None:
        self.registry: Any = make_registry(request, backend)
        self.client = None if backend == "memory" else raw_client(request, backend)
        self.registry.heartbeat("orders", "billing", "w1", 3, now_ns=T0)
        self.registry.heartbeat("orders", "billing", "w2", 0, now_ns=T0 - 45_000 * MS)
        self.registry.heartbeat("mail", "send", "w1", 1, now_ns=T0 - 90_000 * MS)

    def fingerprint(self) -> Any:
        if self.client is None:
            return self.registry.snapshot(now_ns=T0)
        return dump(self.client)

    def rejects(
        self, call: Callable[[Any], object], error: type[Exception], argument: str
    ) -> Exception:
        """`call(registry)` raises `error` naming `argument`, and nothing changes."""
        before = self.fingerprint()
        with pytest.raises(error) as info:
            call(self.registry)
        assert argument in str(info.value), f"{argument!r} not named in {info.value!r}"
        assert not isinstance(info.value, PresenceError) or error is PresenceConfigError
        assert self.fingerprint() == before
        return info.value


@pytest.fixture
def store(request: pytest.FixtureRequest, backend: str) -> Store:
    return Store(request, backend)


# --- names ----------------------------------------------------------------------------------

BAD_NAMES = [
    pytest.param("", ValueError, id="empty"),
    pytest.param("x" * (MAX_NAME_BYTES + 1), ValueError, id="513-ascii-bytes"),
    pytest.param("é" * 257, ValueError, id="514-utf8-bytes-257-chars"),
    pytest.param("\ud800", ValueError, id="lone-surrogate"),
    pytest.param("ok\udcff", ValueError, id="trailing-lone-surrogate"),
    pytest.param(b"orders", TypeError, id="bytes"),
    pytest.param(None, TypeError, id="None"),
    pytest.param(7, TypeError, id="int"),
    pytest.param(["orders"], TypeError, id="list"),
]
POSITIONS = ["queue", "group", "consumer"]


def _triple(position: str, name: Any) -> tuple[Any, Any, Any]:
    triple: list[Any] = ["orders", "billing", "w1"]
    triple[POSITIONS.index(position)] = name
    return (triple[0], triple[1], triple[2])


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize(("name", "error"), BAD_NAMES)
def test_bad_names_are_rejected_by_every_method(
    store: Store, position: str, name: Any, error: type[Exception]
) -> None:
    q, g, c = _triple(position, name)
    store.rejects(lambda r: r.heartbeat(q, g, c, 1, now_ns=T0), error, position)
    store.rejects(lambda r: r.deregister(q, g, c), error, position)
    store.rejects(
        lambda r: r.heartbeat_many([("orders", "billing", "new", 0), (q, g, c, 1)], now_ns=T0),
        error,
        f"beats[1]: {position}",
    )


GOOD_NAMES = [
    pytest.param(":", id="colon"),
    pytest.param("{", id="open-brace"),
    pytest.param("}", id="close-brace"),
    pytest.param("{orders}", id="hash-tag"),
    pytest.param("}{", id="reversed-braces"),
    pytest.param("*", id="star"),
    pytest.param("|", id="pipe"),
    pytest.param("a\nb", id="newline"),
    pytest.param("a\x00b", id="nul"),
    pytest.param("\x00", id="only-nul"),
    pytest.param(" ", id="space"),
    pytest.param("%41", id="percent-escape-lookalike"),
    pytest.param("presence:index", id="looks-like-a-key"),
    pytest.param("x" * MAX_NAME_BYTES, id="512-ascii-bytes"),
    pytest.param("é" * (MAX_NAME_BYTES // 2), id="512-utf8-bytes"),
    pytest.param("😀", id="astral"),
]


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("name", GOOD_NAMES)
def test_odd_names_are_accepted_and_round_trip(
    request: pytest.FixtureRequest, backend: str, position: str, name: str
) -> None:
    registry = make_registry(request, backend)
    q, g, c = _triple(position, name)
    registry.heartbeat(q, g, c, 5, now_ns=T0)
    registry.heartbeat("orders", "billing", "w1", 1, now_ns=T0)  # a neighbour (maybe the same)
    rows = registry.snapshot(now_ns=T0)
    assert (q, g, c) in [(r.queue, r.group, r.consumer) for r in rows]
    assert len(rows) == len({(q, g, c), ("orders", "billing", "w1")}) == len(registry)
    assert registry.count_active_by_group(now_ns=T0)[(q, g)] >= 1
    assert registry.deregister(q, g, c) is True
    assert registry.deregister(q, g, c) is False
    if (q, g, c) != ("orders", "billing", "w1"):
        assert [(r.queue, r.group, r.consumer) for r in registry.snapshot(now_ns=T0)] == [
            ("orders", "billing", "w1")
        ]
    left = len(registry)
    assert registry.prune_expired(now_ns=T0 + 61_000 * MS, ttl_ms=TTL) == left
    assert len(registry) == 0
    if backend != "memory":
        assert raw_client(request, backend).keys("*") == []


def test_odd_names_never_collide(request: pytest.FixtureRequest, backend: str) -> None:
    registry = make_registry(request, backend)
    names = [p.values[0] for p in GOOD_NAMES] + ["A", "a", "x", "x\x00"]
    for i, name in enumerate(names):
        registry.heartbeat(name, name, name, i, now_ns=T0)
        registry.heartbeat("q", "g", name, i, now_ns=T0)
    rows = registry.snapshot(now_ns=T0)
    assert len(rows) == 2 * len(names) == len(registry)
    assert {(r.queue, r.lease_count) for r in rows if r.queue != "q"} == {
        (name, i) for i, name in enumerate(names)
    }
    assert registry.count_active_by_group(now_ns=T0)[("q", "g")] == len(names)


# --- numbers --------------------------------------------------------------------------------

BAD_LEASES = [
    pytest.param(-1, ValueError, id="negative"),
    pytest.param(MAX_LEASE_COUNT + 1, ValueError, id="2**32"),
    pytest.param(2**64, ValueError, id="2**64"),
    pytest.param(10**100, ValueError, id="googol"),
    pytest.param(1.0, TypeError, id="float-whole"),
    pytest.param(1.5, TypeError, id="float"),
    pytest.param(float("nan"), TypeError, id="nan"),
    pytest.param(True, TypeError, id="True"),
    pytest.param(False, TypeError, id="False"),
    pytest.param("3", TypeError, id="str"),
    pytest.param(None, TypeError, id="None"),
]


@pytest.mark.parametrize(("lease", "error"), BAD_LEASES)
def test_bad_lease_counts(store: Store, lease: Any, error: type[Exception]) -> None:
    store.rejects(
        lambda r: r.heartbeat("orders", "billing", "w1", lease, now_ns=T0), error, "lease"
    )
    store.rejects(
        lambda r: r.heartbeat_many([("a", "b", "c", 0), ("orders", "billing", "w1", lease)]),
        error,
        "beats[1]: lease_count",
    )


BAD_TTLS = [
    pytest.param(0, ValueError, id="zero"),
    pytest.param(-1, ValueError, id="negative"),
    pytest.param(MAX_TTL_MS + 1, ValueError, id="above-max"),
    pytest.param(2**63, ValueError, id="2**63"),
    pytest.param(1.5, TypeError, id="float"),
    pytest.param(30_000.0, TypeError, id="float-whole"),
    pytest.param(True, TypeError, id="True"),
    pytest.param("30000", TypeError, id="str"),
    pytest.param(None, TypeError, id="None"),
]


def _snapshot(r: Any, *, now: Any, ttl: Any) -> object:
    return r.snapshot(now_ns=now, ttl_ms=ttl)


def _count(r: Any, *, now: Any, ttl: Any) -> object:
    return r.count_active_by_group(now_ns=now, ttl_ms=ttl)


def _prune(r: Any, *, now: Any, ttl: Any) -> object:
    return r.prune_expired(now_ns=now, ttl_ms=ttl)


READERS = [_snapshot, _count, _prune]


@pytest.mark.parametrize(("ttl", "error"), BAD_TTLS)
def test_bad_ttls(store: Store, ttl: Any, error: type[Exception]) -> None:
    for read in READERS:
        store.rejects(partial(read, now=T0 + 10**15, ttl=ttl), error, "ttl_ms")


BAD_NOWS = [
    pytest.param(-1, ValueError, id="negative"),
    pytest.param(MAX_TIMESTAMP_NS + 1, ValueError, id="after-2255"),
    pytest.param(2**64, ValueError, id="2**64"),
    pytest.param(float(T0), TypeError, id="float"),
    pytest.param(1.5, TypeError, id="float-fraction"),
    pytest.param(True, TypeError, id="True"),
    pytest.param(str(T0), TypeError, id="str"),
]


@pytest.mark.parametrize(("now", "error"), BAD_NOWS)
def test_bad_timestamps(store: Store, now: Any, error: type[Exception]) -> None:
    store.rejects(lambda r: r.heartbeat("orders", "billing", "w1", 9, now_ns=now), error, "now_ns")
    store.rejects(lambda r: r.heartbeat_many([("q", "g", "c", 0)], now_ns=now), error, "now_ns")
    for read in READERS:
        store.rejects(partial(read, now=now, ttl=TTL), error, "now_ns")


def test_boundary_numbers_are_accepted_exactly(
    request: pytest.FixtureRequest, backend: str
) -> None:
    registry = make_registry(request, backend)
    registry.heartbeat("q", "g", "zero", 0, now_ns=0)
    registry.heartbeat("q", "g", "max", MAX_LEASE_COUNT, now_ns=MAX_TIMESTAMP_NS)
    rows = {r.consumer: r for r in registry.snapshot(now_ns=MAX_TIMESTAMP_NS, ttl_ms=MAX_TTL_MS)}
    assert (rows["zero"].registered_at_ns, rows["zero"].lease_count) == (0, 0)
    assert rows["max"].last_heartbeat_ns == MAX_TIMESTAMP_NS
    assert rows["max"].lease_count == MAX_LEASE_COUNT
    assert rows["max"].state is PresenceState.ACTIVE
    assert registry.count_active_by_group(now_ns=0, ttl_ms=1) == {("q", "g"): 2}
    assert registry.prune_expired(now_ns=MAX_TIMESTAMP_NS, ttl_ms=1) == 1


# --- heartbeat_many -------------------------------------------------------------------------

BAD_BEATS = [
    pytest.param(["orders"], TypeError, "beats[1]", id="str-beat"),
    pytest.param([None], TypeError, "beats[1]", id="None-beat"),
    pytest.param([{"queue": "q"}], TypeError, "beats[1]", id="dict-beat"),
    pytest.param([("q", "g")], TypeError, "beats[1]", id="two-items"),
    pytest.param([("q", "g", "c", 0, 0)], TypeError, "beats[1]", id="five-items"),
    pytest.param([(b"q", "g", "c", 0)], TypeError, "beats[1]: queue", id="bytes-queue"),
    pytest.param([("q", "", "c", 0)], ValueError, "beats[1]: group", id="empty-group"),
    pytest.param([("q", "g", 5, 0)], TypeError, "beats[1]: consumer", id="int-consumer"),
    pytest.param([("q", "g", "c", -1)], ValueError, "beats[1]: lease_count", id="neg-lease"),
    pytest.param([("q", "g", "c", True)], TypeError, "beats[1]: lease_count", id="bool-lease"),
    pytest.param([("q", "g", "c", 0.0)], TypeError, "beats[1]: lease_count", id="float-lease"),
]


@pytest.mark.parametrize(("tail", "error", "argument"), BAD_BEATS)
def test_bad_beats_write_nothing(
    store: Store, tail: list[Any], error: type[Exception], argument: str
) -> None:
    def generated() -> Iterator[Any]:  # a one-shot iterable: the good beat comes first
        yield ("orders", "billing", "fresh", 0)
        yield from tail

    store.rejects(lambda r: r.heartbeat_many(generated(), now_ns=T0), error, argument)


@pytest.mark.parametrize("beats", [None, 5])
def test_non_iterable_beats_name_the_argument(store: Store, beats: Any) -> None:
    store.rejects(lambda r: r.heartbeat_many(beats, now_ns=T0), TypeError, "beats")


# --- construction: prefix and URL -----------------------------------------------------------

BAD_PREFIXES = [
    pytest.param("", ValueError, id="empty"),
    pytest.param("x" * 129, ValueError, id="too-long"),
    pytest.param("a{b", ValueError, id="open-brace"),
    pytest.param("a}b", ValueError, id="close-brace"),
    pytest.param("a*", ValueError, id="star"),
    pytest.param("a?", ValueError, id="question-mark"),
    pytest.param("a[b]", ValueError, id="brackets"),
    pytest.param("a b", ValueError, id="space"),
    pytest.param("a\nb", ValueError, id="newline"),
    pytest.param("a\x00", ValueError, id="nul"),
    pytest.param("a\x7f", ValueError, id="non-printable"),
    pytest.param(b"presence", TypeError, id="bytes"),
    pytest.param(None, TypeError, id="None"),
]


@pytest.mark.parametrize(("prefix", "error"), BAD_PREFIXES)
@pytest.mark.parametrize("backend", REDIS_BACKENDS)
def test_bad_prefixes_are_rejected(
    request: pytest.FixtureRequest, backend: str, prefix: Any, error: type[Exception]
) -> None:
    client = raw_client(request, backend)
    with pytest.raises(error, match="prefix"):
        RedisPresenceRegistry(client, prefix=prefix)
    assert client.keys("*") == []


BAD_URLS = [
    pytest.param("", id="empty"),
    pytest.param("localhost:6379", id="no-scheme"),
    pytest.param("http://localhost:6379", id="http"),
    pytest.param("redis://", id="nothing-after-scheme"),
    pytest.param("redis://localhost:port", id="port-not-a-number"),
    pytest.param("redis://localhost:99999", id="port-out-of-range"),
    pytest.param("redis://localhost:6379?socket_timeout=soon", id="bad-query-value"),
    pytest.param(
        "redis://localhost:6379/zero",
        id="bad-db",
        marks=pytest.mark.xfail(
            strict=True,
            reason="redis-py's parse_url ignores a non-numeric db path and uses db 0",
        ),
    ),
    pytest.param(6379, id="int"),
    pytest.param(None, id="None"),
]


@pytest.mark.parametrize("url", BAD_URLS)
def test_malformed_urls_are_config_errors(url: Any) -> None:
    with pytest.raises(PresenceConfigError, match=r"(?i)url") as info:
        RedisPresenceRegistry.from_url(url)
    assert isinstance(info.value, ValueError)  # usable where a ValueError is expected


# --- storage never shared, never outside the prefix ------------------------------------------

NAME = st.text(
    st.characters(codec="utf-8"),
    min_size=1,
    max_size=12,
).filter(lambda s: len(s.encode()) <= MAX_NAME_BYTES)
# Names that come close to each other and to the key syntax, mixed with arbitrary ones.
TRICKY = st.one_of(
    st.sampled_from(["a", "a:b", "a:", ":b", "{a}", "}", "{", "*", "%3A", "%", "\x00", "\n"]),
    st.text(st.sampled_from("a:{}%*|\x00"), min_size=1, max_size=5),
    NAME,
)
PREFIX = st.sampled_from(["presence", "p", "p:q", "presence:x", "a.b-c~d"])
TRIPLE = st.tuples(TRICKY, TRICKY, TRICKY)


def hash_tag(key: str) -> str | None:
    """The part of `key` that Redis Cluster hashes (its first non-empty ``{...}``)."""
    start = key.find("{")
    end = key.find("}", start + 1)
    if start < 0 or end < 0 or end == start + 1:
        return None
    return key[start + 1 : end]


def cells(prefix: str, queue: str, group: str, consumer: str) -> set[tuple[str, str]]:
    """The (key, field) cells one consumer owns: its score and its stored value."""
    keys = Keyspace(prefix).group(queue, group)
    return {(keys.hb, consumer), (keys.data, consumer)}


@settings(max_examples=300, deadline=None)
@given(PREFIX, TRIPLE, PREFIX, TRIPLE)
def test_distinct_triples_never_share_storage(
    prefix_a: str, a: tuple[str, str, str], prefix_b: str, b: tuple[str, str, str]
) -> None:
    for prefix, (queue, group, _) in ((prefix_a, a), (prefix_b, b)):
        space = Keyspace(prefix)
        keys = space.group(queue, group)
        for key in (keys.hb, keys.data, keys.mark):
            assert key.startswith(prefix + ":")
            assert hash_tag(key) == encode_name(queue)
            assert decode_name(encode_name(queue)) == queue
            assert key != space.index
        assert space.from_member(keys.member) == keys
    if (prefix_a, *a) != (prefix_b, *b):
        assert not cells(prefix_a, *a) & cells(prefix_b, *b)
    if (prefix_a, a[:2]) != (prefix_b, b[:2]):
        ka, kb = Keyspace(prefix_a).group(*a[:2]), Keyspace(prefix_b).group(*b[:2])
        assert not {ka.hb, ka.data, ka.mark} & {kb.hb, kb.data, kb.mark}
        if prefix_a == prefix_b:
            assert ka.member != kb.member


@pytest.fixture(scope="module")
def property_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis_server.client()
    yield client
    client.close()


@settings(max_examples=60, deadline=None)
@given(prefix=PREFIX, a=TRIPLE, b=TRIPLE)
def test_written_keys_are_the_predicted_ones_and_stay_apart(
    property_client: redis.Redis, prefix: str, a: tuple[str, str, str], b: tuple[str, str, str]
) -> None:
    """On a real server: each heartbeat writes only under the prefix, in the queue's slot,
    and deregistering one triple never touches another's row."""
    client = property_client
    client.flushall()
    client.set("outside", "untouched")
    registry = RedisPresenceRegistry(client, prefix=prefix)
    registry.heartbeat(*a, 1, now_ns=T0)
    registry.heartbeat(*b, 2, now_ns=T0 + 1)
    stored: list[bytes] = client.keys("*")  # type: ignore[assignment]
    written = {k.decode() for k in stored} - {"outside"}
    space = Keyspace(prefix)
    predicted = {space.index}
    for queue, group, _ in (a, b):
        keys = space.group(queue, group)
        predicted |= {keys.hb, keys.data, keys.mark}
    assert written == predicted
    for key in written - {space.index}:
        assert key.startswith(prefix + ":")
        assert hash_tag(key) in {encode_name(a[0]), encode_name(b[0])}
    registry.deregister(*a)
    rows = [(r.queue, r.group, r.consumer, r.lease_count) for r in registry.snapshot(now_ns=T0)]
    if a == b:
        assert rows == []
    else:
        assert rows == [(*b, 2)]
    assert client.get("outside") == b"untouched"

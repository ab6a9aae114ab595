"""Bad input on every backend: a typed error naming the argument, and the store unchanged.

Also: every odd-but-valid name is accepted and round-trips, and a property test shows that
distinct (queue, group, consumer) triples never share storage nor leave the prefix.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from backends import (
    BACKENDS,
    REDIS_BACKENDS,
    all_keys,
    dump,
    make_registry,
    raw_client,
    without_logs,
)
from conftest import RUN_COUNTS
from hypothesis import given, settings
from hypothesis import strategies as st
from servers import RedisServer

from redis_presence import (
    AsyncRedisPresenceRegistry,
    PresenceConfigError,
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


class Store:
    """A registry seeded with a few rows, and a fingerprint of everything it stores."""

    def __init__(self, request: pytest.FixtureRequest, backend: str) -> None:
        self.registry: Any = make_registry(request, backend)
        self.client = None if backend == "memory" else raw_client(request, backend)
        self.registry.heartbeat("orders", "billing", "w1", 3, now_ns=T0)
        self.registry.heartbeat("orders", "billing", "w2", 0, now_ns=T0 - 45_000 * MS)
        self.registry.heartbeat("mail", "send", "w1", 1, now_ns=T0 - 90_000 * MS)
        self.tried = 0

    def fingerprint(self) -> Any:
        if self.client is None:
            return self.registry.snapshot(now_ns=T0)
        return dump(self.client)

    def rejects(
        self,
        case: str,
        error: type[Exception],
        argument: str,
        method: str,
        *args: Any,
        **kwargs: Any,
    ) -> None:
        """`registry.method(*args, **kwargs)` raises `error` naming `argument`; nothing changes."""
        before = self.fingerprint()
        try:
            getattr(self.registry, method)(*args, **kwargs)
        except Exception as exc:
            if type(exc) is not error:
                pytest.fail(f"{method} {case}: raised {exc!r}, expected {error.__name__}")
            if argument not in str(exc):
                pytest.fail(f"{method} {case}: {argument!r} not named in {exc!r}")
        else:
            pytest.fail(f"{method} {case}: did not raise {error.__name__}")
        assert self.fingerprint() == before, f"{method} {case}: the store changed"
        self.tried += 1
        RUN_COUNTS["bad inputs rejected, store unchanged each time"] += 1


@pytest.fixture
def store(request: pytest.FixtureRequest, backend: str) -> Store:
    return Store(request, backend)


# Each table lists (case id, value, expected error). One test per backend walks a whole table:
# a fresh store per case would cost more than the checks themselves on the cluster backends.

# --- names ----------------------------------------------------------------------------------

BAD_NAMES: list[tuple[str, Any, type[Exception]]] = [
    ("empty", "", ValueError),
    ("513-ascii-bytes", "x" * (MAX_NAME_BYTES + 1), ValueError),
    ("514-utf8-bytes-257-chars", "é" * 257, ValueError),
    ("lone-surrogate", "\ud800", ValueError),
    ("trailing-lone-surrogate", "ok\udcff", ValueError),
    ("bytes", b"orders", TypeError),
    ("None", None, TypeError),
    ("int", 7, TypeError),
    ("list", ["orders"], TypeError),
]
POSITIONS = ["queue", "group", "consumer"]


def _triple(position: str, name: Any) -> tuple[Any, Any, Any]:
    triple: list[Any] = ["orders", "billing", "w1"]
    triple[POSITIONS.index(position)] = name
    return (triple[0], triple[1], triple[2])


def test_bad_names_are_rejected_by_every_method(store: Store) -> None:
    for case, name, error in BAD_NAMES:
        for position in POSITIONS:
            q, g, c = _triple(position, name)
            what = f"{position}={case}"
            store.rejects(what, error, position, "heartbeat", q, g, c, 1, now_ns=T0)
            store.rejects(what, error, position, "deregister", q, g, c)
            beats = [("orders", "billing", "new", 0), (q, g, c, 1)]
            store.rejects(what, error, f"beats[1]: {position}", "heartbeat_many", beats, T0)
    assert store.tried == len(BAD_NAMES) * len(POSITIONS) * 3


GOOD_NAMES: list[tuple[str, str]] = [
    ("colon", ":"),
    ("open-brace", "{"),
    ("close-brace", "}"),
    ("hash-tag", "{orders}"),
    ("reversed-braces", "}{"),
    ("star", "*"),
    ("pipe", "|"),
    ("newline", "a\nb"),
    ("nul", "a\x00b"),
    ("only-nul", "\x00"),
    ("space", " "),
    ("percent-escape-lookalike", "%41"),
    ("looks-like-a-key", "presence:index"),
    ("512-ascii-bytes", "x" * MAX_NAME_BYTES),
    ("512-utf8-bytes", "é" * (MAX_NAME_BYTES // 2)),
    ("astral", "😀"),
]


def test_odd_names_are_accepted_and_round_trip(
    request: pytest.FixtureRequest, backend: str
) -> None:
    registry = make_registry(request, backend)
    client = None if backend == "memory" else raw_client(request, backend)
    for case, name in GOOD_NAMES:
        for position in POSITIONS:
            what = f"{position}={case}"
            q, g, c = _triple(position, name)
            registry.heartbeat(q, g, c, 5, now_ns=T0)
            registry.heartbeat("orders", "billing", "w1", 1, now_ns=T0)  # a neighbour
            rows = registry.snapshot(now_ns=T0)
            assert (q, g, c, 5) in [(*r.key, r.lease_count) for r in rows], what
            assert len(rows) == 2 == len(registry), what
            assert registry.count_active_by_group(now_ns=T0)[(q, g)] >= 1, what
            assert registry.deregister(q, g, c) is True, what
            assert registry.deregister(q, g, c) is False, what
            assert [r.key for r in registry.snapshot(now_ns=T0)] == [("orders", "billing", "w1")]
            assert registry.prune_expired(now_ns=T0 + 61_000 * MS, ttl_ms=TTL) == 1, what
            assert len(registry) == 0, what
            if client is not None:
                assert without_logs(all_keys(client)) == [], what


def test_odd_names_never_collide(request: pytest.FixtureRequest, backend: str) -> None:
    registry = make_registry(request, backend)
    names = [name for _, name in GOOD_NAMES] + ["A", "a", "x", "x\x00"]
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

BAD_LEASES: list[tuple[str, Any, type[Exception]]] = [
    ("negative", -1, ValueError),
    ("2**32", MAX_LEASE_COUNT + 1, ValueError),
    ("2**64", 2**64, ValueError),
    ("googol", 10**100, ValueError),
    ("float-whole", 1.0, TypeError),
    ("float", 1.5, TypeError),
    ("nan", float("nan"), TypeError),
    ("True", True, TypeError),
    ("False", False, TypeError),
    ("str", "3", TypeError),
    ("None", None, TypeError),
]


def test_bad_lease_counts(store: Store) -> None:
    for case, lease, error in BAD_LEASES:
        store.rejects(case, error, "lease_count", "heartbeat", "orders", "billing", "w1", lease)
        beats = [("a", "b", "c", 0), ("orders", "billing", "w1", lease)]
        store.rejects(case, error, "beats[1]: lease_count", "heartbeat_many", beats)
    assert store.tried == 2 * len(BAD_LEASES)


BAD_TTLS: list[tuple[str, Any, type[Exception]]] = [
    ("zero", 0, ValueError),
    ("negative", -1, ValueError),
    ("above-max", MAX_TTL_MS + 1, ValueError),
    ("2**63", 2**63, ValueError),
    ("float", 1.5, TypeError),
    ("float-whole", 30_000.0, TypeError),
    ("True", True, TypeError),
    ("str", "30000", TypeError),
]
READERS = ["snapshot", "count_active_by_group", "prune_expired"]


def test_bad_ttls(store: Store) -> None:
    for case, ttl, error in BAD_TTLS:
        for read in READERS:  # a prune at this instant would remove every row
            store.rejects(case, error, "ttl_ms", read, now_ns=T0 + 10**15, ttl_ms=ttl)
    assert store.tried == len(BAD_TTLS) * len(READERS)


BAD_NOWS: list[tuple[str, Any, type[Exception]]] = [
    ("negative", -1, ValueError),
    ("after-2255", MAX_TIMESTAMP_NS + 1, ValueError),
    ("2**64", 2**64, ValueError),
    ("float", float(T0), TypeError),
    ("float-fraction", 1.5, TypeError),
    ("True", True, TypeError),
    ("str", str(T0), TypeError),
]


def test_bad_timestamps(store: Store) -> None:
    for case, now, error in BAD_NOWS:
        store.rejects(case, error, "now_ns", "heartbeat", "orders", "billing", "w1", now_ns=now)
        store.rejects(case, error, "now_ns", "heartbeat_many", [("q", "g", "c", 0)], now_ns=now)
        for read in READERS:
            store.rejects(case, error, "now_ns", read, now_ns=now, ttl_ms=TTL)
    assert store.tried == len(BAD_NOWS) * (2 + len(READERS))


def test_boundary_numbers_are_accepted_exactly(
    request: pytest.FixtureRequest, backend: str
) -> None:
    registry = make_registry(request, backend, max_future_ms=None)  # year 2255 is no clock
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

BAD_BEATS: list[tuple[str, list[Any], type[Exception], str]] = [
    ("str-beat", ["orders"], TypeError, "beats[1]"),
    ("None-beat", [None], TypeError, "beats[1]"),
    ("dict-beat", [{"queue": "q"}], TypeError, "beats[1]"),
    ("two-items", [("q", "g")], TypeError, "beats[1]"),
    ("five-items", [("q", "g", "c", 0, 0)], TypeError, "beats[1]"),
    ("bytes-queue", [(b"q", "g", "c", 0)], TypeError, "beats[1]: queue"),
    ("empty-group", [("q", "", "c", 0)], ValueError, "beats[1]: group"),
    ("int-consumer", [("q", "g", 5, 0)], TypeError, "beats[1]: consumer"),
    ("neg-lease", [("q", "g", "c", -1)], ValueError, "beats[1]: lease_count"),
    ("bool-lease", [("q", "g", "c", True)], TypeError, "beats[1]: lease_count"),
    ("float-lease", [("q", "g", "c", 0.0)], TypeError, "beats[1]: lease_count"),
]
NOT_ITERABLE: list[tuple[str, Any]] = [("None", None), ("int", 5), ("str", "orders")]


def test_bad_beats_write_nothing(store: Store) -> None:
    for case, tail, error, argument in BAD_BEATS:

        def generated(tail: list[Any] = tail) -> Iterator[Any]:  # one-shot; good beat first
            yield ("orders", "billing", "fresh", 0)
            yield from tail

        store.rejects(case, error, argument, "heartbeat_many", generated(), now_ns=T0)
    for case, beats in NOT_ITERABLE:
        store.rejects(case, TypeError, "beats", "heartbeat_many", beats, now_ns=T0)
    assert store.tried == len(BAD_BEATS) + len(NOT_ITERABLE)


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
    assert all_keys(client) == []


BAD_URLS = [
    pytest.param("", id="empty"),
    pytest.param("localhost:6379", id="no-scheme"),
    pytest.param("http://localhost:6379", id="http"),
    pytest.param("redis://", id="nothing-after-scheme"),
    pytest.param("redis://localhost:port", id="port-not-a-number"),
    pytest.param("redis://localhost:99999", id="port-out-of-range"),
    pytest.param("redis://localhost:6379?socket_timeout=soon", id="bad-query-value"),
    pytest.param("redis://localhost:6379/zero", id="bad-db"),
    pytest.param(6379, id="int"),
    pytest.param(None, id="None"),
]


@pytest.mark.parametrize("url", BAD_URLS)
def test_malformed_urls_are_config_errors(url: Any) -> None:
    with pytest.raises(PresenceConfigError, match=r"(?i)url") as info:
        RedisPresenceRegistry.from_url(url)
    assert isinstance(info.value, ValueError)  # usable where a ValueError is expected


@pytest.mark.parametrize(
    ("url", "option"),
    [
        pytest.param(
            "redis://:s3cret@localhost:6379/0?ssl_certfle=a.crt", "ssl_certfle", id="typo"
        ),
        pytest.param(
            "rediss://:s3cret@localhost:6379/0?ssl_certfle=a.crt", "ssl_certfle", id="tls"
        ),
        pytest.param(
            "redis://:s3cret@localhost:6379/0?ssl_certfile={file}", "ssl_certfile", id="no-tls"
        ),
        pytest.param("redis://:s3cret@localhost:6379/0?colour=blue", "colour", id="unknown"),
    ],
)
@pytest.mark.parametrize("opener", ["sync", "async"])
def test_an_option_the_connection_does_not_take_is_a_config_error(
    url: str, option: str, opener: str
) -> None:
    """redis-py passes unknown query parameters on, and the first command would raise a bare
    TypeError; from_url names the option at once, without the password."""
    cls = RedisPresenceRegistry if opener == "sync" else AsyncRedisPresenceRegistry
    with pytest.raises(PresenceConfigError, match=f"takes no option '{option}'") as info:
        cls.from_url(url.format(file=__file__))  # a file that exists
    assert "s3cret" not in str(info.value)


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
            assert key not in (space.groups, space.legacy_index)
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
    stored: list[bytes] = all_keys(client)
    written = {k.decode() for k in stored} - {"outside"}
    space = Keyspace(prefix)
    # the index, the index of event logs, the epoch marker (in the latter's slot), the
    # protocol version the first beat claims and the fleet indexes (newest, oldest beats)
    shared = {space.groups, space.events, space.epoch, space.protocol, space.newest, space.oldest}
    predicted = set(shared)
    for queue, group, _ in (a, b):
        keys = space.group(queue, group)
        # No index mark (a standalone server keeps none); the queue's log holds `joined`.
        predicted |= {keys.hb, keys.data, keys.events}
    assert written == predicted
    assert hash_tag(space.epoch) == space.events
    for key in written - shared:
        assert key.startswith(prefix + ":")
        assert hash_tag(key) in {encode_name(a[0]), encode_name(b[0])}
    registry.deregister(*a)
    rows = [(r.queue, r.group, r.consumer, r.lease_count) for r in registry.snapshot(now_ns=T0)]
    if a == b:
        assert rows == []
    else:
        assert rows == [(*b, 2)]
    assert client.get("outside") == b"untouched"

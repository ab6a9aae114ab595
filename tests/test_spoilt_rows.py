"""A spoilt value costs its own row, never its neighbours' (issue 30, item 3).

A consumer whose stored value (``P:{q}:g:c`` field) another program wrote: every read sets
that consumer aside (one `PresenceDataWarning` for the group: how many, and the first's
reason; a `Skipped` naming it in `.skipped`) and reads the group's other consumers, so the
views never say nobody reads a group whose healthy consumers are alive. The counts come
from the sorted set, where a consumer set aside still counts by its score
(docs/protocol.md, section 9). Library (sync, asyncio, small bounds), CLI and web service.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
from backends import SMALL_BACKENDS, dump, make_registry, raw_client
from cli_invoke import invoke
from test_spoilt_settings import metric, warned

from redis_presence import PresenceDataWarning, RedisPresenceRegistry
from redis_presence.keys import Keyspace

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

from redis_presence.web import WebConfig, create_app

MS = 1_000_000
HOUR_MS = 3_600_000
T0 = 1_796_000_000_123_456_000
LATER = T0 + 40_000 * MS  # v stale under the default TTL (30 s): it crossed a line
KEYS = Keyspace("presence")
BAD = KEYS.group("bad", "g")

BACKENDS = [
    pytest.param("fakeredis", id="fakeredis"),
    pytest.param("redis", id="redis-server", marks=pytest.mark.redis_server),
    pytest.param("cluster", id="cluster", marks=pytest.mark.redis_server),
    pytest.param("async", id="async", marks=pytest.mark.redis_server),
    *SMALL_BACKENDS,  # a group read in HSCAN steps, counts in pages
]
SPOILT_VALUES = {
    "garbage": b"garbage",
    "empty": b"",
    "negative": b"-5 -5 0",
    "a-word-among-numbers": b"1 2 x",
    "21-digits": b"1 1 " + b"9" * 21,
    # Protocol version 2's nine fields, spoilt (V2SPEC): set aside as a version 1 value is.
    "v2-bad-token": b"1 2 0 0 4 0 0 a/b -",
    "v2-eight-fields": b"1 2 0 0 4 0 0 -",
    "v2-capacity-word": b"1 2 0 0 four 0 0 - -",
    "v2-capacity-above-2^32-1": b"1 2 0 0 4294967296 0 0 - -",
}


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def seed(registry: Any, client: Any, value: bytes) -> str:
    """Group bad/g (declared, min 1): "v" active (1 lease), "x" expired (3 leases), and two
    spoilt by another program: "w" (`value`, its score that of an active beat) and "z"
    (garbage, an expired score); "a" in good/g. The cursor of `changes` at T0."""
    registry.heartbeat_many([("bad", "g", "v", 1), ("good", "g", "a", 1)], now_ns=T0 - MS)
    registry.heartbeat("bad", "g", "x", 3, now_ns=T0 - HOUR_MS * MS)
    registry.expect("bad", "g", 1)
    _, cursor = registry.changes(now_ns=T0)
    client.hset(BAD.data, mapping={"w": value, "z": b"garbage"})
    client.zadd(BAD.hb, {"w": (T0 - MS) // 1_000, "z": (T0 - HOUR_MS * MS) // 1_000})
    return str(cursor)


def keys_of(rows: Any) -> set[tuple[str, str, str]]:
    return {row.key for row in rows}


HEALTHY = {("bad", "g", "v"), ("bad", "g", "x"), ("good", "g", "a")}


@pytest.mark.parametrize("name", list(SPOILT_VALUES))
def test_a_spoilt_value_costs_its_own_row_in_every_read(
    request: pytest.FixtureRequest, backend: str, name: str
) -> None:
    """Before: a fleet snapshot set the whole group aside (v and x vanished: the view said
    nobody reads bad/g), a snapshot of the group raised, groups(details=True) raised, and
    a word among the numbers made changes() raise a ValueError."""
    client = raw_client(request, backend)
    registry = make_registry(request, backend)
    cursor = seed(registry, client, SPOILT_VALUES[name])
    before = dump(client)
    reads: dict[str, Callable[[], Any]] = {
        "snapshot": lambda: registry.snapshot(now_ns=T0),
        "iter_snapshot": lambda: list(registry.iter_snapshot(now_ns=T0)),
        "snapshot of the queue": lambda: registry.snapshot(now_ns=T0, queue="bad"),
        "snapshot of the group": lambda: registry.snapshot(now_ns=T0, queue="bad", group="g"),
    }
    said_rows = f"redis-presence set aside {BAD.data}: 2 consumers, read the group's others: "
    for read, call in reads.items():
        rows, said = warned(call)
        wanted = (
            HEALTHY if read in ("snapshot", "iter_snapshot") else HEALTHY - {("good", "g", "a")}
        )
        assert keys_of(rows) == wanted, read
        assert [line[: len(said_rows)] for line in said] == [said_rows], (read, said)
        assert 'field "w"' in said[0], said  # the first, by name
        if hasattr(rows, "skipped"):
            assert [(s.key, s.queue, s.group, s.consumer) for s in rows.skipped] == [
                (BAD.data, "bad", "g", "w"),
                (BAD.data, "bad", "g", "z"),
            ], read
    # The counts are the sorted set's: w counts by its score, active; z expired.
    counts, said = warned(lambda: registry.count_active_by_group(now_ns=T0))
    assert (counts, said) == ({("bad", "g"): 2, ("good", "g"): 1}, [])
    groups, said = warned(lambda: registry.groups(now_ns=T0, details=True))
    (bad,) = [g for g in groups if g.key == ("bad", "g")]
    # The leases of the expired ones: x's 3 (z's unknown, and z set aside, said).
    assert (bad.active, bad.stale, bad.expired, bad.below, bad.leases_expired) == (
        2,
        0,
        2,
        False,
        3,
    )
    assert len(said) == 1, said
    assert said[0].startswith(f"redis-presence set aside {BAD.data}: 1 consumer, "), said
    assert [(s.key, s.consumer) for s in groups.skipped] == [(BAD.data, "z")]
    named = [("bad", "g", "v"), ("bad", "g", "w"), ("good", "g", "a")]
    (_, rows), said = warned(lambda: registry.execute(registry.plans.rows_of(named)))
    assert (keys_of(rows), len(said)) == ({("bad", "g", "v"), ("good", "g", "a")}, 1)
    (events, _), said = warned(lambda: registry.changes(cursor, now_ns=LATER))
    assert {(e.kind.value, e.group, e.consumer) for e in events} >= {("stale", "g", "v")}
    assert "w" not in {e.consumer for e in events}
    assert dump(client) == before


def test_a_spoilt_value_on_the_horizon_is_not_counted_and_hides_nothing(
    request: pytest.FixtureRequest, backend: str
) -> None:
    """A count reads a stored value only for a beat on its horizon's microsecond. Before: a
    spoilt one there set the whole group aside, so the counts said nobody reads bad/g."""
    client = raw_client(request, backend)
    registry = make_registry(request, backend)
    registry.heartbeat("bad", "g", "v", 1, now_ns=T0 - MS)
    ttl_ms = 1_000
    edge_us = (T0 - (ttl_ms + 1) * MS) // 1_000  # the active horizon's microsecond
    client.hset(BAD.data, "w", b"1 2 x")
    client.zadd(BAD.hb, {"w": edge_us})
    counts, said = warned(lambda: registry.count_active_by_group(now_ns=T0, ttl_ms=ttl_ms))
    assert counts == {("bad", "g"): 1}
    assert [(s.key, s.consumer) for s in counts.skipped] == [(BAD.data, "w")]
    assert len(said) == 1, said
    one, said = warned(lambda: registry.count_active("bad", "g", now_ns=T0, ttl_ms=ttl_ms))
    assert (one, len(said)) == (1, 1)
    row, said = warned(lambda: registry.group("bad", "g", now_ns=T0, ttl_ms=ttl_ms))
    assert len(said) == 1  # and the one uncounted active is no less seen than by groups()
    rows, _ = warned(lambda: registry.groups(now_ns=T0, ttl_ms=ttl_ms, capacity=True))
    assert [r for r in rows if r.key == ("bad", "g")] == [row]  # `group` reads capacity
    assert row.active == 1


def test_a_consumer_name_that_is_not_utf8_costs_its_own_row(
    request: pytest.FixtureRequest, backend: str
) -> None:
    client = raw_client(request, backend)
    registry = make_registry(request, backend)
    registry.heartbeat("bad", "g", "v", 1, now_ns=T0 - MS)
    client.hset(BAD.data, b"\xff\xfe", b"%d %d 1" % (T0, T0))
    client.zadd(BAD.hb, {b"\xff\xfe": T0 // 1_000})
    rows, said = warned(lambda: registry.snapshot(now_ns=T0))
    assert keys_of(rows) == {("bad", "g", "v")}
    assert len(said) == 1, said
    assert "not UTF-8" in said[0], said


# -- the CLI and the web service -------------------------------------------------------


@pytest.fixture
def store(redis_url: str, redis_client: Any) -> tuple[str, str]:
    """The session server seeded (a spoilt "w" of a word among numbers): its URL, cursor."""
    cursor = seed(RedisPresenceRegistry(redis_client), redis_client, b"1 2 x")
    return redis_url, cursor


@pytest.mark.redis_server
def test_the_cli_lists_the_healthy_consumers_of_the_group(store: tuple[str, str]) -> None:
    """Before: ls listed neither v nor x (its warning set the whole group aside)."""
    url, _ = store
    result = invoke(["--url", url, "--now-ns", str(T0), "ls", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert '"v"' in result.stdout
    assert '"x"' in result.stdout
    assert '"w"' not in result.stdout
    (line,) = [line for line in result.stderr.splitlines() if "warning" in line]
    assert line.startswith(f"redis-presence: warning: redis-presence set aside {BAD.data}: 2 ")
    counts = invoke(["--url", url, "--now-ns", str(T0), "counts", "--format", "json"])
    assert counts.exit_code == 0, counts.output
    assert '"bad"' in counts.stdout


@pytest.mark.redis_server
@pytest.mark.parametrize("stuck_metrics", [False, True], ids=["groups", "stuck-metrics"])
def test_the_web_service_shows_the_group_as_read(
    store: tuple[str, str], stuck_metrics: bool
) -> None:
    """Before: /consumers, /api/v1/consumers and the group's page answered 502, /metrics
    said redis_presence_up 0, and with --stuck-metrics bad/g read as below its minimum."""
    url, cursor = store
    config = WebConfig(url=url, read_cache_s=0, stuck_metrics=stuck_metrics)
    app = create_app(config, clock=lambda: T0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PresenceDataWarning)  # the service's own log
        with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as web:
            for path in ("/", "/consumers", "/group?queue=bad&group=g", "/api/v1/groups"):
                page = web.get(path)
                assert page.status_code == 200, (path, page.text[:300])
            consumers = web.get("/api/v1/consumers").json()["consumers"]
            assert {(c["group"], c["consumer"]) for c in consumers} >= {("g", "v"), ("g", "x")}
            one = web.get("/api/v1/groups/bad/g").json()
            assert {c["consumer"] for c in one["consumers"]} == {"v", "x"}
            groups = web.get("/api/v1/groups").json()["groups"]
            (bad,) = [g for g in groups if g["queue"] == "bad"]
            assert (bad["active"], bad["below"]) == (2, False)
            events = web.get("/api/v1/events", params={"cursor": cursor})
            assert events.status_code == 200, events.text
            scrape = web.get("/metrics").text
    assert metric(scrape, "redis_presence_up") == {(): 1.0}
    active = metric(scrape, "redis_presence_group_active")[("bad", "g")]
    assert active == (1.0 if stuck_metrics else 2.0)  # the rows read, or the sorted set
    assert metric(scrape, "redis_presence_group_below_min") == {("bad", "g"): 0.0}

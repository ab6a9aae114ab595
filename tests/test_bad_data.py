"""Bad data costs only what it spoils (issue 16, item 1).

A key of another type under one group's keys, or a stored value this package did not
write: every operation that meets it refuses it with a `PresenceDataError` naming the key
(and the field, for a value) and changes nothing; a batch, a batch split in many calls, a
prune and a reporter that also serve other groups write all of those, and say exactly what
they refused (`PresenceBatchError`): the whole group for a key of another type, that
consumer's beats for a spoilt value. Each kind of corruption, on each Redis backend.
"""

from __future__ import annotations

import logging
import re
import subprocess
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest
from backends import dump, make_registry, raw_client
from conftest import RUN_COUNTS
from webservers import ROOT, cli_argv

from redis_presence import (
    ConsumerPresence,
    PresenceBatchError,
    PresenceDataError,
    PresenceDataWarning,
    PresenceReporter,
    RedisPresenceRegistry,
    process_instance,
)
from redis_presence.errors import PresenceMetaError
from redis_presence.keys import Keyspace
from redis_presence.plans import Limits

MS = 1_000_000
T0 = 1_796_000_000_123_456_000
KEYS = Keyspace("presence")
BAD = KEYS.group("bad", "g")
GOOD = [("orders", "billing"), ("orders", "audit"), ("mail", "send")]

BACKENDS = [
    pytest.param("fakeredis", id="fakeredis"),
    pytest.param("redis", id="redis-server", marks=pytest.mark.redis_server),
    pytest.param("cluster", id="cluster", marks=pytest.mark.redis_server),
    pytest.param("async", id="async", marks=pytest.mark.redis_server),
    pytest.param("redis-8", id="redis-8", marks=pytest.mark.redis_server),
    pytest.param("valkey-9", id="valkey-9", marks=pytest.mark.redis_server),
]


class Corruption(NamedTuple):
    """One way another program spoils group bad/g, whose consumer "w" exists."""

    key: str
    field: str | None  # the hash field it spoils (a stored value), or None (a key's type)
    plant: Callable[[Any], None]

    def message(self) -> str:
        """What every refusal of it says (a regular expression)."""
        if self.field is None:  # a script says what it found, a read which command met it
            return rf"WRONGTYPE.*key {re.escape(self.key)}( holds a list|, [A-Z]+\))"
        return (
            rf'redis-presence key {re.escape(self.key)} field "{self.field}" holds a value '
            "this package did not write"
        )


def _retype(key: str) -> Callable[[Any], None]:
    def plant(client: Any) -> None:
        client.delete(key)
        client.rpush(key, "written by another program")

    return plant


def _value(value: bytes) -> Callable[[Any], None]:
    def plant(client: Any) -> None:
        client.hset(BAD.data, "w", value)

    return plant


CORRUPTIONS = {
    "sorted-set-is-a-list": Corruption(BAD.hb, None, _retype(BAD.hb)),
    "hash-is-a-list": Corruption(BAD.data, None, _retype(BAD.data)),
    "event-log-is-a-list": Corruption(BAD.events, None, _retype(BAD.events)),
    "value-garbage": Corruption(BAD.data, "w", _value(b"garbage")),
    "value-empty": Corruption(BAD.data, "w", _value(b"")),
    "value-negative": Corruption(BAD.data, "w", _value(b"-5 -5 0")),
    "value-two-numbers": Corruption(BAD.data, "w", _value(b"1796000000123456000 7")),
    "value-21-digits": Corruption(BAD.data, "w", _value(b"1 1 " + b"9" * 21)),
}
VALUE_CORRUPTIONS = [name for name, c in CORRUPTIONS.items() if c.field is not None]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=list(CORRUPTIONS))
def corruption(request: pytest.FixtureRequest) -> Corruption:
    return CORRUPTIONS[request.param]


def seed(registry: Any, client: Any, corruption: Corruption) -> None:
    """One consumer in each good group, "w" in bad/g, then the corruption."""
    registry.heartbeat_many([(q, g, "old", 1) for q, g in GOOD], now_ns=T0 - MS)
    registry.heartbeat("bad", "g", "w", 2, now_ns=T0 - MS)
    corruption.plant(client)


def bad_keys(client: Any) -> dict[bytes, Any]:
    """Every key of the bad queue, as `dump` shows them."""
    return {k: v for k, v in dump(client).items() if k.startswith(b"presence:{bad}")}


def good_rows(registry: Any) -> dict[tuple[str, str, str], tuple[int, int]]:
    """The good queues' consumers: (lease_count, last_heartbeat_ns)."""
    return {
        row.key: (row.lease_count, row.last_heartbeat_ns)
        for queue in ("orders", "mail")
        for row in registry.snapshot(now_ns=T0, queue=queue)
    }


def refused_for(
    error: PresenceBatchError, corruption: Corruption, beats: list[tuple[str, str, str]]
) -> None:
    """`error` refused group bad/g for `corruption`, and exactly `beats`."""
    assert sorted(error.refused) == sorted(beats)
    assert list(error.failed) == [("bad", "g")]
    failure = error.failed["bad", "g"]
    assert isinstance(failure, PresenceDataError)
    assert re.search(corruption.message(), str(failure)), str(failure)
    assert "bad/g" in str(error)
    RUN_COUNTS["bad data: refusals confined to their own group"] += 1


def assert_refused_the_bad_beats(
    client: Any,
    before: dict[bytes, Any],
    error: PresenceBatchError,
    corruption: Corruption,
    beats: list[tuple[str, str, str, int]],
) -> None:
    """A key of another type: every beat of bad/g refused, its queue's keys untouched. A
    spoilt value: the beats of "w" refused, its value untouched, "x" written."""
    if corruption.field is None:
        refused_for(error, corruption, [b[:3] for b in beats if b[0] == "bad"])
        assert bad_keys(client) == before  # not one write to the refused group, nor its queue
    else:
        refused_for(error, corruption, [b[:3] for b in beats if b[:3] == ("bad", "g", "w")])
        assert client.hget(BAD.data, "w") == dict(before[BAD.data.encode()][1])[b"w"]
        assert client.hget(BAD.data, "x") == stored_v2(T0, T0, 5)


def stored_v2(registered_ns: int, last_ns: int, lease: int) -> bytes:
    """The value a beat of this process writes (version 2: no progress, capacity, flags or
    conflict; this process's token, none before it)."""
    token = process_instance().encode()
    return b"%d %d %d 0 0 0 0 %b -" % (registered_ns, last_ns, lease, token)


def test_a_batch_writes_every_other_group_and_names_the_bad_one(
    request: pytest.FixtureRequest, backend: str, corruption: Corruption
) -> None:
    client = raw_client(request, backend)
    registry = make_registry(request, backend)
    seed(registry, client, corruption)
    before = bad_keys(client)
    beats = [("bad", "g", "w", 5), *((q, g, "new", 3) for q, g in GOOD), ("bad", "g", "x", 5)]
    with pytest.raises(PresenceBatchError) as info:
        registry.heartbeat_many(beats, now_ns=T0)
    assert_refused_the_bad_beats(client, before, info.value, corruption, beats)
    assert info.value.completed == len(beats) - len(info.value.refused)
    assert good_rows(registry) == {
        **{(q, g, "old"): (1, T0 - MS) for q, g in GOOD},
        **{(q, g, "new"): (3, T0) for q, g in GOOD},
    }


def test_a_batch_split_in_many_calls_says_exactly_what_it_wrote(
    request: pytest.FixtureRequest, backend: str, corruption: Corruption
) -> None:
    """Two beats a call: the bad group's beats in the first call and in the last; every
    call without them is written, and so is every other group of the calls with them."""
    client = raw_client(request, backend)
    registry = make_registry(request, backend, limits=Limits(beats=2))
    seed(registry, client, corruption)
    before = bad_keys(client)
    beats = [
        ("bad", "g", "w", 5),
        *((q, g, f"new{i}", i) for i in range(3) for q, g in GOOD),
        ("bad", "g", "x", 5),
    ]
    with pytest.raises(PresenceBatchError) as info:
        registry.heartbeat_many(beats, now_ns=T0)
    if corruption.key == BAD.events and backend != "cluster":
        # A call that logs nothing in bad/g (the active "w"'s beat) never meets its log, as
        # a single heartbeat does not; the call that adds "x" refuses the group. (On a
        # cluster a queue's beats go in one call: both are refused.)
        refused_for(info.value, corruption, [("bad", "g", "x")])
        assert client.hget(BAD.data, "w") == stored_v2(T0 - MS, T0, 5)
        assert client.hget(BAD.data, "x") is None
    else:
        assert_refused_the_bad_beats(client, before, info.value, corruption, beats)
    assert info.value.completed == len(beats) - len(info.value.refused)
    rows = good_rows(registry)
    assert all(rows[q, g, f"new{i}"] == (i, T0) for i in range(3) for q, g in GOOD)


def test_every_operation_on_the_bad_group_alone_changes_nothing(
    request: pytest.FixtureRequest, backend: str, corruption: Corruption
) -> None:
    client = raw_client(request, backend)
    registry = make_registry(request, backend)
    seed(registry, client, corruption)
    before = dump(client)
    # (A fleet read sets the group aside instead: test_a_fleet_read_sets_the_bad_group_aside.)
    calls: dict[str, Callable[[], object]] = {
        "heartbeat": lambda: registry.heartbeat("bad", "g", "w", now_ns=T0),
        "deregister": lambda: registry.deregister("bad", "g", "w", now_ns=T0),
        "snapshot of the group": lambda: registry.snapshot(now_ns=T0, queue="bad", group="g"),
    }
    if corruption.field is None and corruption.key != BAD.data:
        # A reader never reads a log, and meets the sorted set only in the counts.
        del calls["snapshot of the group"]
        if corruption.key == BAD.hb:
            calls["count_active_by_group"] = lambda: registry.count_active_by_group(
                now_ns=T0, queue="bad", group="g"
            )
    if corruption.key == BAD.events:
        del calls["heartbeat"]  # "w" is active: its beat logs nothing, so never meets the log
    if corruption.field is not None:
        # A spoilt value costs its own row only, in a read of its group too (issue 30, item 3:
        # tests/test_spoilt_data.py).
        del calls["snapshot of the group"]
    for name, call in calls.items():
        with pytest.raises(PresenceDataError, match=corruption.message()):
            call()
        assert dump(client) == before, name
        RUN_COUNTS["bad data: refusals confined to their own group"] += 1


def test_a_fleet_read_sets_the_bad_group_aside_and_reads_every_other(
    request: pytest.FixtureRequest, backend: str, corruption: Corruption
) -> None:
    """Issue 23, item 3: a fleet-wide read warns about the bad group (naming its key), lists
    it in `skipped`, and reads every other group; it writes nothing."""
    client = raw_client(request, backend)
    registry = make_registry(request, backend)
    seed(registry, client, corruption)
    before = dump(client)
    # A reader never reads a log, and meets the sorted set only in the counts.
    reads_it = corruption.field is not None or corruption.key == BAD.data
    counts_it = corruption.field is None and corruption.key == BAD.hb
    good = {(q, g, "old") for q, g in GOOD}
    with pytest.warns(PresenceDataWarning, match=re.escape(BAD.data)) as caught:  # noqa: PT031
        rows = registry.snapshot(now_ns=T0)
        streamed = list(registry.iter_snapshot(now_ns=T0))
        counts = registry.count_active_by_group(now_ns=T0, ttl_ms=10)
        size = len(registry)
        groups = registry.groups(now_ns=T0, ttl_ms=10)
        if not (reads_it or counts_it):
            warnings.warn(PresenceDataWarning(BAD.data), stacklevel=1)  # this one reads it all
    assert all(BAD.data in str(w.message) for w in caught)
    assert {row.key for row in rows} == {row.key for row in streamed}
    assert {row.key for row in rows} >= good
    assert ("bad", "g", "w") not in {row.key for row in rows} or not reads_it
    if reads_it:
        assert [s.key for s in getattr(rows, "skipped", [BAD.data])] == [BAD.data]
    assert set(counts) >= {(q, g) for q, g in GOOD}
    assert ("bad", "g") not in counts or not counts_it
    if counts_it:
        assert [s.key for s in getattr(counts, "skipped", [BAD.data])] == [BAD.data]
        assert size == len(GOOD)
    assert {(g.queue, g.group) for g in groups} >= set(GOOD)
    assert dump(client) == before
    RUN_COUNTS["bad data: fleet reads that set one group aside"] += 1


def test_a_prune_removes_every_other_group_s_expired_and_names_the_bad_one(
    request: pytest.FixtureRequest, backend: str, corruption: Corruption
) -> None:
    client = raw_client(request, backend)
    registry = make_registry(request, backend)
    seed(registry, client, corruption)
    before = bad_keys(client)
    with pytest.raises(PresenceBatchError) as info:
        registry.prune_expired(now_ns=T0 + 10**15)
    # A group refused whole lists none of its consumers; a spoilt one stays, listed.
    refused_for(info.value, corruption, [] if corruption.field is None else [("bad", "g", "w")])
    assert info.value.completed == len(GOOD)
    assert good_rows(registry) == {}
    assert bad_keys(client) == before


@pytest.mark.parametrize("name", VALUE_CORRUPTIONS)
def test_a_beat_of_a_sound_consumer_of_the_bad_group_is_written(
    request: pytest.FixtureRequest, backend: str, name: str
) -> None:
    """A single beat reads its own consumer's value only: a spoilt neighbour costs it
    nothing; a batch refuses the whole group (it reads every beat's value first)."""
    client = raw_client(request, backend)
    registry = make_registry(request, backend)
    seed(registry, client, CORRUPTIONS[name])
    registry.heartbeat("bad", "g", "y", 4, now_ns=T0)
    assert client.zscore(BAD.hb, "y") is not None
    assert client.hget(BAD.data, "y") == stored_v2(T0, T0, 4)


@pytest.mark.parametrize("name", ["sorted-set-is-a-list", "value-garbage"])
@pytest.mark.parametrize("sync_backend", [p for p in BACKENDS if p.values[0] != "async"])
def test_a_reporter_serving_ten_queues_writes_nine_and_names_the_tenth(
    request: pytest.FixtureRequest,
    sync_backend: str,
    name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The reporter keeps no outage for one bad group: it writes every other queue at each
    flush, warns once naming the bad group, keeps its beats, and writes them once the key
    is repaired. (`AsyncPresenceReporter` shares this logic: `coalescer.Coalescer`.)"""
    backend = sync_backend
    client = raw_client(request, backend)
    registry = make_registry(request, backend)
    corruption = CORRUPTIONS[name]
    seed(registry, client, corruption)
    queues = [f"q{i}" for i in range(9)]
    caplog.set_level(logging.INFO, logger="redis_presence.reporter")
    with PresenceReporter(registry, interval_ms=3_600_000) as reporter:
        for attempt in range(2):
            for q in queues:
                reporter.beat(q, "g", "c", attempt)
            reporter.beat("bad", "g", "w", 7)
            with pytest.raises(PresenceBatchError) as info:
                reporter.flush()
            refused_for(info.value, corruption, [("bad", "g", "w")])
            assert info.value.completed == len(queues)
            assert list(reporter.refused) == [("bad", "g")]
            assert reporter.pending == 1  # the bad group's beat, kept for the next flush
            rows = {r.queue: r.lease_count for q in queues for r in registry.snapshot(queue=q)}
            assert rows == dict.fromkeys(queues, attempt)
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1, [r.getMessage() for r in warnings]
        assert "queue 'bad' group 'g'" in warnings[0].getMessage()
        client.delete(BAD.hb, BAD.data)  # the operator repairs the group
        assert reporter.flush() == 1
        assert reporter.refused == {}
        assert "writes queue 'bad' group 'g' again" in caplog.text
        (row,) = registry.snapshot(queue="bad")
        assert (row.consumer, row.lease_count) == ("w", 7)


@pytest.mark.redis_server
@pytest.mark.parametrize("name", ["hash-is-a-list", "value-garbage", "value-negative"])
def test_the_cli_names_the_key_and_exits_5(
    request: pytest.FixtureRequest, redis_url: str, name: str
) -> None:
    client = raw_client(request, "redis")
    corruption = CORRUPTIONS[name]
    seed(RedisPresenceRegistry(client), client, corruption)
    before = dump(client)
    done = subprocess.run(
        cli_argv("--url", redis_url, "ls", "--format", "json"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # A fleet read sets the group aside with one warning line naming the key, and lists the rest.
    assert done.returncode == 0, done.stderr
    (warning,) = [line for line in done.stderr.splitlines() if "warning" in line]
    assert warning.startswith("redis-presence: warning: redis-presence set aside presence:{bad}")
    assert "Traceback" not in done.stderr
    assert '"orders"' in done.stdout
    for argv in (["heartbeat", "bad", "g", "w"], ["deregister", "bad", "g", "w"]):
        done = subprocess.run(
            cli_argv("--url", redis_url, *argv),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 5, (argv, done.stderr)
        assert done.stderr.count("\n") == 1, done.stderr  # one line, no traceback
        assert re.search(corruption.message(), done.stderr), done.stderr
        assert dump(client) == before


# -- metadata another program wrote (issue 22, item 5) ------------------------------------

NESTED_META = {
    "nested-arrays": b"[" * 100_000 + b"]" * 100_000,
    "nested-objects": b'{"a":' * 50_000 + b'"b"' + b"}" * 50_000,
    "nested-in-a-value": b'{"a":{"b":"c"}}',
    "oversized": b'{"a":"' + b"x" * 100_000 + b'"}',
    "not-an-object": b'["a","b"]',
}


@pytest.mark.redis_server
@pytest.mark.parametrize("name", list(NESTED_META))
def test_metadata_nested_or_oversized_is_a_data_error_confined_to_its_consumer(
    request: pytest.FixtureRequest, name: str
) -> None:
    """`decode_meta` refuses it before JSON parsing recurses: `snapshot(with_meta=True)`
    raises a `PresenceMetaError` (a `PresenceDataError`) naming the key and the consumer,
    which carries every row read (that consumer's `meta` empty); every other read works."""
    client = raw_client(request, "redis")
    registry = RedisPresenceRegistry(client)
    registry.heartbeat_many([(q, g, "old", 1) for q, g in GOOD], now_ns=T0 - MS)
    registry.heartbeat("bad", "g", "w", 2, now_ns=T0 - MS)
    registry.heartbeat("bad", "g", "x", 1, now_ns=T0 - MS)
    assert registry.describe("bad", "g", "x", {"host": "h1"})
    assert registry.describe("orders", "billing", "old", {"host": "h2"})
    client.hset(BAD.meta, "w", NESTED_META[name])
    before = dump(client)
    for queue, group in ((None, None), ("bad", "g")):
        with pytest.raises(PresenceMetaError) as info:
            registry.snapshot(now_ns=T0, with_meta=True, queue=queue, group=group)
        assert isinstance(info.value, PresenceDataError)
        message = str(info.value)
        assert f"redis-presence key {BAD.meta} field 'w' holds metadata" in message, message
        assert len(message) < 400
        assert list(info.value.unreadable) == [("bad", "g", "w")]
        rows = {row.key: dict(row.meta) for row in info.value.rows}
        assert rows[("bad", "g", "w")] == {}
        assert rows[("bad", "g", "x")] == {"host": "h1"}
    assert len(info.value.rows) == 2
    seen: list[ConsumerPresence] = []  # a streaming read hands out every row first, then raises
    with pytest.raises(PresenceMetaError, match=re.escape(BAD.meta)):
        seen.extend(registry.iter_snapshot(now_ns=T0, with_meta=True))
    assert len(seen) == len(GOOD) + 2
    sound = registry.snapshot(now_ns=T0, with_meta=True, queue="orders", group="billing")
    assert [dict(row.meta) for row in sound] == [{"host": "h2"}]
    assert len(registry.snapshot(now_ns=T0, queue="bad")) == 2  # without metadata: sound
    assert dump(client) == before


@pytest.mark.redis_server
def test_the_group_page_and_api_show_unreadable_metadata_as_such(
    request: pytest.FixtureRequest, redis_url: str
) -> None:
    from web_client import Clock, group_path, make_client

    client = raw_client(request, "redis")
    registry = RedisPresenceRegistry(client)
    registry.heartbeat("bad", "g", "w", 2, now_ns=T0 - MS)
    registry.heartbeat("bad", "g", "x", 1, now_ns=T0 - MS)
    assert registry.describe("bad", "g", "x", {"host": "h1"})
    client.hset(BAD.meta, "w", NESTED_META["nested-arrays"])
    with make_client(redis_url, Clock(T0)) as web:
        body = web.get(group_path("bad", "g")).json()
        assert body["group"]["active"] == 2
        consumers = {row["consumer"]: row for row in body["consumers"]}
        assert consumers["w"]["meta"] == {}
        assert "holds metadata this package did not write" in consumers["w"]["meta_error"]
        assert consumers["x"]["meta"] == {"host": "h1"}
        assert "meta_error" not in consumers["x"]
        listed = web.get("/api/v1/consumers", params={"queue": "bad", "meta": "1"}).json()
        assert [row.get("meta_error") is not None for row in listed["consumers"]] == [True, False]
        page = web.get("/group", params={"queue": "bad", "group": "g"})
        assert page.status_code == 200, page.text[:300]
        assert "metadata unreadable" in page.text
        assert "h1" in page.text

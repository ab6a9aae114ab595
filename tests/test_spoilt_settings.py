"""One spoilt settings key never blinds the fleet (issue 30, item 2).

A group's shared TTL (``P:{q}:g:ttl``) or progress budget (``P:{q}:g:stuck``) that another
program wrote (text, a number out of range, a key of another type), or a queue's declared
minimums (``P:{q}:expect``) of another type: every read of many groups sets that group (or
that queue's declarations) aside, with one `PresenceDataWarning` naming it, lists it in
`.skipped`, reads every other group, and never shows the group as one without consumers; a
read of that one group raises its data error; a batch and a prune refuse that group alone;
``doctor`` names the key. A spoilt setting of the whole prefix (``P:ttl``, ``P:stuck``)
concerns every group without its own: every read that needs it fails, naming it (never the
default used in silence). Library (sync and asyncio), CLI and web service, on real servers.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest
from backends import dump, make_registry, raw_client
from cli_invoke import invoke
from prometheus_client.parser import text_string_to_metric_families

from redis_presence import (
    PresenceBatchError,
    PresenceDataError,
    PresenceDataWarning,
    PresenceReporter,
    RedisPresenceRegistry,
)
from redis_presence.doctor import Status, diagnose
from redis_presence.keys import Keyspace

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

from redis_presence.web import WebConfig, create_app

MS = 1_000_000
T0 = 1_796_000_000_123_456_000
LATER = T0 + 40_000 * MS  # every consumer stale under the default TTL (30 s)
KEYS = Keyspace("presence")
BAD = KEYS.group("bad", "g")
GOOD = [("orders", "billing"), ("mail", "send")]
EVERY = [*GOOD, ("bad", "g")]

BACKENDS = [
    pytest.param("fakeredis", id="fakeredis"),
    pytest.param("redis", id="redis-server", marks=pytest.mark.redis_server),
    pytest.param("cluster", id="cluster", marks=pytest.mark.redis_server),
    pytest.param("async", id="async", marks=pytest.mark.redis_server),
]


class Spoil(NamedTuple):
    """One way another program spoils a setting: its key, what plants it, which setting."""

    key: str
    plant: Callable[[Any], Any]
    kind: str  # "ttl" or "stuck"


GROUP_SPOILS = {
    "ttl-text": Spoil(BAD.ttl, lambda c: c.set(BAD.ttl, "abc"), "ttl"),
    "ttl-zero": Spoil(BAD.ttl, lambda c: c.set(BAD.ttl, "0"), "ttl"),
    "ttl-a-hash": Spoil(BAD.ttl, lambda c: c.hset(BAD.ttl, "a", "b"), "ttl"),
    "stuck-text": Spoil(BAD.stuck, lambda c: c.set(BAD.stuck, "5 min"), "stuck"),
    "stuck-a-list": Spoil(BAD.stuck, lambda c: c.rpush(BAD.stuck, "x"), "stuck"),
}
PREFIX_SPOILS = {
    "prefix-ttl-text": Spoil(KEYS.ttl, lambda c: c.set(KEYS.ttl, "abc"), "ttl"),
    "prefix-ttl-a-hash": Spoil(KEYS.ttl, lambda c: c.hset(KEYS.ttl, "a", "b"), "ttl"),
    "prefix-stuck-text": Spoil(KEYS.stuck, lambda c: c.set(KEYS.stuck, "-1"), "stuck"),
}


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def seed(registry: Any) -> str:
    """A consumer in each group (bad/g declared, min 1) beating at T0 - 1 ms; the cursor of
    `changes` at T0."""
    registry.heartbeat_many([(q, g, "a", 1) for q, g in EVERY], now_ns=T0 - MS)
    registry.expect("bad", "g", 1)
    registry.expect("orders", "billing", 1)
    _, cursor = registry.changes(now_ns=T0)
    return str(cursor)


T = Any


def warned(read: Callable[[], T]) -> tuple[T, list[str]]:
    """`read()` and the `PresenceDataWarning`s it gave (any other warning fails)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        answer = read()
    assert all(issubclass(w.category, PresenceDataWarning) for w in caught), caught
    return answer, [str(w.message) for w in caught]


def names(answer: Any) -> set[tuple[str, str]]:
    """The (queue, group) an answer holds: rows, groups, events or counts."""
    if isinstance(answer, dict):
        return set(answer)
    if isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[1], (str, list)):
        answer = answer[0] if isinstance(answer[1], str) else answer[1]  # changes / rows_of
    answer = getattr(answer, "groups", answer)  # a GroupsPage
    return {(item.queue, item.group) for item in answer}


def fleet_reads(registry: Any, cursor: str) -> dict[str, Callable[[], Any]]:
    """Every read of many groups, and whether it needs the progress budget."""
    named = [(q, g, "a") for q, g in EVERY]
    return {
        "snapshot": lambda: registry.snapshot(now_ns=T0),
        "iter_snapshot": lambda: list(registry.iter_snapshot(now_ns=T0)),
        "snapshot of a queue": lambda: registry.snapshot(now_ns=T0, queue="bad"),
        "count_active_by_group": lambda: registry.count_active_by_group(now_ns=T0),
        "groups": lambda: registry.groups(now_ns=T0),
        "groups with details": lambda: registry.groups(now_ns=T0, details=True),
        "group_page": lambda: registry.group_page(now_ns=T0),
        "changes": lambda: registry.changes(cursor, now_ns=LATER),
        "rows_of": lambda: registry.execute(registry.plans.rows_of(named)),
    }


NEEDS_STUCK = {"snapshot", "iter_snapshot", "snapshot of a queue"}


@pytest.mark.parametrize("name", list(GROUP_SPOILS))
def test_a_read_of_many_groups_sets_the_spoilt_group_aside_and_reads_every_other(
    request: pytest.FixtureRequest, backend: str, name: str
) -> None:
    """Before: each of these raised the data error (a spoilt progress budget: the
    snapshots), so a spoilt key of one group hid the whole fleet."""
    spoil = GROUP_SPOILS[name]
    client = raw_client(request, backend)
    registry = make_registry(request, backend)
    cursor = seed(registry)
    spoil.plant(client)
    before = dump(client)
    registry = make_registry(request, backend)  # one that has no settings cached
    for read, call in fleet_reads(registry, cursor).items():
        answer, said = warned(call)
        affected = spoil.kind == "ttl" or read in NEEDS_STUCK
        everyone = {("bad", "g")} if read == "snapshot of a queue" else set(EVERY)
        if not affected:  # the read needs no progress budget: it reads that group too
            assert (names(answer), said) == (everyone, []), read
            continue
        # Left out, declared or not: never shown as a group without consumers.
        assert names(answer) == everyone - {("bad", "g")}, read
        assert len(said) == 1, (read, said)
        assert said[0].startswith(f"redis-presence set aside {BAD.data}: {spoil.key} holds ")
        if hasattr(answer, "skipped"):
            (skipped,) = answer.skipped
            assert (skipped.key, skipped.queue, skipped.group) == (BAD.data, "bad", "g"), read
            assert skipped.consumer is None, read
            assert skipped.reason.startswith(spoil.key), read
    assert dump(client) == before  # a read writes nothing


@pytest.mark.parametrize("name", list(GROUP_SPOILS))
def test_a_read_of_the_spoilt_group_alone_raises_its_data_error(
    request: pytest.FixtureRequest, backend: str, name: str
) -> None:
    """A read (or a beat) of that one group, queue and group given, cannot classify it: it
    raises the data error naming the key (one of a key of another type: the WRONGTYPE)."""
    spoil = GROUP_SPOILS[name]
    client = raw_client(request, backend)
    registry = make_registry(request, backend)
    seed(registry)
    spoil.plant(client)
    before = dump(client)
    registry = make_registry(request, backend)  # one that has no settings cached
    calls: dict[str, Callable[[], Any]] = {
        "snapshot of the group": lambda: registry.snapshot(now_ns=T0, queue="bad", group="g"),
        "consumer": lambda: registry.consumer("bad", "g", "a", now_ns=T0),
    }
    if spoil.kind == "ttl":
        calls |= {
            "count_active": lambda: registry.count_active("bad", "g", now_ns=T0),
            "group": lambda: registry.group("bad", "g", now_ns=T0),
            "counts of the group": lambda: registry.count_active_by_group(
                now_ns=T0, queue="bad", group="g"
            ),
            "ttl_source": lambda: registry.ttl_source("bad", "g"),
            "heartbeat": lambda: registry.heartbeat("bad", "g", "a", 1, now_ns=T0),
        }
    for read, call in calls.items():
        with pytest.raises(PresenceDataError, match=re.escape(spoil.key)):
            call()
        assert dump(client) == before, read


@pytest.mark.parametrize("name", [n for n, s in GROUP_SPOILS.items() if s.kind == "ttl"])
def test_a_batch_and_a_prune_refuse_the_spoilt_group_alone(
    request: pytest.FixtureRequest, backend: str, name: str
) -> None:
    """Before: the batch raised and wrote nothing, the prune raised and pruned nothing."""
    spoil = GROUP_SPOILS[name]
    client = raw_client(request, backend)
    registry = make_registry(request, backend)
    seed(registry)
    spoil.plant(client)
    registry = make_registry(request, backend)  # one that has no settings cached
    bad_before = {k: v for k, v in dump(client).items() if k.startswith(b"presence:{bad}")}
    with pytest.raises(PresenceBatchError) as batch:
        registry.heartbeat_many([(q, g, "b", 2) for q, g in EVERY], now_ns=T0)
    assert list(batch.value.failed) == [("bad", "g")]
    assert re.search(re.escape(spoil.key), str(batch.value.failed["bad", "g"]))
    assert (batch.value.refused, batch.value.completed) == ([("bad", "g", "b")], len(GOOD))
    rows, _ = warned(lambda: registry.snapshot(now_ns=T0))
    assert {r.key for r in rows} == {(q, g, c) for q, g in GOOD for c in ("a", "b")}
    with pytest.raises(PresenceBatchError) as pruned:
        registry.prune_expired(now_ns=T0 + 10**15)
    assert list(pruned.value.failed) == [("bad", "g")]
    assert (pruned.value.refused, pruned.value.completed) == ([], 2 * len(GOOD))
    after = {k: v for k, v in dump(client).items() if k.startswith(b"presence:{bad}")}
    assert {k: v for k, v in after.items() if not k.endswith(b":events")} == {
        k: v for k, v in bad_before.items() if not k.endswith(b":events")
    }
    assert registry.snapshot(now_ns=T0, queue="orders") == []


@pytest.mark.parametrize("sync_backend", [p for p in BACKENDS if p.values[0] != "async"])
def test_a_reporter_writes_every_other_group_and_keeps_the_spoilt_one_s_beats(
    request: pytest.FixtureRequest, sync_backend: str
) -> None:
    """Before: its flush raised the data error and wrote nothing, for every group."""
    client = raw_client(request, sync_backend)
    seed(make_registry(request, sync_backend))
    GROUP_SPOILS["ttl-text"].plant(client)
    registry = make_registry(request, sync_backend)
    with PresenceReporter(registry, interval_ms=3_600_000) as reporter:
        for q, g in EVERY:
            reporter.beat(q, g, "r", 5)
        with pytest.raises(PresenceBatchError) as info:
            reporter.flush()
        assert (info.value.completed, list(reporter.refused)) == (len(GOOD), [("bad", "g")])
        assert reporter.pending == 1  # the spoilt group's beat, kept for the next flush
        registry.set_ttl(None, queue="bad", group="g")  # the operator repairs the key
        assert reporter.flush() == 1
    rows, _ = warned(lambda: registry.snapshot(now_ns=T0))
    assert {r.key for r in rows if r.consumer == "r"} == {(q, g, "r") for q, g in EVERY}


@pytest.mark.parametrize("name", list(PREFIX_SPOILS))
def test_a_spoilt_setting_of_the_prefix_fails_every_read_that_needs_it(
    request: pytest.FixtureRequest, backend: str, name: str
) -> None:
    """``P:ttl`` or ``P:stuck`` is every group's default: no group to set aside, and the
    package's default would silently classify with a budget nobody stored. Each read that
    needs it raises a data error naming the key and saying it is the prefix's; a read that
    needs it not (the counts, for a progress budget) and a group with its own read on."""
    spoil = PREFIX_SPOILS[name]
    client = raw_client(request, backend)
    registry = make_registry(request, backend)
    cursor = seed(registry)
    registry.set_ttl(60_000, queue="bad", group="g")
    registry.set_stuck_after(60_000, queue="bad", group="g")
    spoil.plant(client)
    registry = make_registry(request, backend)  # one that has no settings cached
    for read, call in fleet_reads(registry, cursor).items():
        if spoil.kind == "stuck" and read not in NEEDS_STUCK:
            answer, said = warned(call)
            assert (names(answer) >= set(GOOD), said) == (True, []), read
            continue
        if read == "snapshot of a queue":
            continue  # bad/g has its own settings: read below
        with pytest.raises(PresenceDataError, match=re.escape(spoil.key)) as info:
            call()
        assert "the prefix's shared" in str(info.value), read
    own, said = warned(lambda: registry.snapshot(now_ns=T0, queue="bad", group="g"))
    assert ([r.key for r in own], said) == ([("bad", "g", "a")], [])
    with pytest.raises(PresenceDataError, match="the prefix's shared"):
        registry.snapshot(now_ns=T0, queue="orders", group="billing")


def test_declared_minimums_of_another_type_are_set_aside(
    request: pytest.FixtureRequest, backend: str
) -> None:
    """``P:{q}:expect`` of another type: `expected`, `groups` and `group_page` set that
    queue's declarations aside and read every other (before: each raised WRONGTYPE); the
    groups of that queue are still counted, undeclared; one group's minimum raises."""
    client = raw_client(request, backend)
    registry = make_registry(request, backend)
    seed(registry)
    expect = KEYS.queue_expect("bad")
    client.delete(expect)
    client.set(expect, "1")
    client.zadd(KEYS.expects, {expect: 0})
    registry = make_registry(request, backend)
    expected, said = warned(registry.expected)
    assert (expected, len(said)) == ({("orders", "billing"): 1}, 1)
    assert said[0].startswith(f"redis-presence set aside {expect}: ")
    reads = {
        "groups": lambda: registry.groups(now_ns=T0),
        "group_page": lambda: registry.group_page(now_ns=T0).groups,
    }
    for read, call in reads.items():
        answer, said = warned(call)
        assert {(g.queue, g.group, g.active, g.min_active) for g in answer} == {
            ("orders", "billing", 1, 1),
            ("mail", "send", 1, None),
            ("bad", "g", 1, None),
        }, read
        assert len(said) == 1, read
        assert expect in said[0], read
    (skipped,) = warned(reads["groups"])[0].skipped
    assert (skipped.key, skipped.queue, skipped.group) == (expect, "bad", None)
    with pytest.raises(PresenceDataError, match=re.escape(expect)):
        registry.min_active("bad", "g")


# -- doctor, the CLI, the web service ---------------------------------------------------


@pytest.fixture
def spoilt_store(redis_url: str, redis_client: Any) -> Any:
    """The seeded store of the session's redis-server (spoilt by each test); `redis_url`
    first, which flushes it too."""
    seed(RedisPresenceRegistry(redis_client))
    return redis_client


@pytest.mark.redis_server
@pytest.mark.parametrize("name", [*GROUP_SPOILS, *PREFIX_SPOILS])
def test_doctor_names_the_spoilt_key(spoilt_store: Any, name: str) -> None:
    """Before: "every indexed group decodes" (it read with a TTL of its own)."""
    spoil = {**GROUP_SPOILS, **PREFIX_SPOILS}[name]
    spoil.plant(spoilt_store)
    found = {f.check: f for f in diagnose(RedisPresenceRegistry(spoilt_store))}["undecodable"]
    assert spoil.key in found.summary, found
    if name in PREFIX_SPOILS:  # every read fails: a failure, not a warning
        assert found.status is Status.FAIL
        assert "the prefix's shared" in found.summary
    else:
        assert found.status is Status.WARN
        assert BAD.data in found.summary


def cli_lines(url: str, now_ns: int, *args: str) -> tuple[int, str, list[str]]:
    """Exit code, stdout and the warning lines of one CLI command at `now_ns`."""
    result = invoke(["--url", url, "--now-ns", str(now_ns), *args])
    warned_lines = [line for line in result.stderr.splitlines() if "warning" in line]
    return result.exit_code, result.stdout, warned_lines


@pytest.mark.redis_server
@pytest.mark.parametrize("name", [n for n, s in GROUP_SPOILS.items() if s.kind == "ttl"])
def test_the_cli_reads_every_other_group_with_one_warning_line(
    spoilt_store: Any, redis_url: str, name: str
) -> None:
    """Before: ls, counts and prune --dry-run exited 5 naming the key, showing nothing."""
    GROUP_SPOILS[name].plant(spoilt_store)
    said = f"redis-presence: warning: redis-presence set aside {BAD.data}: "
    for now, args in ((T0, ["ls"]), (T0, ["counts"]), (T0 + 10**15, ["prune", "--dry-run"])):
        code, out, lines = cli_lines(redis_url, now, *args, "--format", "json")
        assert code == 0, (args, out)
        assert [line[: len(said)] for line in lines] == [said], (args, lines)
        assert '"orders"' in out, (args, out)
        assert '"mail"' in out, (args, out)
        assert '"bad"' not in out, (args, out)
    # A prune cannot tell the spoilt group's expired consumers: it prunes the others and
    # says which group it left, exiting as a refusal does.
    result = invoke(["--url", redis_url, "--now-ns", str(T0 + 10**15), "prune"])
    assert result.exit_code == 5, result.output
    assert "bad/g" in result.stderr, result.stderr
    assert RedisPresenceRegistry(spoilt_store).snapshot(now_ns=T0, queue="orders") == []


def metric(text: str, family: str) -> dict[tuple[str, ...], float]:
    return {
        tuple(sorted(s.labels.values())): s.value
        for f in text_string_to_metric_families(text)
        if f.name == family
        for s in f.samples
    }


@pytest.mark.redis_server
@pytest.mark.parametrize("name", [n for n, s in GROUP_SPOILS.items() if s.kind == "ttl"])
@pytest.mark.parametrize("stuck_metrics", [False, True], ids=["groups", "stuck-metrics"])
def test_the_web_service_shows_every_other_group(
    spoilt_store: Any, redis_url: str, name: str, stuck_metrics: bool
) -> None:
    """Before: /, /consumers, /api/v1/groups, /api/v1/consumers and /api/v1/events answered
    502, /metrics redis_presence_up 0."""
    cursor = str(RedisPresenceRegistry(spoilt_store).changes(now_ns=T0)[1])
    GROUP_SPOILS[name].plant(spoilt_store)
    config = WebConfig(url=redis_url, read_cache_s=0, stuck_metrics=stuck_metrics)
    app = create_app(config, clock=lambda: LATER)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PresenceDataWarning)  # the service's own log
        with TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False) as web:
            for path in ("/", "/consumers", "/api/v1/groups", "/api/v1/consumers"):
                page = web.get(path)
                assert page.status_code == 200, (path, page.text[:300])
                assert "billing" in page.text, path
                assert ">bad<" not in page.text, path
            groups = web.get("/api/v1/groups").json()["groups"]
            assert {(g["queue"], g["group"]) for g in groups} == set(GOOD)
            consumers = web.get("/api/v1/consumers").json()["consumers"]
            assert {(c["queue"], c["group"]) for c in consumers} == set(GOOD)
            events = web.get("/api/v1/events", params={"cursor": cursor})
            assert events.status_code == 200, events.text
            assert {(e["queue"], e["group"]) for e in events.json()["events"]} == set(GOOD)
            scrape = web.get("/metrics").text
            one = web.get("/api/v1/groups/bad/g")  # that one group: its data error
            assert one.status_code == 502
            assert BAD.ttl in one.json()["message"]
    assert metric(scrape, "redis_presence_up") == {(): 1.0}
    below = metric(scrape, "redis_presence_group_below_min")
    assert below == {("billing", "orders"): 1.0}  # stale at LATER: below, and bad/g not 0

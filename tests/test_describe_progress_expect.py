"""Issue 14 on every backend: consumer metadata, progress and `stuck`, declared groups, and
what a restart under the same or a new name does."""

from __future__ import annotations

from typing import Any

import pytest
from backends import BACKENDS, SMALL_BACKENDS, make_registry

from redis_presence import ConsumerPresence, PresenceState, process_instance
from redis_presence.model import DEFAULT_STUCK_AFTER_MS, GroupPresence
from redis_presence.validation import MAX_META_BYTES, MAX_META_KEYS

MS = 1_000_000
T0 = 1_796_000_000_123_456_000
TTL = 30_000

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=BACKENDS + SMALL_BACKENDS)
def registry(request: pytest.FixtureRequest) -> Any:
    return make_registry(request, request.param, max_future_ms=None)


def one(registry: Any, now_ns: int, **options: Any) -> ConsumerPresence:
    (row,) = registry.snapshot(now_ns=now_ns, ttl_ms=TTL, **options)
    assert isinstance(row, ConsumerPresence)
    return row


# -- metadata ------------------------------------------------------------------------


def test_metadata_is_read_only_with_meta_and_empty_on_a_plain_snapshot(registry: Any) -> None:
    registry.heartbeat("q", "g", "w1", 1, now_ns=T0)
    assert registry.describe("q", "g", "w1", {"host": "h-1", "pid": "42", "ü": "é"}) is True
    row = one(registry, T0, with_meta=True)
    assert dict(row.meta) == {"host": "h-1", "pid": "42", "ü": "é"}
    assert row.to_dict()["meta"] == {"host": "h-1", "pid": "42", "ü": "é"}
    with pytest.raises(TypeError):
        row.meta["host"] = "other"  # type: ignore[index]
    hash(row)  # rows stay hashable
    plain = one(registry, T0)
    assert dict(plain.meta) == {}
    assert plain == ConsumerPresence(
        "q", "g", "w1", T0, T0, 0, 1, PresenceState.ACTIVE, instance=process_instance()
    )


def test_describe_replaces_and_an_empty_mapping_removes(registry: Any) -> None:
    registry.heartbeat("q", "g", "w1", now_ns=T0)
    registry.describe("q", "g", "w1", {"a": "1", "b": "2"})
    registry.describe("q", "g", "w1", {"b": "3"})
    assert dict(one(registry, T0, with_meta=True).meta) == {"b": "3"}
    registry.describe("q", "g", "w1", {})
    assert dict(one(registry, T0, with_meta=True).meta) == {}


def test_an_untracked_consumer_gets_no_metadata(registry: Any) -> None:
    assert registry.describe("q", "g", "ghost", {"host": "h"}) is False
    registry.heartbeat("q", "g", "ghost", now_ns=T0)
    assert dict(one(registry, T0, with_meta=True).meta) == {}


@pytest.mark.parametrize(
    ("meta", "error", "words"),
    [
        pytest.param(
            {f"k{i}": "v" for i in range(MAX_META_KEYS + 1)}, ValueError, "meta", id="keys"
        ),
        pytest.param({"k": "v" * MAX_META_BYTES}, ValueError, "meta", id="bytes"),
        pytest.param({"k": 7}, TypeError, "meta", id="value-type"),
        pytest.param({"": "v"}, ValueError, "meta key", id="empty-key"),
        pytest.param({3: "v"}, TypeError, "meta key", id="key-type"),
        pytest.param([("k", "v")], TypeError, "meta", id="not-a-mapping"),
        pytest.param({"k": "\udcff"}, ValueError, "meta", id="not-utf8"),
    ],
)
def test_bad_metadata_is_refused_naming_the_argument(
    registry: Any, meta: Any, error: type[Exception], words: str
) -> None:
    registry.heartbeat("q", "g", "w1", now_ns=T0)
    registry.describe("q", "g", "w1", {"kept": "yes"})
    with pytest.raises(error, match=words):
        registry.describe("q", "g", "w1", meta)
    assert dict(one(registry, T0, with_meta=True).meta) == {"kept": "yes"}


def test_metadata_goes_with_its_consumer_on_deregister_and_prune(registry: Any) -> None:
    registry.heartbeat("q", "g", "left", now_ns=T0)
    registry.heartbeat("q", "g", "pruned", now_ns=T0)
    registry.describe("q", "g", "left", {"host": "a"})
    registry.describe("q", "g", "pruned", {"host": "b"})
    assert registry.deregister("q", "g", "left", now_ns=T0)
    assert registry.prune_expired(now_ns=T0 + (2 * TTL + 1) * MS, ttl_ms=TTL) == 1
    registry.heartbeat("q", "g", "left", now_ns=T0 + 1)
    registry.heartbeat("q", "g", "pruned", now_ns=T0 + 1)
    rows = registry.snapshot(now_ns=T0 + 1, ttl_ms=TTL, with_meta=True)
    assert [dict(row.meta) for row in rows] == [{}, {}]


# -- progress and stuck ---------------------------------------------------------------


def test_progress_is_none_until_the_first_and_kept_by_later_beats(registry: Any) -> None:
    registry.heartbeat("q", "g", "w1", 2, now_ns=T0)
    assert one(registry, T0).last_progress_ns is None
    registry.heartbeat("q", "g", "w1", 2, now_ns=T0 + 5 * MS, progressed=True)
    registry.heartbeat("q", "g", "w1", 3, now_ns=T0 + 9 * MS)
    row = one(registry, T0 + 9 * MS)
    assert row.last_progress_ns == T0 + 5 * MS
    assert (row.registered_at_ns, row.last_heartbeat_ns, row.lease_count) == (T0, T0 + 9 * MS, 3)
    assert row.to_dict()["last_progress_ns"] == T0 + 5 * MS


def test_a_first_beat_with_progress_registers_and_progresses_at_once(registry: Any) -> None:
    registry.heartbeat("q", "g", "w1", 1, now_ns=T0, progressed=True)
    row = one(registry, T0)
    assert (row.registered_at_ns, row.last_progress_ns) == (T0, T0)


def test_progressed_must_be_a_bool(registry: Any) -> None:
    with pytest.raises(TypeError, match="progressed"):
        registry.heartbeat("q", "g", "w1", 1, now_ns=T0, progressed=1)
    assert registry.snapshot(now_ns=T0) == []


def test_stuck_on_the_exact_boundary_before_and_after_the_first_progress(registry: Any) -> None:
    budget = 1_000
    registry.heartbeat("q", "g", "w1", 1, now_ns=T0)
    # Before any progress, registration is the reference: stuck once more than `budget` whole
    # milliseconds have passed, i.e. from T0 + (budget + 1) ms on.
    edge = T0 + (budget + 1) * MS
    for now, stuck in ((edge - 1, False), (edge, True)):
        registry.heartbeat("q", "g", "w1", 1, now_ns=now)  # alive all along
        assert one(registry, now, stuck_after_ms=budget).stuck is stuck, now - T0
    registry.heartbeat("q", "g", "w1", 1, now_ns=edge, progressed=True)
    assert one(registry, edge, stuck_after_ms=budget).stuck is False
    later = edge + (budget + 1) * MS
    registry.heartbeat("q", "g", "w1", 1, now_ns=later - 1)
    assert one(registry, later - 1, stuck_after_ms=budget).stuck is False
    registry.heartbeat("q", "g", "w1", 1, now_ns=later)
    row = one(registry, later, stuck_after_ms=budget)
    assert row.stuck is True
    assert row.state is PresenceState.ACTIVE  # a flag on an active row, not a state


def test_only_active_consumers_holding_leases_are_stuck(registry: Any) -> None:
    registry.heartbeat("q", "g", "idle", 0, now_ns=T0)
    registry.heartbeat("q", "g", "busy", 4, now_ns=T0)
    now = T0 + 10 * MS
    rows = {r.consumer: r.stuck for r in registry.snapshot(now_ns=now, stuck_after_ms=1)}
    assert rows == {"idle": False, "busy": True}
    stale = T0 + (TTL + 1) * MS  # busy is stale now: not stuck, whatever the budget
    (busy, _) = registry.snapshot(now_ns=stale, ttl_ms=TTL, stuck_after_ms=1)
    assert (busy.state, busy.stuck) == (PresenceState.STALE, False)


def test_the_shared_progress_budget_is_the_default_of_reads(registry: Any) -> None:
    assert registry.stuck_after_source() == (DEFAULT_STUCK_AFTER_MS, "default")
    registry.heartbeat("q", "g", "w1", 1, now_ns=T0)
    registry.heartbeat("q", "g", "w1", 1, now_ns=T0 + 20 * MS)
    assert one(registry, T0 + 20 * MS).stuck is False  # five minutes by default
    registry.set_stuck_after(10)
    assert registry.stuck_after_source() == (10, "prefix")
    assert one(registry, T0 + 20 * MS).stuck is True
    registry.set_stuck_after(60_000, queue="q", group="g")
    assert registry.stuck_after_source("q", "g") == (60_000, "group")
    assert registry.stuck_after("q", "g") == 60_000
    assert one(registry, T0 + 20 * MS).stuck is False
    assert one(registry, T0 + 20 * MS, stuck_after_ms=10).stuck is True
    registry.set_stuck_after(None, queue="q", group="g")
    registry.set_stuck_after(None)
    assert registry.stuck_after_source() == (DEFAULT_STUCK_AFTER_MS, "default")
    with pytest.raises(ValueError, match="stuck_after_ms"):
        registry.set_stuck_after(0)
    with pytest.raises(ValueError, match="stuck_after_ms"):
        registry.snapshot(now_ns=T0, stuck_after_ms=-1)


def test_progress_goes_with_its_consumer(registry: Any) -> None:
    registry.heartbeat("q", "g", "w1", 1, now_ns=T0, progressed=True)
    registry.deregister("q", "g", "w1", now_ns=T0)
    registry.heartbeat("q", "g", "w1", 1, now_ns=T0 + MS)
    assert one(registry, T0 + MS).last_progress_ns is None


# -- declared groups ---------------------------------------------------------------


def test_declared_groups_show_with_zero_and_below_their_minimum(registry: Any) -> None:
    registry.expect("orders", "billing", 2)
    registry.expect("orders", "audit")
    registry.expect("mail", "sender", min_active=3)
    registry.heartbeat("orders", "billing", "w1", now_ns=T0)
    registry.heartbeat("orders", "shipping", "w2", now_ns=T0 - (TTL + 1) * MS)
    assert registry.expected() == {
        ("mail", "sender"): 3,
        ("orders", "audit"): 1,
        ("orders", "billing"): 2,
    }
    assert registry.groups(now_ns=T0, ttl_ms=TTL) == [
        GroupPresence("mail", "sender", 0, 0, 0, 3, True),
        GroupPresence("orders", "audit", 0, 0, 0, 1, True),
        GroupPresence("orders", "billing", 1, 0, 0, 2, True),
        GroupPresence("orders", "shipping", 0, 1, 0, None, False),
    ]
    # count_active_by_group keeps its contract: no key for a group without an active one.
    assert registry.count_active_by_group(now_ns=T0, ttl_ms=TTL) == {("orders", "billing"): 1}
    registry.expect("orders", "billing", 1)  # a new minimum replaces the old
    assert registry.groups(now_ns=T0, ttl_ms=TTL)[2].below is False


def test_groups_count_every_state(registry: Any) -> None:
    registry.heartbeat("q", "g", "a", now_ns=T0)
    registry.heartbeat("q", "g", "s", now_ns=T0 - (TTL + 1) * MS)
    registry.heartbeat("q", "g", "e", now_ns=T0 - (2 * TTL + 1) * MS)
    registry.heartbeat("q", "g", "e2", now_ns=T0 - (2 * TTL + 5) * MS)
    assert registry.groups(now_ns=T0, ttl_ms=TTL) == [GroupPresence("q", "g", 1, 1, 2, None, False)]


def test_declared_groups_survive_their_last_consumers_deregister_and_prune(registry: Any) -> None:
    registry.expect("q", "left")
    registry.expect("q", "pruned")
    registry.heartbeat("q", "left", "w1", now_ns=T0)
    registry.heartbeat("q", "pruned", "w2", now_ns=T0)
    registry.deregister("q", "left", "w1", now_ns=T0)
    assert registry.prune_expired(now_ns=T0 + (2 * TTL + 1) * MS, ttl_ms=TTL) == 1
    assert registry.snapshot(now_ns=T0) == []
    assert registry.groups(now_ns=T0, ttl_ms=TTL) == [
        GroupPresence("q", "left", 0, 0, 0, 1, True),
        GroupPresence("q", "pruned", 0, 0, 0, 1, True),
    ]


def test_unexpect_forgets_and_says_whether_it_was_declared(registry: Any) -> None:
    registry.expect("q", "a")
    registry.expect("q", "b")
    assert registry.unexpect("q", "a") is True
    assert registry.unexpect("q", "a") is False
    assert registry.expected() == {("q", "b"): 1}
    assert registry.unexpect("q", "b") is True
    assert registry.expected() == {}
    assert registry.groups(now_ns=T0) == []


def test_group_details_oldest_heartbeat_and_leases(registry: Any) -> None:
    registry.expect("q", "declared")
    registry.heartbeat("q", "g", "fresh", 2, now_ns=T0 - 1_000 * MS + 789)
    registry.heartbeat("q", "g", "dead", 5, now_ns=T0 - (2 * TTL + 1) * MS)  # expired, just
    registry.heartbeat("q", "g", "edge", 7, now_ns=T0 - 2 * TTL * MS - 999_999)  # stale, just
    beats = [("q", "big", f"w{i:04d}", i % 3) for i in range(1_200)]  # pages of expired
    registry.heartbeat_many(beats, now_ns=T0 - 3 * TTL * MS)
    registry.heartbeat("q", "big", "live", 4, now_ns=T0)
    plain = registry.groups(now_ns=T0, ttl_ms=TTL)
    detailed = registry.groups(now_ns=T0, ttl_ms=TTL, details=True)
    assert [g[:7] for g in detailed] == [g[:7] for g in plain]
    assert all(g.leases_expired is None and g.oldest_heartbeat_ns is None for g in plain)
    found = {g.group: (g.oldest_heartbeat_ns, g.leases_expired) for g in detailed}
    assert found == {
        "big": ((T0 - 3 * TTL * MS) // 1_000 * 1_000, 1_200),
        "declared": (None, 0),
        "g": ((T0 - (2 * TTL + 1) * MS) // 1_000 * 1_000, 5),
    }
    with pytest.raises(TypeError):
        registry.groups(now_ns=T0, details="yes")


def test_min_active_reads_one_declaration(registry: Any) -> None:
    registry.expect("q", "a", 3)
    registry.expect("q", "one", 1)
    assert registry.min_active("q", "a") == 3
    assert registry.min_active("q", "one") == 1
    assert registry.min_active("q", "b") is None
    assert registry.min_active("other", "a") is None


def test_many_declared_groups_are_read_across_pages(registry: Any) -> None:
    wanted = {(f"q{i % 3}", f"g{i}"): i % 4 + 1 for i in range(7)}
    for (queue, group), least in wanted.items():
        registry.expect(queue, group, least)
    assert registry.expected() == dict(sorted(wanted.items()))


@pytest.mark.parametrize(
    ("args", "error", "words"),
    [
        pytest.param(("q", "g", -1), ValueError, "min_active", id="negative"),
        pytest.param(("q", "g", True), TypeError, "min_active", id="bool"),
        pytest.param(("q", "", 1), ValueError, "group", id="empty-group"),
        pytest.param((3, "g", 1), TypeError, "queue", id="queue-type"),
    ],
)
def test_bad_declarations_are_refused_naming_the_argument(
    registry: Any, args: tuple[Any, ...], error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words):
        registry.expect(*args)
    assert registry.expected() == {}


# -- restart identity -------------------------------------------------------------


def test_a_restart_under_the_same_name_is_the_same_row(registry: Any) -> None:
    registry.heartbeat("q", "g", "host-1:4242:0", 3, now_ns=T0)
    # The process dies without deregistering and comes back under the same name.
    registry.heartbeat("q", "g", "host-1:4242:0", 0, now_ns=T0 + 40_000 * MS)
    (row,) = registry.snapshot(now_ns=T0 + 40_000 * MS, ttl_ms=TTL)
    assert (row.registered_at_ns, row.state, row.lease_count) == (T0, PresenceState.ACTIVE, 0)


def test_a_restart_under_a_new_name_is_a_new_row_and_the_old_goes_stale_then_expired(
    registry: Any,
) -> None:
    registry.heartbeat("q", "g", "host-1:4242:0", now_ns=T0)
    registry.heartbeat("q", "g", "host-1:5150:0", now_ns=T0 + 1_000 * MS)
    for now, old_state in (
        (T0 + TTL * MS, PresenceState.ACTIVE),
        (T0 + (TTL + 1) * MS, PresenceState.STALE),
        (T0 + (2 * TTL + 1) * MS, PresenceState.EXPIRED),
    ):
        registry.heartbeat("q", "g", "host-1:5150:0", now_ns=now)
        old, new = registry.snapshot(now_ns=now, ttl_ms=TTL)
        assert (old.consumer, old.state) == ("host-1:4242:0", old_state)
        assert (new.registered_at_ns, new.state) == (T0 + 1_000 * MS, PresenceState.ACTIVE)

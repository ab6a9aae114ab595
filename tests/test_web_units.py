"""The web service's I/O-free parts: keyset pagination, the token
parser and the metrics collector, checked against the package's own rule."""

from __future__ import annotations

import base64
import random
from itertools import groupby
from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from redis_presence import ConsumerPresence, ConsumerPresenceRegistry, PresenceState
from redis_presence.web.auth import presented_token
from redis_presence.web.metrics import ScrapeReading, registry_for
from redis_presence.web.paging import Cursor, parse_limit
from redis_presence.web.params import parse_states
from redis_presence.web.readings import GroupStats, stats_from_groups, stats_from_rows
from redis_presence.web.selection import ConsumerFilter, GroupFilter, PageCollector, page_of

TTL_MS = 1_000
MS = 1_000_000
NAMES = st.sampled_from(["a", "b", "a/b", "a\x00", "é", "\n", "%"])


def _row(
    consumer: str, hb_ms: int, now_ms: int, queue: str = "q", group: str = "g", reg_ms: int = 0
) -> ConsumerPresence:
    return ConsumerPresence.at(
        queue, group, consumer, reg_ms * MS, hb_ms * MS, 0, now_ns=now_ms * MS, ttl_ms=TTL_MS
    )


# -- pagination -------------------------------------------------------------------------------

rows_strategy = st.lists(
    st.tuples(NAMES, NAMES, st.text("xyz", min_size=1, max_size=3), st.integers(0, 3_000)),
    max_size=60,
    unique_by=lambda t: t[:3],
)


@given(
    rows_strategy,
    st.integers(1, 7),
    st.sampled_from([None, "a", "é"]),
    st.sampled_from([None, "b"]),
    st.frozensets(st.sampled_from(list(PresenceState))),
    st.sampled_from([None, "x", "Y"]),
)
def test_pages_walk_every_match_once_in_order_both_ways(
    raw: list[tuple[str, str, str, int]],
    limit: int,
    queue: str | None,
    group: str | None,
    states: frozenset[PresenceState],
    search: str | None,
) -> None:
    rows = sorted(_row(c, hb, 3_000, q, g) for q, g, c, hb in raw)
    where = ConsumerFilter(queue, group, states, search)
    expected = [r for r in rows if where.matches(r)]
    walked: list[ConsumerPresence] = []
    pages = []
    cursor = None
    while True:
        page = page_of(rows, where, cursor=cursor, limit=limit)
        assert len(page.rows) <= limit
        walked += page.rows
        pages.append(page)
        if page.next_cursor is None:
            break
        cursor = Cursor.decode(page.next_cursor)
    assert walked == expected
    assert pages[0].prev_cursor is None
    assert all(p.prev_cursor for p in pages[1:] if p.rows)
    # Back from the last page with the prev cursors: the same pages, newest first.
    back: list[ConsumerPresence] = list(pages[-1].rows)
    page = pages[-1]
    while page.prev_cursor is not None:
        page = page_of(rows, where, cursor=Cursor.decode(page.prev_cursor), limit=limit)
        assert len(page.rows) == limit
        back = page.rows + back
    assert back == expected


FEW = st.sampled_from(["a", "b", "é"])
"""Few queues and groups: groups of many rows, which the collector trims in mid-group."""


@given(
    st.lists(
        st.tuples(FEW, FEW, st.text("xyz", min_size=1, max_size=3), st.integers(0, 3_000)),
        min_size=12,
        max_size=80,
        unique_by=lambda t: t[:3],
    ),
    st.integers(1, 4),  # small: the collector trims (past 2 * limit + 1 rows) often
    st.sampled_from([None, None, "a", "é"]),
    st.sampled_from([None, None, "b"]),
    st.sampled_from([None, None, "x", "Y"]),
    st.lists(st.tuples(NAMES, NAMES, st.text("xyz", max_size=3)), max_size=4),
    st.booleans(),
    st.randoms(use_true_random=False),
)
def test_a_streamed_page_is_the_page_of_the_sorted_rows(
    raw: list[tuple[str, str, str, int]],
    limit: int,
    queue: str | None,
    group: str | None,
    search: str | None,
    keys: list[tuple[str, str, str]],
    before: bool,
    shuffle: random.Random,
) -> None:
    """`PageCollector`, fed whole groups in any order (as a streaming read hands them out,
    each group's rows sorted), gives exactly `page_of` of the sorted rows, for every cursor:
    the cursors pages give and keys of rows or between them."""
    rows = sorted(_row(c, hb, 3_000, q, g) for q, g, c, hb in raw)
    where = ConsumerFilter(queue, group, frozenset(), search)
    groups = [list(part) for _, part in groupby(rows, key=lambda r: (r.queue, r.group))]
    shuffle.shuffle(groups)
    direction: Literal["after", "before"] = "before" if before else "after"
    ends = [r.key for r in rows[:2] + rows[-2:]] + [("", "", ""), ("\U0010ffff", "", "")]
    cursors = [None, *(Cursor(direction, key) for key in keys + ends)]
    for cursor in cursors:
        collector = PageCollector(where, cursor=cursor, limit=limit)
        for part in groups:
            collector.feed(part)
        assert collector.page() == page_of(rows, where, cursor=cursor, limit=limit)


def test_cursors_are_opaque_and_checked() -> None:
    cursor = Cursor("after", ("a/b", "line\ntwo", "<img>"))
    assert Cursor.decode(cursor.encode()) == cursor
    for junk in ["", "x", "!!!", base64.urlsafe_b64encode(b'["z","q","g","c"]').decode(), "WzFd"]:
        with pytest.raises(ValueError, match="cursor"):
            Cursor.decode(junk)


def test_limits_and_states_are_checked() -> None:
    assert parse_limit(None) == 100
    assert parse_limit("1000") == 1000
    for bad in ["0", "1001", "-1", "x", "1.5"]:
        with pytest.raises(ValueError, match="limit"):
            parse_limit(bad)
    assert parse_states(["stale,expired", "ACTIVE"]) == frozenset(PresenceState)
    with pytest.raises(ValueError, match="state must be one of"):
        parse_states(["sleeping"])


def test_group_filters() -> None:
    idle = GroupStats("Orders", "Billing", 0, 2, 0)
    busy = GroupStats("orders", "ship", 3, 0, 1, min_active=5)
    fine = GroupStats("audit", "log", 1, 0, 0)
    assert GroupFilter(queue_text="ORD").names("Orders", "x")
    assert not GroupFilter(group_text="bill").names("q", "ship")
    assert not GroupFilter(group="ship").names("orders", "shipping")
    assert [g for g in (idle, busy, fine) if GroupFilter(attention=True).counts(g)] == [idle, busy]
    stale = GroupFilter(states=frozenset({PresenceState.STALE}))
    assert [g for g in (idle, busy, fine) if stale.counts(g)] == [idle]
    assert not GroupFilter().by_counts
    assert not GroupFilter().by_names


# -- counts -----------------------------------------------------------------------------------


def test_group_counts_from_groups_match_the_rows_and_keep_declared_groups() -> None:
    registry = ConsumerPresenceRegistry()
    now = 10_000 * MS
    for i, age_ms in enumerate([0, 999, 1_000, 1_001, 2_000, 2_001, 9_000]):
        registry.heartbeat("q", f"g{i % 2}", f"c{i}", now_ns=now - age_ms * MS)
    registry.heartbeat("q2", "g", "future", now_ns=now + 5 * MS)
    registry.expect("q", "g0", min_active=3)
    registry.expect("q3", "empty")
    rows = registry.snapshot(now_ns=now, ttl_ms=TTL_MS)
    declared = registry.expected()
    from_groups = stats_from_groups(registry.groups(now_ns=now, ttl_ms=TTL_MS))
    from_rows = stats_from_rows(rows, declared)
    assert [(*g[:5], g.min_active) for g in from_groups] == [
        (*g[:5], g.min_active) for g in from_rows
    ]
    assert [(g.group, g.active, g.stale, g.expired) for g in from_rows] == [
        ("g0", 2, 1, 1),
        ("g1", 1, 1, 1),
        ("g", 1, 0, 0),
        ("empty", 0, 0, 0),
    ]
    assert [(g.min_active, g.below, g.nobody_reading) for g in from_rows] == [
        (3, True, False),
        (None, False, False),
        (None, False, False),
        (1, True, True),
    ]
    assert from_rows[0].oldest_heartbeat_ns == now - 9_000 * MS
    assert from_rows[-1].oldest_heartbeat_ns is None
    assert [g.stuck for g in from_rows] == [0, 0, 0, 0]  # nobody holds a lease
    assert all(g.stuck is None for g in from_groups)  # groups() reads no consumer


# -- the token ------------------------------------------------------------------------------


def _basic(text: str) -> str:
    return "Basic " + base64.b64encode(text.encode()).decode()


def test_tokens_from_bearer_and_basic() -> None:
    assert presented_token("Bearer s3cret") == b"s3cret"
    assert presented_token(b"bearer  s3cret ") == b"s3cret"
    assert presented_token(_basic("anyone:s3cret")) == b"s3cret"
    assert presented_token(_basic(":pa:ss")) == b"pa:ss"
    assert presented_token("Bearer ключ") == "ключ".encode()  # as sent: UTF-8
    assert presented_token(_basic("u:ключ")) == "ключ".encode()
    assert presented_token(_basic("no-colon")) is None
    assert presented_token("Basic !!!") is None
    assert presented_token("Bearer") is None
    assert presented_token("Digest x") is None


# -- the collector -----------------------------------------------------------------------------


def _families(
    reading: ScrapeReading, per_consumer: bool
) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = generate_latest(registry_for(reading, per_consumer=per_consumer)).decode()
    return {
        family.name: [(sample.labels, sample.value) for sample in family.samples]
        for family in text_string_to_metric_families(text)
    }


def test_collector_reports_every_state_and_up() -> None:
    rows = [_row("a", 2_900, 3_000), _row("b", 0, 3_000, group='g\n"2"')]
    groups = stats_from_rows(sorted(rows))
    families = _families(ScrapeReading(3_000 * MS, groups, rows, 0.01, TTL_MS), per_consumer=True)
    assert families["redis_presence_up"] == [({}, 1.0)]
    consumers = {
        (labels["group"], labels["state"]): v for labels, v in families["redis_presence_consumers"]
    }
    assert consumers == {
        ("g", "active"): 1.0,
        ("g", "stale"): 0.0,
        ("g", "expired"): 0.0,
        ('g\n"2"', "active"): 0.0,
        ('g\n"2"', "stale"): 0.0,
        ('g\n"2"', "expired"): 1.0,
    }
    ages = {
        labels["consumer"]: v
        for labels, v in families["redis_presence_consumer_last_seen_age_seconds"]
    }
    assert ages == {"a": 0.1, "b": 3.0}
    oldest = families["redis_presence_oldest_heartbeat_age_seconds"]
    assert {labels["group"]: v for labels, v in oldest} == {"g": 0.1, 'g\n"2"': 3.0}

    without = _families(ScrapeReading(3_000 * MS, groups, (), 0.01, TTL_MS), per_consumer=False)
    assert "redis_presence_consumer_last_seen_age_seconds" not in without

    down = _families(
        ScrapeReading(0, (), (), 0.5, TTL_MS, error="cannot reach Redis"), per_consumer=True
    )
    assert down["redis_presence_up"] == [({}, 0.0)]
    assert down["redis_presence_scrape_duration_seconds"] == [({}, 0.5)]
    assert "redis_presence_consumers" not in down


hostile_names = st.text(
    st.sampled_from(["a", "\\", '"', "\n", "é", "{", "}", "=", ","]), min_size=1, max_size=6
)


@given(
    st.lists(
        st.tuples(
            hostile_names,
            hostile_names,
            st.integers(0, 3),
            st.integers(0, 3),
            st.integers(0, 3),
            st.one_of(st.none(), st.integers(0, 10**12)),
            st.one_of(st.none(), st.integers(0, 3)),
            st.one_of(st.none(), st.integers(0, 3)),
        ),
        max_size=8,
    ),
    st.lists(
        st.tuples(hostile_names, hostile_names, hostile_names, st.integers(0, 10**12)), max_size=8
    ),
    st.booleans(),
    st.sampled_from([None, "cannot reach Redis"]),
    st.floats(0, 5),
)
def test_the_fast_exposition_is_byte_for_byte_prometheus_clients(
    groups: list[tuple[str, str, int, int, int, int | None, int | None, int | None]],
    consumers: list[tuple[str, str, str, int]],
    per_consumer: bool,
    error: str | None,
    seconds: float,
) -> None:
    from redis_presence.web.metrics import render_text
    from redis_presence.web.reads import GroupStats

    now = 10**12 + 5
    reading = ScrapeReading(
        now,
        [GroupStats(*g) for g in groups],
        [
            ConsumerPresence.at(q, g, c, 0, hb, 0, now_ns=now, ttl_ms=TTL_MS)
            for q, g, c, hb in consumers
        ],
        seconds,
        TTL_MS,
        error,
    )
    expected = generate_latest(registry_for(reading, per_consumer=per_consumer))
    assert render_text(reading, per_consumer=per_consumer) == expected

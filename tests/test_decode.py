"""Decoding a group's stored hash into columns, and building rows from columns (no I/O)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from redis_presence import ConsumerPresence, PresenceDataError, PresenceState
from redis_presence.keys import MAX_STORED_META_CHARS, Keyspace, decode_meta, encode_meta
from redis_presence.model import gc_paused
from redis_presence.replies import stored_columns
from redis_presence.validation import MAX_META_BYTES, check_meta

T0 = 1_796_000_000_123_456_000
MS = 1_000_000
GROUP = Keyspace("presence").group("orders", "billing")

NAMES = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=12)
STORED = st.dictionaries(
    NAMES,
    st.tuples(st.integers(0, 2**63), st.integers(0, 2**63), st.integers(0, 2**32 - 1)),
    max_size=20,
)


def as_reply(stored: dict[str, tuple[int, int, int]], *, text: bool, flat: bool) -> Any:
    """What redis-py hands back for HGETALL: a dict (or flat list) of bytes (or str)."""
    pairs: list[tuple[Any, Any]] = [
        (name, " ".join(map(str, value))) for name, value in stored.items()
    ]
    if not text:
        pairs = [(name.encode(), value.encode()) for name, value in pairs]
    return [x for pair in pairs for x in pair] if flat else dict(pairs)


@given(stored=STORED, text=st.booleans(), flat=st.booleans())
def test_columns_are_the_stored_values_sorted_by_name(
    stored: dict[str, tuple[int, int, int]], text: bool, flat: bool
) -> None:
    names, registered, heartbeat, lease, progress, v2 = stored_columns(
        GROUP, as_reply(stored, text=text, flat=flat)
    )
    assert progress is None  # nobody recorded progress
    assert v2 is None  # no value of protocol version 2
    expected = sorted(stored.items())  # str order is code point order, as Redis' bytes sort
    assert names == [name for name, _ in expected]
    assert list(zip(registered, heartbeat, lease, strict=True)) == [v for _, v in expected]


def test_names_with_newlines_and_non_ascii_characters_decode_exactly() -> None:
    stored = {"a\nb": (1, 2, 3), "ü": (4, 5, 6), "\n": (7, 8, 9), "z": (1, 1, 1)}
    assert stored_columns(GROUP, as_reply(stored, text=False, flat=False)) == (
        ["\n", "a\nb", "z", "ü"],
        [7, 1, 1, 4],
        [8, 2, 1, 5],
        [9, 3, 1, 6],
        None,
        None,
    )


@pytest.mark.parametrize("text", [False, True])
def test_a_fourth_field_is_the_last_progress_and_absent_is_none(text: bool) -> None:
    stored = {"a": "1 2 3 7", "b": "4 5 6", "c": "1 1 0 9"}
    reply = stored if text else {k.encode(): v.encode() for k, v in stored.items()}
    assert stored_columns(GROUP, reply) == (
        ["a", "b", "c"],
        [1, 4, 1],
        [2, 5, 1],
        [3, 6, 0],
        [7, None, 9],
        None,
    )


@pytest.mark.parametrize(
    ("values", "field", "culprit"),
    [
        pytest.param({b"a": b"1 2"}, "a", "1 2", id="two-fields"),
        pytest.param({b"a": b"1 2 3 4 5"}, "a", "1 2 3 4 5", id="five-fields"),
        pytest.param({b"a": b"1 2 3 4", b"b": b"1 2"}, "b", "1 2", id="progress-and-two"),
        pytest.param({b"a": b"1 2 3 "}, "a", "1 2 3 ", id="empty-progress"),
        # Together they hold six fields, as two good values would: each is checked alone.
        pytest.param({b"a": b"1 2", b"b": b"3 4 5 6"}, "a", "1 2", id="compensating-pair"),
        pytest.param({b"a": b"1 2 x"}, "a", "1 2 x", id="not-a-number"),
        pytest.param({b"a": b"1  2 3"}, "a", "1  2 3", id="double-space"),
        pytest.param({b"a": b" 1 2"}, "a", " 1 2", id="leading-space"),
        pytest.param({b"y": b"1 2 3", b"yy": b" 1 2"}, "yy", " 1 2", id="leading-space-inside"),
        pytest.param({b"a": b""}, "a", "", id="empty"),
        pytest.param({b"a": b"garbage"}, "a", "garbage", id="garbage"),
        # What int() would take but this package never writes: signs, spaces, underscores,
        # digits of other scripts, numbers longer than any nanosecond timestamp.
        pytest.param({b"a": b"-5 -5 0"}, "a", "-5 -5 0", id="negative"),
        pytest.param({b"a": b"+1 2 3"}, "a", "+1 2 3", id="plus-sign"),
        pytest.param({b"a": b"\t1 2 3"}, "a", "\t1 2 3", id="tab"),
        pytest.param({b"a": b"1_0 2 3"}, "a", "1_0 2 3", id="underscore"),
        pytest.param({b"a": "\uff11 2 3".encode()}, "a", "\uff11 2 3", id="fullwidth-digit"),
        pytest.param({b"a": b"1 2 " + b"9" * 20}, "a", "1 2 " + "9" * 20, id="20-digits"),
    ],
)
def test_a_value_this_package_did_not_write_is_a_data_error(
    values: dict[bytes, bytes], field: str, culprit: str
) -> None:
    """The message names the hash, the field and the first offending value among good ones."""
    good = {b"z%d" % i: b"1 2 3" for i in range(3)}
    for decoded in (False, True):  # bytes, or str from a decode_responses client
        table: dict[Any, Any] = good | values
        if decoded:
            table = {k.decode(): v.decode() for k, v in table.items()}
        with pytest.raises(PresenceDataError) as info:
            stored_columns(GROUP, table)
        shown = culprit.replace("\t", "\\x09")  # on one line, as the scripts show it
        assert str(info.value) == (
            f'redis-presence key presence:{{orders}}:billing:c field "{field}" holds a value '
            f'this package did not write: "{shown}"'
        )


def test_a_name_that_is_not_utf8_is_a_data_error() -> None:
    with pytest.raises(PresenceDataError, match=r"consumer name that is not UTF-8: b'\\xff'"):
        stored_columns(GROUP, {b"z": b"1 2 3", b"\xff": b"1 2 3"})


def test_an_empty_group_has_empty_columns() -> None:
    assert stored_columns(GROUP, {}) == ([], [], [], [], None, None)
    assert stored_columns(GROUP, []) == ([], [], [], [], None, None)


@given(
    beats=st.lists(st.integers(0, 2 * T0), max_size=30),
    ttl=st.sampled_from([1, 7, 1_000, 30_000]),
)
def test_rows_from_columns_are_the_rows_at_builds(beats: list[int], ttl: int) -> None:
    """Including beats from the reader's future (age 0) and on every horizon."""
    beats += [T0, T0 - ttl * MS, T0 - (ttl + 1) * MS + 1, T0 - (2 * ttl + 1) * MS]
    names = [f"c{i:03d}" for i in range(len(beats))]
    registered = [max(0, hb - 5) for hb in beats]
    lease = list(range(len(beats)))
    rows = list(
        ConsumerPresence.columns("q", "g", names, registered, beats, lease, now_ns=T0, ttl_ms=ttl)
    )
    assert rows == [
        ConsumerPresence.at("q", "g", c, r, hb, n, now_ns=T0, ttl_ms=ttl)
        for c, r, hb, n in zip(names, registered, beats, lease, strict=True)
    ]
    assert all(type(row) is ConsumerPresence for row in rows)
    assert {row.state for row in rows} <= set(PresenceState)


def test_an_all_active_group_holding_leases_since_long_ago_is_stuck() -> None:
    """Every consumer active (no rank computed row by row) and some stuck: the rows `at`
    builds, one by one."""
    names, beats, lease = ["a", "b", "c"], [T0, T0 - 1, T0 - 5 * MS], [1, 0, 2]
    registered = [T0 - 3_600_000 * MS, T0 - 3_600_000 * MS, T0 - MS]
    options: dict[str, Any] = {"now_ns": T0, "ttl_ms": 1_000, "stuck_after_ms": 60_000}
    rows = list(ConsumerPresence.columns("q", "g", names, registered, beats, lease, **options))
    assert rows == [
        ConsumerPresence.at("q", "g", c, r, hb, n, **options)
        for c, r, hb, n in zip(names, registered, beats, lease, strict=True)
    ]
    assert [row.stuck for row in rows] == [True, False, False]


def test_rows_are_immutable_typed_records() -> None:
    row = ConsumerPresence.at("q", "g", "c", T0, T0, 3, now_ns=T0 + 5 * MS, ttl_ms=1)
    with pytest.raises(AttributeError):
        row.lease_count = 4  # type: ignore[misc]
    assert row.last_seen_age_ms == 5
    assert row.state is PresenceState.EXPIRED
    assert row._replace(lease_count=4).lease_count == 4
    assert row.to_dict()["state"] == "expired"
    assert ConsumerPresence._fields[:3] == ("queue", "group", "consumer")


@pytest.fixture
def collector() -> Iterator[None]:
    """Whatever a test does to the collector, it is enabled again afterwards."""
    try:
        yield
    finally:
        gc.enable()


@pytest.mark.usefixtures("collector")
def test_gc_paused_restores_the_collector_even_after_an_error() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("while building")
    assert gc.isenabled()


@pytest.mark.usefixtures("collector")
def test_gc_paused_leaves_a_disabled_collector_disabled() -> None:
    gc.disable()
    with gc_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()
    rows = ConsumerPresence.many([("q", "g", "c", T0, T0, 0)], now_ns=T0, ttl_ms=1)
    assert len(rows) == 1
    assert not gc.isenabled()


def test_metadata_decodes_flat_objects_and_refuses_nested_or_oversized_ones() -> None:
    """`decode_meta` never recurses: nested or oversized values are data errors naming the
    key and the consumer; the largest mapping `describe` accepts, escaped six characters a
    byte, still decodes (and so does a bracket inside a string)."""
    largest = check_meta({chr(14 + i) * 6: "\x01" * 58 for i in range(16)})  # 1,024 bytes
    assert sum(len(k) + len(v) for k, v in largest.items()) == MAX_META_BYTES
    assert len(encode_meta(largest)) == MAX_STORED_META_CHARS - 1  # no comma after the last
    assert decode_meta("k", "c", encode_meta(largest).encode()) == largest
    assert decode_meta("k", "c", b'{"a":"[{\\"}]"}') == {"a": '[{"}]'}
    for value in [
        b"[" * 100_000,
        b'{"a":' * 100_000,
        b'{"a":{"b":"c"}}',
        b'{"a":["b"]}',
        b'{"a":"' + b"x" * MAX_STORED_META_CHARS + b'"}',
        b'"a"',
    ]:
        with pytest.raises(PresenceDataError, match=r"^redis-presence key k field 'c' holds"):
            decode_meta("k", b"c", value)


# Protocol version 2: nine fields, `registered last lease progress capacity flags
# conflict instance previous` (V2SPEC), read beside version 1 values in one group.


@pytest.mark.parametrize("text", [False, True])
def test_version_2_values_read_beside_version_1_values_in_one_group(text: bool) -> None:
    stored = {
        "a": "1 2 3",
        "b": "4 5 6 7",
        "c": "1 9 2 0 10 1 0 proc-1 -",
        "d": "2 8 4 6 0 2 5 a.b_C-9 old",
    }
    reply = stored if text else {k.encode(): v.encode() for k, v in stored.items()}
    names, registered, heartbeat, lease, progress, v2 = stored_columns(GROUP, reply)
    assert names == ["a", "b", "c", "d"]
    assert (registered, heartbeat, lease) == ([1, 4, 1, 2], [2, 5, 9, 8], [3, 6, 2, 4])
    assert progress == [None, 7, None, 6]  # a v2 progress of 0: none recorded
    assert v2 is not None
    assert list(v2.capacity) == [0, 0, 10, 0]
    assert list(v2.flags) == [0, 0, 1, 2]
    assert list(v2.conflict_ns) == [0, 0, 0, 5]
    assert list(v2.instance) == ["-", "-", "proc-1", "a.b_C-9"]
    assert list(v2.previous) == ["-", "-", "-", "old"]


def test_version_2_only_group_without_progress_has_no_progress_column() -> None:
    *_, progress, v2 = stored_columns(GROUP, {b"a": b"1 2 3 0 0 0 0 - -"})
    assert progress is None
    assert v2 is not None
    assert list(v2.instance) == ["-"]


def test_rows_carry_the_version_2_fields() -> None:
    now = T0
    stored = {
        "drainer": f"1 {now} 3 0 10 1 0 i1 -",
        "asked": f"1 {now} 0 0 0 2 0 - -",
        "dup": f"1 {now} 1 0 4 0 {now - 5 * MS} i2 i3",
        "old-dup": f"1 {now} 1 0 4 0 {now - 31 * MS} i2 i3",
        "v1": f"1 {now} 2",
    }
    columns = stored_columns(GROUP, stored)
    rows = {
        row.consumer: row
        for row in ConsumerPresence.columns("q", "g", *columns, now_ns=now, ttl_ms=30)
    }
    assert (rows["drainer"].capacity, rows["drainer"].draining) == (10, True)
    assert not rows["drainer"].drain_requested
    assert rows["drainer"].instance == "i1"
    assert rows["asked"].drain_requested
    assert not rows["asked"].draining
    assert rows["asked"].capacity is None
    assert rows["asked"].instance is None
    assert rows["dup"].conflict
    assert not rows["old-dup"].conflict
    assert rows["v1"][-5:] == (None, False, False, False, None)
    for name, row in rows.items():  # the row `at` builds, field for field
        value = stored[name].split()
        numbers = [int(v) for v in value[:7]] if len(value) == 9 else [*map(int, value), 0, 0, 0]
        flags = numbers[5] if len(value) == 9 else 0
        assert row == ConsumerPresence.at(
            "q",
            "g",
            name,
            numbers[0],
            numbers[1],
            numbers[2],
            numbers[3] or None,
            now_ns=now,
            ttl_ms=30,
            capacity=numbers[4] if len(value) == 9 else None,
            draining=bool(flags & 1),
            drain_requested=bool(flags & 2),
            conflict_ns=numbers[6] if len(value) == 9 else 0,
            instance=value[7] if len(value) == 9 and value[7] != "-" else None,
        )
        assert row.to_dict()["capacity"] == row.capacity


@pytest.mark.parametrize(
    "culprit",
    [
        pytest.param("1 2 3 0 0 0 0 -", id="eight-fields"),
        pytest.param("1 2 3 0 0 0 0 - - -", id="ten-fields"),
        pytest.param("1 2 3 0 x 0 0 - -", id="capacity-not-a-number"),
        pytest.param("1 2 3 0 4294967296 0 0 - -", id="capacity-above-2^32-1"),
        pytest.param("1 2 3 0 0 99999999999 0 - -", id="flags-of-11-digits"),
        pytest.param("1 2 3 0 0 0 0 a/b -", id="bad-token"),
        pytest.param("1 2 3 0 0 0 0 - " + "t" * 33, id="token-of-33"),
        pytest.param("1 2 3 0 0 0 0 ü -", id="non-ascii-token"),
        pytest.param("1 2 3 0 0 0 0 -  ", id="empty-token"),
        pytest.param("1 2 4294967296 0 0 0 0 - -", id="lease-above-2^32-1"),
        pytest.param("1 2 3 0 0 0 -1 - -", id="negative-conflict"),
        pytest.param("1 2 3 0 0 0 0 7 -8", id="token-looks-numeric"),
        pytest.param("1 2 3 0 0 0 0 - 1 2", id="numbers-where-tokens-go"),
    ],
)
def test_a_spoilt_version_2_value_is_a_data_error_naming_it(culprit: str) -> None:
    """Among good version 1 and version 2 values; `sound_columns` sets it alone aside."""
    from redis_presence.replies import sound_columns, stored_heartbeat_ns

    if culprit == "1 2 3 0 0 0 0 7 -8":  # "-8" is a token (dash, digit): a sound value
        assert stored_heartbeat_ns(GROUP, "a", culprit) == 2
        return
    good = {"v1": "1 2 3", "v2": "1 2 3 0 5 1 0 tok -"}
    for decoded in (False, True):
        table: dict[Any, Any] = good | {"bad": culprit}
        if not decoded:
            table = {k.encode(): v.encode() for k, v in table.items()}
        with pytest.raises(PresenceDataError) as info:
            stored_columns(GROUP, table)
        assert 'field "bad" holds a value this package did not write' in str(info.value)
        with pytest.raises(PresenceDataError):
            stored_heartbeat_ns(GROUP, "bad", table[b"bad" if not decoded else "bad"])
        columns, bad = sound_columns(GROUP, table)
        assert columns[0] == ["v1", "v2"]
        assert [name for name, _ in bad] == ["bad"]
        assert columns[5] is not None
        assert list(columns[5].capacity) == [0, 5]


@given(
    values=st.lists(
        st.one_of(
            st.tuples(st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1), st.integers(0, 9)),
            st.tuples(
                st.integers(0, 9),
                st.integers(0, 2**63 - 1),
                st.integers(0, 2**32 - 1),
                st.integers(0, 2**63 - 1),
            ),
            st.tuples(
                st.integers(0, 9),
                st.integers(0, 9),
                st.integers(0, 2**32 - 1),
                st.integers(0, 9),
                st.integers(0, 2**32 - 1),
                st.integers(0, 10**10 - 1),
                st.integers(0, 2**63 - 1),
                st.from_regex(r"[A-Za-z0-9_.\-]{1,32}", fullmatch=True),
                st.from_regex(r"[A-Za-z0-9_.\-]{1,32}", fullmatch=True),
            ),
        ),
        min_size=1,
        max_size=12,
    ),
    text=st.booleans(),
)
def test_columns_of_mixed_groups_are_the_values_read_one_by_one(
    values: list[tuple[Any, ...]], text: bool
) -> None:
    """The column-wise decoding agrees with the one-value rule (`is_stored_value`)."""
    from redis_presence.replies import is_stored_value

    stored = {f"c{i:02d}": " ".join(map(str, v)) for i, v in enumerate(values)}
    reply: dict[Any, Any] = stored if text else {k.encode(): v.encode() for k, v in stored.items()}
    assert all(is_stored_value(v) for v in reply.values())
    names, registered, heartbeat, lease, _progress, v2 = stored_columns(GROUP, reply)
    assert names == sorted(stored)
    for i, value in enumerate(values):
        assert (registered[i], heartbeat[i], lease[i]) == value[:3]
        if v2 is not None:
            nine = value if len(value) == 9 else (*value, *(0,) * (7 - len(value)), "-", "-")
            assert (v2.capacity[i], v2.flags[i], v2.conflict_ns[i]) == nine[4:7]
            assert (v2.instance[i], v2.previous[i]) == nine[7:]


@given(
    flags=st.lists(st.sampled_from([0, 0, 0, 1, 2, 3, 4]), min_size=1, max_size=8),
    capacity=st.sampled_from([0, 3]),
    conflict_ago_ms=st.sampled_from([None, 5, 31]),
)
def test_version_2_rows_from_columns_are_the_rows_at_builds(
    flags: list[int], capacity: int, conflict_ago_ms: int | None
) -> None:
    """Whether a column says something for some row or for none (a `repeat` then)."""
    conflict = 0 if conflict_ago_ms is None else T0 - conflict_ago_ms * MS
    stored = {f"c{i}": f"1 {T0} 1 0 {capacity} {f} {conflict} - -" for i, f in enumerate(flags)}
    columns = stored_columns(GROUP, stored)
    rows = list(ConsumerPresence.columns("q", "g", *columns, now_ns=T0, ttl_ms=30))
    assert rows == [
        ConsumerPresence.at(
            "q",
            "g",
            f"c{i}",
            1,
            T0,
            1,
            now_ns=T0,
            ttl_ms=30,
            capacity=capacity,
            draining=bool(f & 1),
            drain_requested=bool(f & 2),
            conflict_ns=conflict,
        )
        for i, f in enumerate(flags)
    ]


@pytest.mark.parametrize("text", [False, True])
def test_a_group_holds_one_str_per_distinct_instance_token(text: bool) -> None:
    """A process beats for all its consumers with one token: a snapshot of a million rows
    holds one str per token, not per row (74 bytes a row; docs/performance.md)."""
    token = ["proc-b", "proc-a"]
    values = {f"c{i}": f"{T0} {T0 + i} 1 0 8 0 0 {token[i % 2]} -" for i in range(6)}
    reply = {k.encode(): v.encode() for k, v in values.items()} if not text else values
    *_, stored = stored_columns(GROUP, reply)
    assert stored is not None
    assert stored.instance == ["proc-b", "proc-a", "proc-b", "proc-a", "proc-b", "proc-a"]
    assert len({id(token) for token in stored.instance}) == 2
    assert len({id(token) for token in stored.previous}) == 1

"""Decoding Redis replies into the package's values: stored consumers into columns, TIME
into nanoseconds. No I/O; the layout of a stored value is `keys.STORED_VALUE`."""

from __future__ import annotations

import re
from itertools import repeat
from operator import add
from typing import Any

from .errors import PresenceDataError
from .keys import STORED_FIELDS, STORED_FIELDS_V2, STORED_SEPARATOR, GroupKeys
from .model import StoredV2
from .validation import INSTANCE_PATTERN, MAX_CAPACITY, MAX_LEASE_COUNT

Columns = tuple[
    list[str], list[int], list[int], list[int], list[int | None] | None, StoredV2 | None
]
"""One group's consumers as columns: names, registered_at_ns, last_heartbeat_ns, lease_count,
last_progress_ns (None when nobody in the group recorded progress, else None for each
consumer who did not) and the columns of version 2 (None when no consumer of the group has
a version 2 value: `model.StoredV2`)."""

_DECIMALS_V2 = 7
"""The decimal fields of a version 2 value (`keys.STORED_VALUE`): the two tokens follow."""
_MAX_FLAGS = 10**10 - 1
"""Flags are at most ten digits."""
_MAX_TOKEN = 32
_TOKEN = re.compile(INSTANCE_PATTERN)
_TOKEN_BYTES = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-"


def _token_chars(text: Any) -> bool:
    """Whether `text` (str or bytes) holds nothing but token characters (`_TOKEN`): what is
    left once they are deleted (``bytes.translate``, in C) is empty."""
    if isinstance(text, str):
        if not text.isascii():
            return False
        text = text.encode()
    return not text.translate(None, _TOKEN_BYTES)


_SEPARATORS: dict[type, Any] = {str: STORED_SEPARATOR, bytes: STORED_SEPARATOR.encode()}
_NEWLINES: dict[type, Any] = {str: "\n", bytes: b"\n"}
_PADS: dict[type, Any] = {str: STORED_SEPARATOR + "0", bytes: (STORED_SEPARATOR + "0").encode()}
_V2_PADS: dict[type, dict[int, Any]] = {
    kind: {
        STORED_FIELDS - 1: convert(" 0 0 0 0 - -"),
        STORED_FIELDS: convert(" 0 0 0 - -"),
        STORED_FIELDS_V2 - 1: convert(""),
    }
    for kind, convert in ((str, str), (bytes, str.encode))
}
"""What makes each value of a group with a version 2 value nine fields, by its separators:
a version 1 value reads as no progress (when it has none), capacity 0, flags 0, conflict 0,
instance and previous ``-``."""


def server_now_ns(seconds: bytes | str | int, micros: bytes | str | int) -> int:
    """The instant a TIME reply names, in nanoseconds."""
    return (int(seconds) * 1_000_000 + int(micros)) * 1_000


def stored_heartbeat_ns(keys: GroupKeys, consumer: Any, value: Any) -> int:
    """The last heartbeat (nanoseconds) of one stored value; a value this package did not
    write is a data error naming the key and the field."""
    if not is_stored_value(value):
        raise _foreign(keys, consumer, value)
    return int(value.split(_SEPARATORS[type(value)], 2)[1])


def is_stored_value(value: Any) -> bool:
    """Whether `value` (str or bytes) is a stored value this package writes: version 1
    (``registered last lease [progress]``) or version 2 (`STORED_FIELDS_V2` fields). The
    rule `stored_columns` applies a column at a time, applied to one value."""
    space = _SEPARATORS.get(type(value))
    fields: list[Any] = value.split(space) if space is not None else []
    if len(fields) == STORED_FIELDS_V2:
        tokens = fields[_DECIMALS_V2:]
        if not all(_TOKEN.fullmatch(_plain(token)) for token in tokens):
            return False
        fields = fields[:_DECIMALS_V2]
        if not all(map(_is_decimal, fields)):
            return False
        return (
            int(fields[4]) <= MAX_CAPACITY
            and int(fields[5]) <= _MAX_FLAGS
            and (int(fields[2]) <= MAX_LEASE_COUNT)
        )
    return (
        len(fields) in _FIELD_COUNTS
        and all(map(_is_decimal, fields))
        and int(fields[2]) <= MAX_LEASE_COUNT
    )


def stored_numbers(value: Any) -> tuple[int, int, int] | None:
    """``(registered_ns, last_heartbeat_ns, lease_count)`` of a stored value (either
    version), or None for a value this package did not write."""
    if not isinstance(value, str | bytes) or not is_stored_value(value):
        return None
    registered, heartbeat, lease = value.split(_SEPARATORS[type(value)])[:3]
    return int(registered), int(heartbeat), int(lease)


def _plain(token: Any) -> str:
    """A token as str; bytes that are not ASCII as a str no token matches."""
    if isinstance(token, bytes):
        return token.decode() if token.isascii() else ""
    return str(token)


def _is_decimal(text: Any) -> bool:
    """Whether `text` is what this package writes for a number: ASCII decimal digits, at
    most 19 (no sign, space, underscore or other digits that ``int`` would take)."""
    return 0 < len(text) <= _MAX_DIGITS and text.isascii() and text.isdigit()


_FIELD_COUNTS = (STORED_FIELDS, STORED_FIELDS + 1)
"""A version 1 stored value without progress, and with it."""

_MAX_DIGITS = 19
"""Digits of the longest number a stored value holds (nanoseconds below 2**63)."""


_UNPRINTABLE = re.compile(r'[\x00-\x1f\x7f"\\]')


def quoted(text: Any, most: int = 80) -> str:
    """`text` (its first `most` characters) in double quotes, on one line: quotes,
    backslashes and control characters as ``\\xHH``, as the scripts write it (``quoted`` in
    lua/lib.lua), so a refusal reads the same from Lua and from Python."""
    if isinstance(text, bytes):
        text = text[:most].decode("utf-8", "replace")
    return '"' + _UNPRINTABLE.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text)[:most]) + '"'


def _foreign(keys: GroupKeys, consumer: Any, value: Any) -> PresenceDataError:
    return PresenceDataError(
        f"redis-presence key {keys.data} field {quoted(consumer, 1_000)} holds a value this "
        f"package did not write: {quoted(value)}"
    )


def stored_columns(keys: GroupKeys, reply: Any) -> Columns:
    """The consumers of one group, sorted by name, as columns, from its HGETALL reply (a
    mapping, or the flat ``[consumer, stored, ...]``; bytes, or str from a
    ``decode_responses`` client); a value this package did not write is a data error
    naming the key and the field.

    Decoded a column at a time (one join, split and ``map(int, ...)`` per field, in C), not a
    value at a time: for a large group this is most of what a snapshot spends in Python.
    """
    table = reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2], strict=True))
    if not table:
        return [], [], [], [], None, None
    # UTF-8 bytes sort in code point order: sorting before decoding gives the str order.
    names = sorted(table)
    values = list(map(table.__getitem__, names))
    kind = type(values[0])
    try:
        space = _SEPARATORS[kind]
        # Each value is exactly STORED_FIELDS numbers (one more with progress; version 2:
        # seven numbers and two tokens) with one separator between them, and nothing but
        # ASCII digits besides (int() would also take signs, spaces, "_").
        counts = list(map(kind.count, values, repeat(space)))
        spaces = set(counts)
        progress: list[int | None] | None = None
        stored: StoredV2 | None = None
        width = STORED_FIELDS
        padded = values  # what is decoded; `values` stays as stored, for the data error
        if spaces != {STORED_FIELDS - 1}:
            if spaces <= {STORED_FIELDS - 1, STORED_FIELDS}:
                # Some consumers recorded progress: pad the others with a 0 to read 4 columns.
                width = STORED_FIELDS + 1
                has = [count == STORED_FIELDS for count in counts]
                pad = _PADS[kind]
                padded = [v if h else v + pad for v, h in zip(values, has, strict=True)]
            else:
                # Some value is of version 2: pad every version 1 one to its nine fields.
                pads = _V2_PADS[kind]
                padded = list(map(add, values, map(pads.__getitem__, counts)))
                width = STORED_FIELDS_V2
        joined = space.join(padded)
        # No empty field (two separators in a row, or one at either end): the checks search
        # the joined text (in C), not each field.
        if space + space in joined or joined[:1] == space or joined[-1:] == space:
            raise ValueError
        fields = joined.split(space)
        if width == STORED_FIELDS_V2:
            instance, previous = fields[_DECIMALS_V2::width], fields[_DECIMALS_V2 + 1 :: width]
            tokens = instance + previous
            empty = space[:0]
            if max(map(len, tokens)) > _MAX_TOKEN or not _token_chars(empty.join(tokens)):
                raise ValueError
            del fields[_DECIMALS_V2::width]  # the tokens out: seven decimal columns left
            del fields[_DECIMALS_V2 :: width - 1]
            digits = empty.join(fields)
        else:
            digits = joined.replace(space, space[:0])
        if not (digits.isascii() and digits.isdigit()):
            raise ValueError
        step = _DECIMALS_V2 if width == STORED_FIELDS_V2 else width
        if max(map(len, fields)) > _MAX_DIGITS:
            raise ValueError
        registered = list(map(int, fields[0::step]))
        heartbeat = list(map(int, fields[1::step]))
        lease = _ints(fields[2::step])
        if max(lease) > MAX_LEASE_COUNT:  # a count no client writes (docs/protocol.md, 4)
            raise ValueError
        if width == STORED_FIELDS + 1:
            progress = [int(p) if h else None for p, h in zip(fields[3::width], has, strict=True)]
        elif width == STORED_FIELDS_V2:
            made = _ints(fields[3::step])
            if max(made):  # 0: no progress recorded
                progress = list(map(_ZERO_IS_NONE.get, made, made))
            capacity = _ints(fields[4::step])
            flags = _ints(fields[5::step])
            if max(capacity) > MAX_CAPACITY or max(flags) > _MAX_FLAGS:
                raise ValueError
            if kind is not str:
                instance = _NEWLINES[kind].join(instance).decode().split("\n")
                previous = _NEWLINES[kind].join(previous).decode().split("\n")
            # One str per distinct token, not per row: a process beats for all its consumers
            # with one token, so a group holds few (74 bytes a row saved, in C).
            same: dict[str, str] = {}
            instance = list(map(same.setdefault, instance, instance))
            previous = list(map(same.setdefault, previous, previous))
            stored = StoredV2(capacity, flags, _ints(fields[6::step]), instance, previous)
        if kind is str:
            decoded = names
        else:
            decoded = _NEWLINES[kind].join(names).decode().split("\n")
            if len(decoded) != len(names):  # a name holds a newline: decode one by one
                decoded = [name.decode() for name in names]
    except (KeyError, ValueError, TypeError, AttributeError, UnicodeDecodeError):
        raise _first_bad(keys, names, values) from None
    return decoded, registered, heartbeat, lease, progress, stored


_ZERO_IS_NONE: dict[int, None] = {0: None}
_ZEROS: dict[type, Any] = {str: "0", bytes: b"0"}


def _ints(column: list[Any]) -> list[int]:
    """A column of decimal fields as ints; one of zeros only (no progress, capacity, flags
    or conflict: most of a version 2 group's columns) without an ``int`` a field."""
    if column and column.count(_ZEROS[type(column[0])]) == len(column):
        return [0] * len(column)
    return list(map(int, column))


def sound_columns(
    keys: GroupKeys, reply: Any
) -> tuple[Columns, list[tuple[str, PresenceDataError]]]:
    """`stored_columns` of the consumers whose stored values this package wrote, and the
    name and data error of each other one (in name order): a spoilt value costs its own
    row, never its neighbours'. Only a group with one pays for the check of each value."""
    table = reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2], strict=True))
    try:
        return stored_columns(keys, table), []
    except PresenceDataError:
        pass
    sound: dict[Any, Any] = {}
    bad: list[tuple[str, PresenceDataError]] = []
    for name in sorted(table):
        value = table[name]
        try:
            stored_heartbeat_ns(keys, name, value)
            if isinstance(name, bytes):
                name.decode()
        except PresenceDataError as error:
            bad.append((_name(name), error))
            continue
        except UnicodeDecodeError:
            bad.append((_name(name), _not_utf8(keys, name)))
            continue
        sound[name] = value
    return stored_columns(keys, sound), bad


def _name(name: Any) -> str:
    return name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)


def _not_utf8(keys: GroupKeys, name: Any) -> PresenceDataError:
    return PresenceDataError(
        f"redis-presence key {keys.data} holds a consumer name that is not UTF-8: {name!r:.80}"
    )


def _first_bad(keys: GroupKeys, names: list[Any], values: list[Any]) -> PresenceDataError:
    """The data error for the first stored value that is not one this package wrote, else
    for the first name that is not UTF-8."""
    for name, value in zip(names, values, strict=True):
        try:
            stored_heartbeat_ns(keys, name, value)
        except PresenceDataError as error:
            return error
    for name in names:
        try:
            name.decode()
        except (AttributeError, UnicodeDecodeError):
            return _not_utf8(keys, name)
    return _foreign(keys, names[0], values[0])

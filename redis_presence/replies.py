"""Decoding Redis replies into the package's values: stored consumers into columns, TIME
into nanoseconds. No I/O; the layout of a stored value is `keys.STORED_VALUE`."""

from __future__ import annotations

import re
from itertools import repeat
from typing import Any

from .errors import PresenceDataError
from .keys import STORED_FIELDS, STORED_SEPARATOR, GroupKeys
from .validation import MAX_LEASE_COUNT

Columns = tuple[list[str], list[int], list[int], list[int], list[int | None] | None]
"""One group's consumers as columns: names, registered_at_ns, last_heartbeat_ns, lease_count
and last_progress_ns (None when nobody in the group recorded progress, else None for each
consumer who did not)."""

_SEPARATORS: dict[type, Any] = {str: STORED_SEPARATOR, bytes: STORED_SEPARATOR.encode()}
_NEWLINES: dict[type, Any] = {str: "\n", bytes: b"\n"}
_PADS: dict[type, Any] = {str: STORED_SEPARATOR + "0", bytes: (STORED_SEPARATOR + "0").encode()}


def server_now_ns(seconds: bytes | str | int, micros: bytes | str | int) -> int:
    """The instant a TIME reply names, in nanoseconds."""
    return (int(seconds) * 1_000_000 + int(micros)) * 1_000


def stored_heartbeat_ns(keys: GroupKeys, consumer: Any, value: Any) -> int:
    """The last heartbeat (nanoseconds) of one stored value; a value this package did not
    write is a data error naming the key and the field."""
    space = _SEPARATORS.get(type(value))
    fields: list[Any] = value.split(space) if space is not None else []
    if (
        len(fields) not in _FIELD_COUNTS
        or not all(map(_is_decimal, fields))
        or int(fields[2]) > MAX_LEASE_COUNT
    ):
        raise _foreign(keys, consumer, value)
    return int(fields[1])


def _is_decimal(text: Any) -> bool:
    """Whether `text` is what this package writes for a number: ASCII decimal digits, at
    most 19 (no sign, space, underscore or other digits that ``int`` would take)."""
    return 0 < len(text) <= _MAX_DIGITS and text.isascii() and text.isdigit()


_FIELD_COUNTS = (STORED_FIELDS, STORED_FIELDS + 1)
"""A stored value without progress, and with it."""

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
        return [], [], [], [], None
    # UTF-8 bytes sort in code point order: sorting before decoding gives the str order.
    names = sorted(table)
    values = list(map(table.__getitem__, names))
    kind = type(values[0])
    try:
        space = _SEPARATORS[kind]
        # Each value is exactly STORED_FIELDS numbers (one more with progress) with one
        # separator between them, and nothing but ASCII digits besides (int() would also
        # take signs, spaces, "_").
        counts = list(map(kind.count, values, repeat(space)))
        spaces = set(counts)
        progress: list[int | None] | None = None
        width = STORED_FIELDS
        if spaces != {STORED_FIELDS - 1}:
            if not spaces <= {STORED_FIELDS - 1, STORED_FIELDS}:
                raise ValueError
            # Some consumers recorded progress: pad the others with a 0 to read 4 columns.
            width = STORED_FIELDS + 1
            has = [count == STORED_FIELDS for count in counts]
            pad = _PADS[kind]
            values = [v if h else v + pad for v, h in zip(values, has, strict=True)]
        joined = space.join(values)
        digits = joined.replace(space, space[:0])
        if not (digits.isascii() and digits.isdigit()):
            raise ValueError
        # No empty field (two separators in a row, or one at either end), and none longer
        # than a number this package writes: the first two checks search the joined text
        # (in C), not each field.
        if space + space in joined or joined[:1] == space or joined[-1:] == space:
            raise ValueError
        fields = joined.split(space)
        if max(map(len, fields)) > _MAX_DIGITS:
            raise ValueError
        registered = list(map(int, fields[0::width]))
        heartbeat = list(map(int, fields[1::width]))
        lease = list(map(int, fields[2::width]))
        if max(lease) > MAX_LEASE_COUNT:  # a count no client writes (docs/protocol.md, 4)
            raise ValueError
        if width > STORED_FIELDS:
            progress = [int(p) if h else None for p, h in zip(fields[3::width], has, strict=True)]
        if kind is str:
            decoded = names
        else:
            decoded = _NEWLINES[kind].join(names).decode().split("\n")
            if len(decoded) != len(names):  # a name holds a newline: decode one by one
                decoded = [name.decode() for name in names]
    except (KeyError, ValueError, TypeError, AttributeError, UnicodeDecodeError):
        raise _first_bad(keys, names, values) from None
    return decoded, registered, heartbeat, lease, progress


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

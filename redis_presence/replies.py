"""Decoding Redis replies into the package's values: stored consumers into columns, TIME
into nanoseconds. No I/O; the layout of a stored value is `keys.STORED_VALUE`."""

from __future__ import annotations

import re
from itertools import repeat
from typing import Any

from .errors import PresenceDataError
from .keys import STORED_FIELDS, STORED_SEPARATOR, GroupKeys

Columns = tuple[list[str], list[int], list[int], list[int]]
"""One group's consumers as columns: names, registered_at_ns, last_heartbeat_ns, lease_count."""

_SEPARATORS: dict[type, Any] = {str: STORED_SEPARATOR, bytes: STORED_SEPARATOR.encode()}
_NEWLINES: dict[type, Any] = {str: "\n", bytes: b"\n"}


def server_now_ns(seconds: bytes | str | int, micros: bytes | str | int) -> int:
    """The instant a TIME reply names, in nanoseconds."""
    return (int(seconds) * 1_000_000 + int(micros)) * 1_000


def stored_heartbeat_ns(keys: GroupKeys, consumer: Any, value: Any) -> int:
    """The last heartbeat (nanoseconds) of one stored value; a value this package did not
    write is a data error naming the key and the field."""
    space = _SEPARATORS.get(type(value))
    fields: list[Any] = value.split(space) if space is not None else []
    if len(fields) != STORED_FIELDS or not all(map(_is_decimal, fields)):
        raise _foreign(keys, consumer, value)
    return int(fields[1])


def _is_decimal(text: Any) -> bool:
    """Whether `text` is what this package writes for a number: ASCII decimal digits, at
    most 19 (no sign, space, underscore or other digits that ``int`` would take)."""
    return 0 < len(text) <= _MAX_DIGITS and text.isascii() and text.isdigit()


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
        return [], [], [], []
    # UTF-8 bytes sort in code point order: sorting before decoding gives the str order.
    names = sorted(table)
    values = list(map(table.__getitem__, names))
    kind = type(values[0])
    try:
        space = _SEPARATORS[kind]
        # Each value is exactly STORED_FIELDS numbers with one separator between them, and
        # nothing but ASCII digits besides (int() would also take signs, spaces, "_").
        if set(map(kind.count, values, repeat(space))) != {STORED_FIELDS - 1}:
            raise ValueError
        joined = space.join(values)
        digits = joined.replace(space, space[:0])
        if not (digits.isascii() and digits.isdigit()):
            raise ValueError
        fields = joined.split(space)
        if max(map(len, fields)) > _MAX_DIGITS or not min(map(len, fields)):
            raise ValueError
        registered = list(map(int, fields[0::STORED_FIELDS]))
        heartbeat = list(map(int, fields[1::STORED_FIELDS]))
        lease = list(map(int, fields[2::STORED_FIELDS]))
        if kind is str:
            decoded = names
        else:
            decoded = _NEWLINES[kind].join(names).decode().split("\n")
            if len(decoded) != len(names):  # a name holds a newline: decode one by one
                decoded = [name.decode() for name in names]
    except (KeyError, ValueError, TypeError, AttributeError, UnicodeDecodeError):
        raise _first_bad(keys, names, values) from None
    return decoded, registered, heartbeat, lease


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
            return PresenceDataError(
                f"redis-presence key {keys.data} holds a consumer name that is not UTF-8: "
                f"{name!r:.80}"
            )
    return _foreign(keys, names[0], values[0])

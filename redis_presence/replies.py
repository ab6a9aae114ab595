"""Decoding Redis replies into the package's values: stored consumers into columns, TIME
into nanoseconds. No I/O; the layout of a stored value is `keys.STORED_VALUE`."""

from __future__ import annotations

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


def stored_heartbeat_ns(keys: GroupKeys, value: Any) -> int:
    """The last heartbeat (nanoseconds) of one stored value; a foreign value is a data error."""
    fields = value.split()
    try:
        if len(fields) != STORED_FIELDS:
            raise ValueError
        return int(fields[1])
    except ValueError:
        raise PresenceDataError(
            f"{keys.data} holds a value this package did not write: {value!r:.80}"
        ) from None


def stored_columns(keys: GroupKeys, reply: Any) -> Columns:
    """The consumers of one group, sorted by name, as columns, from its HGETALL reply (a
    mapping, or the flat ``[consumer, stored, ...]``; bytes, or str from a
    ``decode_responses`` client); a value this package did not write is a data error.

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
        # Each value is exactly STORED_FIELDS integers with one separator between them.
        if set(map(kind.count, values, repeat(space))) != {STORED_FIELDS - 1}:
            raise ValueError
        fields = space.join(values).split(space)
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
        raise PresenceDataError(
            f"{keys.data} holds a value this package did not write: "
            f"{_first_bad(names, values)!r:.80}"
        ) from None
    return decoded, registered, heartbeat, lease


def _first_bad(names: list[Any], values: list[Any]) -> Any:
    """The first stored value that is not STORED_FIELDS decimal integers, else the first
    name that is not UTF-8 (for the error message)."""
    for value in values:
        try:
            fields = value.split()
            if len(fields) != STORED_FIELDS:
                return value
            for field in fields:
                int(field)
        except (ValueError, TypeError, AttributeError):
            return value
    for name in names:
        try:
            name.decode()
        except (AttributeError, UnicodeDecodeError):
            return name
    return values[0]

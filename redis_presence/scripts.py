"""The Lua scripts: loading their source, and encoding arguments / decoding replies.

Each operation lives in ``lua/<name>.lua``; ``lua/lib.lua`` holds the helpers shared
by all of them and is prepended at load time. In a wheel the folder ships as
``redis_presence/lua``; in an editable install or a source checkout it is the
top-level ``lua/`` folder next to the package.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from itertools import repeat
from pathlib import Path
from typing import Any

from .errors import PresenceDataError
from .keys import GroupKeys

SCRIPT_NAMES = ("heartbeat", "heartbeat_many", "count", "prune", "deregister")
LIBRARY = "lib"


def _read(name: str) -> str:
    filename = f"{name}.lua"
    packaged = resources.files("redis_presence") / "lua" / filename
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    checkout = Path(__file__).resolve().parent.parent / "lua" / filename
    if checkout.is_file():
        return checkout.read_text(encoding="utf-8")
    raise FileNotFoundError(
        f"Lua script {filename} is neither packaged in redis_presence/lua nor in {checkout.parent}"
    )


def script_origin() -> str:
    """Where the scripts are read from: ``"package"`` (wheel) or ``"checkout"`` (editable)."""
    packaged = resources.files("redis_presence") / "lua" / f"{LIBRARY}.lua"
    return "package" if packaged.is_file() else "checkout"


@cache
def source(name: str) -> str:
    """Full source of one operation script, shared helpers included."""
    if name not in SCRIPT_NAMES:
        raise KeyError(f"unknown script {name!r}; known: {', '.join(SCRIPT_NAMES)}")
    return f"{_read(LIBRARY)}\n-- {name}.lua\n{_read(name)}"


def server_now_ns(seconds: bytes | str | int, micros: bytes | str | int) -> int:
    """The instant a TIME reply names, in nanoseconds."""
    return (int(seconds) * 1_000_000 + int(micros)) * 1_000


Columns = tuple[list[str], list[int], list[int], list[int]]
"""One group's consumers as columns: names, registered_at_ns, last_heartbeat_ns, lease_count."""


def stored_columns(keys: GroupKeys, reply: Any) -> Columns:
    """The consumers of one group, sorted by name, as columns, from its HGETALL reply (a
    mapping, or the flat ``[consumer, stored, ...]``; bytes, or str from a
    ``decode_responses`` client); a value this package did not write is a data error.

    Decoded a column at a time (one join, split and ``map(int, ...)`` per field, in C), not a
    value at a time: at 100,000 consumers this is most of what a snapshot spends in Python.
    """
    table = reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2], strict=True))
    if not table:
        return [], [], [], []
    # UTF-8 bytes sort in code point order: sorting before decoding gives the str order.
    names = sorted(table)
    values = list(map(table.__getitem__, names))
    text = type(values[0]) is str
    space: Any = " " if text else b" "
    newline: Any = "\n" if text else b"\n"
    try:
        # Each value is exactly 'registered_ns last_heartbeat_ns lease_count'.
        if set(map(type(values[0]).count, values, repeat(space))) != {2}:
            raise ValueError
        fields = space.join(values).split(space)
        registered = list(map(int, fields[0::3]))
        heartbeat = list(map(int, fields[1::3]))
        lease = list(map(int, fields[2::3]))
        decoded = names if text else newline.join(names).decode().split("\n")
        if len(decoded) != len(names):  # a name holds a newline: decode one by one
            decoded = [name.decode() for name in names]
    except (ValueError, TypeError, AttributeError, UnicodeDecodeError):
        raise PresenceDataError(
            f"{keys.data} holds a value this package did not write: "
            f"{_first_bad(names, values)!r:.80}"
        ) from None
    return decoded, registered, heartbeat, lease


def _first_bad(names: list[Any], values: list[Any]) -> Any:
    """The first stored value that is not three decimal integers, else the first name that
    is not UTF-8 (for the error message)."""
    for value in values:
        try:
            registered, heartbeat, lease = value.split()
            int(registered), int(heartbeat), int(lease)
        except (ValueError, TypeError, AttributeError):
            return value
    for name in names:
        try:
            name.decode()
        except (AttributeError, UnicodeDecodeError):
            return name
    return values[0]

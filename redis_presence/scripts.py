"""The Lua scripts: loading their source, and encoding arguments / decoding replies.

Each operation lives in ``lua/<name>.lua``; ``lua/lib.lua`` holds the helpers shared
by all of them and is prepended at load time. In a wheel the folder ships as
``redis_presence/lua``; in an editable install or a source checkout it is the
top-level ``lua/`` folder next to the package.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from .errors import PresenceDataError
from .keys import GroupKeys
from .model import StoredConsumer

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


def stored_consumers(keys: GroupKeys, reply: Any) -> Iterator[StoredConsumer]:
    """The consumers of one group, sorted by name, from its HGETALL reply (a mapping, or the
    flat ``[consumer, stored, ...]``); a value this package did not write is a data error."""
    queue, group = keys.queue, keys.group
    pairs = reply.items() if isinstance(reply, dict) else zip(reply[::2], reply[1::2], strict=True)
    # UTF-8 bytes sort in code point order: sorting before decoding gives the str order.
    for consumer, stored in sorted(pairs):
        try:
            registered, heartbeat, lease = stored.split()
            yield (
                queue,
                group,
                consumer.decode() if type(consumer) is bytes else consumer,
                int(registered),
                int(heartbeat),
                int(lease),
            )
        except (ValueError, AttributeError, UnicodeDecodeError):
            raise PresenceDataError(
                f"{keys.data} holds a value this package did not write: {stored!r:.80}"
            ) from None

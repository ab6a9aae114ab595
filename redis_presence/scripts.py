"""The Lua scripts: one `Script` per ``lua/<name>.lua``, its source and its SHA.

Each operation lives in ``lua/<name>.lua``; ``lua/lib.lua`` holds the helpers shared by all
of them and is prepended at load time. In a wheel the folder ships as
``redis_presence/lua``; in an editable install or a source checkout it is the top-level
``lua/`` folder next to the package. Nothing here talks to Redis: the executors send
scripts by SHA and load `Script.source` after ``NOSCRIPT`` (`redis_presence._executor`).
"""

from __future__ import annotations

import hashlib
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from importlib.abc import Traversable

LIBRARY = "lib"


class Script(NamedTuple):
    """One operation script: its name, its full source (shared helpers included) and the
    SHA1 that ``EVALSHA`` names it by."""

    name: str
    source: str
    sha: str


def _folder() -> Traversable:
    """``redis_presence/lua`` in a wheel, else the top-level ``lua/`` of the checkout."""
    packaged = resources.files("redis_presence") / "lua"
    if (packaged / f"{LIBRARY}.lua").is_file():
        return packaged
    checkout = Path(__file__).resolve().parent.parent / "lua"
    if (checkout / f"{LIBRARY}.lua").is_file():
        return checkout
    raise FileNotFoundError(
        f"the Lua scripts are neither packaged in redis_presence/lua nor in {checkout}"
    )


def _read(name: str) -> str:
    return (_folder() / f"{name}.lua").read_text(encoding="utf-8")


def script_origin() -> str:
    """Where the scripts are read from: ``"package"`` (wheel) or ``"checkout"`` (editable)."""
    packaged = resources.files("redis_presence") / "lua" / f"{LIBRARY}.lua"
    return "package" if packaged.is_file() else "checkout"


SCRIPT_NAMES = tuple(
    sorted(
        entry.name.removesuffix(".lua")
        for entry in _folder().iterdir()
        if entry.name.endswith(".lua") and entry.name != f"{LIBRARY}.lua"
    )
)
"""Every operation script: each ``lua/<name>.lua`` but ``lib.lua``."""


@cache
def script(name: str) -> Script:
    """The operation script `name` (read once per process; a script never changes)."""
    if name not in SCRIPT_NAMES:
        raise KeyError(f"unknown script {name!r}; known: {', '.join(SCRIPT_NAMES)}")
    text = f"{_read(LIBRARY)}\n-- {name}.lua\n{_read(name)}"
    return Script(name, text, hashlib.sha1(text.encode("utf-8")).hexdigest())


def source(name: str) -> str:
    """Full source of one operation script, shared helpers included."""
    return script(name).source

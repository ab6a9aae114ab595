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
    SHA1 that ``EVALSHA`` names it by; `function`, for a script of the `library`, the name
    ``FCALL`` calls it by (the same KEYS, ARGV and reply), else None."""

    name: str
    source: str
    sha: str
    function: str | None = None

    @property
    def command(self) -> tuple[str, str]:
        """How a call of it starts: ``("FCALL", function)`` for a script of the library, else
        ``("EVALSHA", sha)``; the number of keys, the keys and the arguments follow."""
        if self.function is not None:
            return ("FCALL", self.function)
        return ("EVALSHA", self.sha)


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


FUNCTIONS = ("heartbeat", "heartbeat_many", "drain")
"""The scripts also loaded as Redis functions (`library`): the heartbeats, the hot path, where
defining the helpers of ``lib.lua`` on every ``EVALSHA`` costs a third of a beat's server
time, and the drain request, a writer's. Every other script is sent by ``EVALSHA`` only."""


class Library(NamedTuple):
    """The Redis function library (``FUNCTION LOAD``): `name`, its `source`, and the function
    name of each script of FUNCTIONS. Names carry a digest of the source, so libraries of
    two package versions live side by side on one server and neither replaces the other."""

    name: str
    source: str
    functions: dict[str, str]


@cache
def library() -> Library:
    """The function library: ``lib.lua`` once, after ``local KEYS, ARGV``, then each script
    of FUNCTIONS as a function that sets KEYS and ARGV, names them (``bind``) and runs its
    body (docs/protocol.md, section 10)."""
    bodies = {name: _read(name) for name in FUNCTIONS}
    digest = hashlib.sha1(
        "\n".join([_read(LIBRARY), *bodies.values()]).encode("utf-8")
    ).hexdigest()[:12]
    name = f"redis_presence_{digest}"
    functions = {script_name: f"rp_{script_name}_{digest}" for script_name in FUNCTIONS}
    parts = [f"#!lua name={name}", "local KEYS, ARGV", _read(LIBRARY)]
    for script_name, body in bodies.items():
        parts.append(f"-- {script_name}.lua\nlocal function run_{script_name}()\n{body}\nend")
        parts.append(
            f"redis.register_function('{functions[script_name]}', function(keys, args)\n"
            f"  KEYS, ARGV = keys, args\n  bind()\n  return run_{script_name}()\nend)"
        )
    return Library(name, "\n".join(parts), functions)


@cache
def script(name: str) -> Script:
    """The operation script `name` (read once per process; a script never changes)."""
    if name not in SCRIPT_NAMES:
        raise KeyError(f"unknown script {name!r}; known: {', '.join(SCRIPT_NAMES)}")
    text = f"{_read(LIBRARY)}\n-- {name}.lua\n{_read(name)}"
    function = library().functions.get(name)
    return Script(name, text, hashlib.sha1(text.encode("utf-8")).hexdigest(), function)


def source(name: str) -> str:
    """Full source of one operation script, shared helpers included."""
    return script(name).source

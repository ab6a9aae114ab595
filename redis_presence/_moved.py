"""Old module names kept for one release: each warns whenever it is used, naming the new one.

``redis_presence.redis`` is now `redis_presence.registry` (the old name read as the driver)
and ``redis_presence.protocol`` is `redis_presence.contract` (the old name read as the wire
protocol, `docs/protocol.md`). Importing a name through the old module still works in 0.2
(release 0.1 had only the old names) and raises a `DeprecationWarning`; the old modules go
in `REMOVED_IN`, as CHANGELOG.md says (tests/test_release.py holds the two to it).
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any

REMOVED_IN = "0.3.0"
"""The release without ``redis_presence.redis`` and ``redis_presence.protocol``."""


def forward(old: str, new: str, names: tuple[str, ...]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for `old` that hands out `names` from `new`, with a warning."""

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        warnings.warn(
            f"{old} is deprecated and goes in redis-presence {REMOVED_IN}: "
            f"import {name} from {new} (or from redis_presence)",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(new), name)

    return __getattr__

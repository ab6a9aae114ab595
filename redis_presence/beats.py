"""What a beat answers (protocol version 2): `BeatReply` of `heartbeat`, `Written` of
`heartbeat_many`, and the process's instance token (`process_instance`), which tells two
processes beating for one consumer apart."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable
from typing import NamedTuple

__all__ = ["DRAIN", "NO_DRAIN", "BeatReply", "Written", "process_instance"]


class BeatReply(NamedTuple):
    """What one heartbeat answers: whether a drain of its consumer was requested (and no
    draining beat took it yet), so the consumer should stop taking work and beat with
    ``draining=True``."""

    drain_requested: bool = False


NO_DRAIN = BeatReply(False)
"""The reply of a beat whose consumer has no drain request (shared, as `DRAIN` is)."""
DRAIN = BeatReply(True)
"""The reply of a beat whose consumer has a drain request."""


class Written(int):
    """What `heartbeat_many` returns: how many beats it wrote (an int, as before), and, as
    `drain_requested`, the ``(queue, group, consumer)`` of each of them whose consumer has a
    drain request after the call."""

    drain_requested: frozenset[tuple[str, str, str]]

    def __new__(
        cls, count: int = 0, drain_requested: Iterable[tuple[str, str, str]] = ()
    ) -> Written:
        written = super().__new__(cls, count)
        written.drain_requested = frozenset(drain_requested)
        return written

    def __repr__(self) -> str:
        if not self.drain_requested:
            return f"Written({int(self)})"
        return f"Written({int(self)}, drain_requested={sorted(self.drain_requested)!r})"

    def __reduce__(self) -> tuple[type[Written], tuple[int, frozenset[tuple[str, str, str]]]]:
        return (Written, (int(self), self.drain_requested))


TOKEN: list[str] = []
"""This process's instance token, the only item of a list that a fork refills in place: a
hot path keeps the list and reads ``TOKEN[0]`` (`process_instance` is the public way)."""


def _draw() -> None:
    TOKEN[:] = [secrets.token_hex(8)]


def process_instance() -> str:
    """This process's instance token: 16 hex digits drawn once per process (drawn again in
    a child after ``fork``, so a forked worker is another instance)."""
    return TOKEN[0]


_draw()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_draw)

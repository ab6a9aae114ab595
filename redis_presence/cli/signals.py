"""How the CLI's long-running commands take signals: a handler for some signals inside a
block, the ones before restored after it."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any


@contextmanager
def signals_call(
    handler: Callable[[int, FrameType | None], None], *signums: signal.Signals
) -> Iterator[None]:
    """`handler` for `signums` inside the block (nothing where signals cannot be set: not
    the main thread), the handlers before restored after it."""
    before: dict[signal.Signals, Any] = {}
    try:
        for signum in signums:
            before[signum] = signal.signal(signum, handler)
    except ValueError:  # not the main thread: nothing to install
        pass
    try:
        yield
    finally:
        for signum, previous in before.items():
            signal.signal(signum, previous)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextmanager
def interrupt_on_sigterm(*also: signal.Signals) -> Iterator[None]:
    """Treat SIGTERM (and the signals in `also`, say SIGHUP) like Ctrl-C inside the block,
    so cleanup (`finally`) always happens."""
    with signals_call(_interrupt, signal.SIGTERM, *also):
        yield


__all__ = ["interrupt_on_sigterm", "signals_call"]

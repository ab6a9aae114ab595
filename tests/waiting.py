"""Polling with a deadline: the one way a test waits for something to happen.

`wait_until` calls a check again and again (pausing `interval_s`, growing up to
`max_interval_s`) until it returns something truthy, and returns that. After `timeout_s`
it raises `TimedOut`, an `AssertionError` that says what was awaited and the last value
(or the last ignored exception) the check gave. `alive` is called before every check and
raises when what is awaited can no longer come (the process that would do it exited).
`wait_until_async` is the same for a coroutine: its check may return an awaitable.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")

_NOTHING = object()


class TimedOut(AssertionError):
    """What a test waited for did not happen in time."""


class _Wait:
    """The deadline, the pauses and what was last seen, shared by both loops."""

    def __init__(
        self,
        timeout_s: float,
        what: str,
        interval_s: float,
        max_interval_s: float | None,
        ignoring: tuple[type[BaseException], ...],
        seen: Callable[[], object] | None,
    ) -> None:
        self.timeout_s = timeout_s
        self.what = what
        self.pause_s = interval_s
        self.max_interval_s = interval_s if max_interval_s is None else max_interval_s
        self.ignoring = ignoring
        self.seen = seen
        self.last: object = _NOTHING
        self.deadline = time.monotonic() + timeout_s

    def next_pause(self) -> float:
        """The pause before the next check; raises `TimedOut` past the deadline."""
        if time.monotonic() >= self.deadline:
            raise TimedOut(self.message())
        pause = min(self.pause_s, max(0.0, self.deadline - time.monotonic()))
        self.pause_s = min(self.pause_s * 2, self.max_interval_s)
        return pause

    def message(self) -> str:
        text = f"timed out after {self.timeout_s:g} s waiting for {self.what}"
        if self.seen is not None:
            seen = self.seen()
            if isinstance(seen, str) and "\n" in seen:  # a log's tail: shown as it is
                return f"{text}; last seen:\n{seen}"
            return f"{text}; last seen: {seen!r}"
        if isinstance(self.last, BaseException):
            return f"{text}; last error: {type(self.last).__name__}: {self.last}"
        if self.last is not _NOTHING:
            return f"{text}; last value: {self.last!r}"
        return text


def wait_until(
    check: Callable[[], T | None],
    *,
    timeout_s: float,
    what: str,
    interval_s: float = 0.01,
    max_interval_s: float | None = None,
    alive: Callable[[], None] | None = None,
    ignoring: tuple[type[BaseException], ...] = (),
    seen: Callable[[], object] | None = None,
) -> T:
    """The first truthy value `check` returns, polled every `interval_s` (doubling up to
    `max_interval_s`); `TimedOut` after `timeout_s`, naming `what` and the last value seen
    (or what `seen` returns then). Exceptions of the `ignoring` types count as not yet."""
    wait = _Wait(timeout_s, what, interval_s, max_interval_s, ignoring, seen)
    while True:
        if alive is not None:
            alive()
        try:
            value = check()
        except ignoring as exc:
            wait.last = exc
        else:
            if value:
                return value
            wait.last = value
        time.sleep(wait.next_pause())


@overload
async def wait_until_async(
    check: Callable[[], Awaitable[T | None]],
    *,
    timeout_s: float,
    what: str,
    interval_s: float = ...,
    max_interval_s: float | None = ...,
    alive: Callable[[], None] | None = ...,
    ignoring: tuple[type[BaseException], ...] = ...,
    seen: Callable[[], object] | None = ...,
) -> T: ...


@overload
async def wait_until_async(
    check: Callable[[], T | None],
    *,
    timeout_s: float,
    what: str,
    interval_s: float = ...,
    max_interval_s: float | None = ...,
    alive: Callable[[], None] | None = ...,
    ignoring: tuple[type[BaseException], ...] = ...,
    seen: Callable[[], object] | None = ...,
) -> T: ...


async def wait_until_async(
    check: Callable[[], Any],
    *,
    timeout_s: float,
    what: str,
    interval_s: float = 0.01,
    max_interval_s: float | None = None,
    alive: Callable[[], None] | None = None,
    ignoring: tuple[type[BaseException], ...] = (),
    seen: Callable[[], object] | None = None,
) -> Any:
    """`wait_until` in a coroutine: the same contract, pausing with ``asyncio.sleep``;
    `check` may return an awaitable, which is awaited."""
    wait = _Wait(timeout_s, what, interval_s, max_interval_s, ignoring, seen)
    while True:
        if alive is not None:
            alive()
        try:
            value = check()
            if inspect.isawaitable(value):
                value = await value
        except ignoring as exc:
            wait.last = exc
        else:
            if value:
                return value
            wait.last = value
        await asyncio.sleep(wait.next_pause())

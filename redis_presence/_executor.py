"""Running a plan (`Run`): what both registries share of it, apart from their transports.

Each batch a plan yields goes to Redis through the registry's own *transport*, which is the
only I/O code and the only code the two registries do not share: one request on its own,
several in one pipeline, and on a cluster one pipeline per node (concurrently in the async
registry); a Redis error reply comes back in the place of its request instead of being
raised. Everything else about running the plan is decided here, once: after ``NOSCRIPT`` (a
restart, ``SCRIPT FLUSH``, a new node), load the script and send those calls again
(`after_noscript`), the one reload path for every script call; the first error reply of a
batch is thrown into the plan as a `PresenceError` (a `Partial` batch gets each error in
its place instead).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, NamedTuple, TypeVar

from redis.exceptions import NoScriptError

from ._routing import routing_key
from .errors import PresenceDataError, PresenceError, translate
from .plans import Command, Partial, Plan, Request, ScriptCall

T = TypeVar("T")


class ScriptReload(NamedTuple):
    """What to send after a batch met ``NOSCRIPT``: each missing script's ``SCRIPT LOAD``
    (a cluster client sends it to every primary), then, once they are done, those calls
    again (the requests of one batch may run in any order)."""

    loads: list[Request]
    calls: list[Request]
    positions: list[int]
    """Where each call sent again stood in the first batch."""
    load_of: list[int]
    """Which of `loads` each call needs."""

    def merge(
        self, replies: Sequence[Any], loaded: Sequence[Any], again: Sequence[Any]
    ) -> list[Any]:
        """The first batch's replies with each call sent again in its place (or the error of
        its ``SCRIPT LOAD``, an ACL denial say, when that failed)."""
        merged = list(replies)
        for position, load, reply in zip(self.positions, self.load_of, again, strict=True):
            merged[position] = loaded[load] if isinstance(loaded[load], Exception) else reply
        return merged


def after_noscript(batch: Sequence[Request], replies: Sequence[Any]) -> ScriptReload | None:
    """The `ScriptReload` for the script calls of `batch` answered ``NOSCRIPT``, or None."""
    positions = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
    if not positions:
        return None
    loads: dict[str, int] = {}
    requests: list[Request] = []
    calls: list[Request] = []
    load_of: list[int] = []
    for i in positions:
        call = batch[i]
        if not isinstance(call, ScriptCall):  # only script calls meet NOSCRIPT
            raise TypeError(f"NOSCRIPT for a request that is no script call: {call!r}")
        if call.script.name not in loads:
            loads[call.script.name] = len(requests)
            requests.append(Command("SCRIPT LOAD", (call.script.source,)))
        load_of.append(loads[call.script.name])
        calls.append(call)
    return ScriptReload(requests, calls, positions, load_of)


def reply_error(reply: Exception, request: Request | None) -> PresenceError:
    """The `PresenceError` for the error reply to `request`: a data error of a plain command
    (Redis's WRONGTYPE names no key) says which key it met."""
    error = translate(reply)
    if isinstance(error, PresenceDataError) and isinstance(request, Command):
        key = routing_key(request)
        if key is not None:
            name = key.decode("utf-8", "replace") if isinstance(key, bytes) else str(key)
            error = PresenceDataError(f"{error} (key {name}, {request.name})")
    error.__cause__ = reply
    return error


def first_error(batch: Sequence[Request], replies: Sequence[Any]) -> PresenceError | None:
    """The `PresenceError` of the first error reply of a batch, or None."""
    for request, reply in zip(batch, replies, strict=False):
        if isinstance(reply, Exception):
            return reply_error(reply, request)
    return None


class Run(Generic[T]):
    """One plan being executed: `batch` is what to send next (None once the plan is done,
    with `result`), and `feed` takes that batch's replies, error replies in place.

    The plan's own batches go out as it yields them; when one meets ``NOSCRIPT``, the run
    first sends the missing scripts' loads, then those calls again (`after_noscript`),
    before the plan sees any reply; the first error reply left is thrown into the plan as a
    `PresenceError` (which is the operation's error unless the plan catches it), or, for a
    `Partial` batch, every error reply is given to the plan in its place. `answered` starts
    a run whose first batch was already sent (the single-call fast path, whose call met an
    error).
    """

    __slots__ = ("_loaded", "_plan", "_reload", "_replies", "_sent", "batch", "result")

    def __init__(self, plan: Plan[T], answered: list[Any] | None = None) -> None:
        self._plan = plan
        self._reload: ScriptReload | None = None
        self._replies: list[Any] = []
        self._loaded: list[Any] | None = None
        self.batch: list[Request] | None = None
        self.result: T | None = None
        self._advance(None)
        if answered is not None:
            self.feed(answered)

    def _advance(self, replies: list[Any] | None) -> None:
        try:
            self.batch = self._plan.send(replies)  # type: ignore[arg-type]
        except StopIteration as done:
            self.batch, self.result = None, done.value
        self._sent = self.batch

    def _answer(self, replies: list[Any]) -> None:
        """Give the plan the replies to its batch: each error in place for a `Partial`
        batch, else the first error thrown into it (it goes on if it catches it)."""
        sent = self._sent or []
        if isinstance(sent, Partial):
            self._advance(
                [
                    reply_error(reply, request) if isinstance(reply, Exception) else reply
                    for request, reply in zip(sent, replies, strict=True)
                ]
            )
            return
        error = first_error(sent, replies)
        if error is None:
            self._advance(list(replies))
            return
        try:
            self.batch = self._plan.throw(error)
        except StopIteration as done:
            self.batch, self.result = None, done.value
        self._sent = self.batch

    def feed(self, replies: list[Any]) -> None:
        """Take the replies to `batch`; `batch` becomes what to send next."""
        reload = self._reload
        if reload is None:
            reload = after_noscript(self._sent or [], replies)
            if reload is None:
                self._answer(replies)
                return
            self._reload, self._replies, self.batch = reload, replies, reload.loads
        elif self._loaded is None:
            self._loaded, self.batch = replies, reload.calls
        else:
            merged = reload.merge(self._replies, self._loaded, replies)
            self._reload = self._loaded = None
            self._answer(merged)

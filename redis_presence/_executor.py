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

from redis.exceptions import NoScriptError, ResponseError

from . import scripts
from ._routing import routing_key
from .errors import PresenceDataError, PresenceError, translate
from .plans import Command, Partial, Plan, Request, ScriptCall

T = TypeVar("T")


class Functions:
    """Whether a registry calls the scripts of the function library by ``FCALL`` (the
    default) or sends them by ``EVALSHA``: once the server refuses functions (an ACL without
    ``+fcall``, or without ``+function|load`` when the library is missing, a server or proxy
    without ``FUNCTION``), every later call of that registry goes by ``EVALSHA``, which gives
    the same result at more server time. One per registry, shared by its threads and tasks:
    `refused` is written once, from False to True, so a race costs one more ``FCALL``."""

    __slots__ = ("refused", "why")

    def __init__(self) -> None:
        self.refused = False
        self.why: str | None = None
        """The server's words when it refused functions."""

    def refuse(self, why: str) -> None:
        """Send the library's scripts by ``EVALSHA`` from now on."""
        self.refused, self.why = True, why


def function_missing(reply: Any) -> bool:
    """Whether `reply` says that the function called is not loaded (a new server, a
    ``FUNCTION FLUSH``, another package version's library)."""
    return isinstance(reply, ResponseError) and str(reply).startswith("Function not found")


def fcall_refused(reply: Any) -> bool:
    """Whether `reply` refuses the ``FCALL`` command itself: an ACL without ``+fcall``, or a
    server or proxy that does not know it (a key the ACL denies is refused by ``EVALSHA``
    alike, and is no reason to leave functions)."""
    if not isinstance(reply, ResponseError):
        return False
    text = str(reply).lower()
    return "fcall" in text and any(
        words in text
        for words in ("no permissions to run", "unknown command", "unsupported", "not supported")
    )


def load_refused(reply: Any) -> bool:
    """Whether the reply to ``FUNCTION LOAD`` is an error other than "already exists" (a
    concurrent load of the same library, which is a success)."""
    return isinstance(reply, Exception) and "already exists" not in str(reply)


class ScriptReload(NamedTuple):
    """What to send after a batch met ``NOSCRIPT`` or "Function not found": each missing
    script's ``SCRIPT LOAD`` and the library's ``FUNCTION LOAD`` (a cluster client sends them
    to every primary), then, once they are done, those calls again (the requests of one
    batch may run in any order): by ``EVALSHA`` where functions are refused."""

    loads: list[Request]
    calls: list[ScriptCall]
    positions: list[int]
    """Where each call sent again stood in the first batch."""
    load_of: list[int]
    """Which of `loads` each call needs (-1: none, it goes by ``EVALSHA`` at once)."""

    def resend(self, loaded: Sequence[Any], functions: Functions) -> list[Request]:
        """The calls to send again, given the replies to `loads`: a call of a function whose
        library could not be loaded goes by ``EVALSHA`` (and functions are refused)."""
        out: list[Request] = []
        for call, load in zip(self.calls, self.load_of, strict=True):
            if call.args[0] == "FCALL":
                if load >= 0 and load_refused(loaded[load]):
                    functions.refuse(str(loaded[load]))
                out.append(call.by_sha if functions.refused else call)
            else:
                out.append(call)
        return out

    def merge(
        self, replies: Sequence[Any], loaded: Sequence[Any], again: Sequence[Any]
    ) -> list[Any]:
        """The first batch's replies with each call sent again in its place (or the error of
        its ``SCRIPT LOAD``, an ACL denial say, when that failed; a failed ``FUNCTION
        LOAD`` is no error of the call, which went by ``EVALSHA``)."""
        merged = list(replies)
        for position, load, call, reply in zip(
            self.positions, self.load_of, self.calls, again, strict=True
        ):
            failed = load >= 0 and call.args[0] != "FCALL" and isinstance(loaded[load], Exception)
            merged[position] = loaded[load] if failed else reply
        return merged


def after_noscript(
    batch: Sequence[Request], replies: Sequence[Any], functions: Functions
) -> ScriptReload | None:
    """The `ScriptReload` for the script calls of `batch` answered ``NOSCRIPT``, "Function
    not found", or a refusal of ``FCALL`` itself; or None."""
    loads: dict[str, int] = {}
    requests: list[Request] = []
    calls: list[ScriptCall] = []
    positions: list[int] = []
    load_of: list[int] = []
    for i, reply in enumerate(replies):
        if isinstance(reply, NoScriptError):
            call = batch[i]
            if not isinstance(call, ScriptCall):  # only script calls meet NOSCRIPT
                raise TypeError(f"NOSCRIPT for a request that is no script call: {call!r}")
            if call.script.name not in loads:
                loads[call.script.name] = len(requests)
                requests.append(Command("SCRIPT LOAD", (call.script.source,)))
            load = loads[call.script.name]
        elif function_missing(reply) or fcall_refused(reply):
            call = batch[i]
            if not isinstance(call, ScriptCall) or call.args[0] != "FCALL":
                continue  # another program's function, say: the reply stands
            if fcall_refused(reply):
                functions.refuse(str(reply))
            if functions.refused:
                load = -1
            else:
                if "" not in loads:
                    library = scripts.library()
                    loads[""] = len(requests)
                    requests.append(Command("FUNCTION LOAD", (library.source,)))
                load = loads[""]
        else:
            continue
        positions.append(i)
        calls.append(call)
        load_of.append(load)
    if not positions:
        return None
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


def by_sha(batch: list[Request]) -> list[Request]:
    """`batch` with each ``FCALL`` sent by ``EVALSHA`` instead (`ScriptCall.by_sha`), a
    `Partial` batch still `Partial`."""
    if not any(type(r) is ScriptCall and r.args[0] == "FCALL" for r in batch):
        return batch
    calls = [r.by_sha if type(r) is ScriptCall else r for r in batch]
    return Partial(calls) if isinstance(batch, Partial) else calls


MAX_RELOADS = 2
"""How many reloads one batch may need: a call of the function library whose library could
not be loaded goes by ``EVALSHA``, which may then meet ``NOSCRIPT``."""


class Run(Generic[T]):
    """One plan being executed: `batch` is what to send next (None once the plan is done,
    with `result`), and `feed` takes that batch's replies, error replies in place.

    The plan's own batches go out as it yields them (each ``FCALL`` by ``EVALSHA`` once
    `functions` are refused); when one meets ``NOSCRIPT`` or "Function not found", the run
    first sends the missing scripts' loads and the library's, then those calls again
    (`after_noscript`), before the plan sees any reply; the first error reply left is thrown
    into the plan as a `PresenceError` (which is the operation's error unless the plan
    catches it), or, for a `Partial` batch, every error reply is given to the plan in its
    place. `answered` starts a run whose first batch was already sent (the single-call fast
    path, whose call met an error).
    """

    __slots__ = (
        "_functions",
        "_loaded",
        "_plan",
        "_reload",
        "_reloads",
        "_replies",
        "_sent",
        "batch",
        "result",
    )

    def __init__(
        self,
        plan: Plan[T],
        answered: list[Any] | None = None,
        functions: Functions | None = None,
    ) -> None:
        self._plan = plan
        self._functions = functions if functions is not None else Functions()
        self._reload: ScriptReload | None = None
        self._reloads = 0
        self._replies: list[Any] = []
        self._loaded: list[Any] | None = None
        self.batch: list[Request] | None = None
        self.result: T | None = None
        self._sent: list[Request] | None = None
        self._advance(None)
        if answered is not None:
            self.feed(answered)

    def _next(self, batch: list[Request] | None) -> None:
        """Send `batch` (the plan's) next."""
        if batch is not None and self._functions.refused:
            batch = by_sha(batch)
        self.batch = self._sent = batch
        self._reloads = 0

    def _advance(self, replies: list[Any] | None) -> None:
        try:
            batch = self._plan.send(replies)  # type: ignore[arg-type]
        except StopIteration as done:
            batch, self.result = None, done.value
        self._next(batch)

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
            batch = self._plan.throw(error)
        except StopIteration as done:
            batch, self.result = None, done.value
        self._next(batch)

    def feed(self, replies: list[Any]) -> None:
        """Take the replies to `batch`; `batch` becomes what to send next."""
        reload = self._reload
        if reload is None:
            self._replied(replies)
        elif self._loaded is None:
            self._loaded = replies
            self.batch = reload.resend(replies, self._functions)
        else:
            merged = reload.merge(self._replies, self._loaded, replies)
            sent = list(self._sent or [])
            for position, call in zip(reload.positions, self.batch or [], strict=True):
                sent[position] = call  # as sent again: by EVALSHA, maybe
            self._sent = Partial(sent) if isinstance(self._sent, Partial) else sent
            self._reload = self._loaded = None
            self._replied(merged)

    def _replied(self, replies: list[Any]) -> None:
        """The replies to the batch as sent (`_sent`): a reload first if they call for one
        (at most MAX_RELOADS for one batch), else the plan gets them."""
        reload = None
        if self._reloads < MAX_RELOADS:
            reload = after_noscript(self._sent or [], replies, self._functions)
        if reload is None:
            self._answer(replies)
            return
        self._reloads += 1
        self._reload, self._replies = reload, replies
        if reload.loads:
            self.batch = reload.loads
        else:  # FCALL refused: by EVALSHA at once
            self._loaded = []
            self.batch = reload.resend([], self._functions)

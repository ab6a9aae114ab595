"""The requests a plan yields (`ScriptCall`, `Command`, batches of them) and the plan
protocol itself (`Plan`, `Partial`, `Single`, `alongside`, `RowStream`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from types import TracebackType
from typing import Any, NamedTuple, TypeVar

from ..keys import GroupKeys
from ..model import ConsumerPresence, Skipped, gc_paused
from ..scripts import Script
from ..validation import ConsumerKey

T = TypeVar("T")


class ScriptCall(NamedTuple):
    """One call of one of the package's scripts, ready to send: `args` is the whole command,
    from ``EVALSHA`` (or ``EVALSHA_RO``, which a replica runs) and the SHA of `script` on,
    or from ``FCALL`` and its function's name on (a script of the function library). After
    ``NOSCRIPT`` an executor loads ``script.source`` and sends the same call again; after
    "Function not found" it loads the library, and where functions are refused it sends the
    call by ``EVALSHA`` instead (`by_sha`; redis_presence._executor)."""

    script: Script
    args: tuple[Any, ...]

    @property
    def first_key(self) -> Any:
        """The call's first key (every package script takes at least one)."""
        return self.args[3]

    @property
    def by_sha(self) -> ScriptCall:
        """The same call by ``EVALSHA`` (the same KEYS, ARGV and reply)."""
        if self.args[0] != "FCALL":
            return self
        return ScriptCall(self.script, ("EVALSHA", self.script.sha, *self.args[2:]))


class Command(NamedTuple):
    """One plain Redis command. On a cluster it goes to the node holding `node_key` when
    given, else the node holding its first argument (every keyed command here names its key
    first); a keyless command without `node_key` goes to any node."""

    name: str
    args: tuple[str | bytes | int, ...] = ()
    node_key: str | None = None


Request = ScriptCall | Command

Plan = Generator[list[Request], list[Any], T]
"""An operation: yields batches of requests, receives their replies, returns the result.

The first error reply of a batch is thrown into the plan as a `PresenceError` (a plan may
catch it; else it is the operation's error), unless the batch is `Partial`."""


class Partial(list[Request]):
    """A batch whose plan takes every request's outcome: an error reply comes back in its
    place as a `PresenceError` value instead of being thrown (a batch split in independent
    calls, where one call's failure must not hide what the others did)."""

    __slots__ = ()


class Single(Generator[list[Request], list[Any], T]):
    """A plan of exactly one script call (the single heartbeat): ``ScriptCall(script, head +
    rest)``. It steps like any plan; an executor may instead send it itself and take
    `then(reply)` as the result, which saves running a generator (and building the
    `ScriptCall`) on the hottest path of all. `head` is what every such call of a group
    shares, the same tuple from call to call while the planner keeps it ready, so an
    executor may prepare it once for all of them; `rest` is what this call adds, and `tail`
    what follows it that many calls share too (the same tuple, so an executor may prepare
    it once as well: a plain beat's capacity, draining and instance token)."""

    __slots__ = ("_sent", "head", "rest", "script", "tail", "then")

    def __init__(
        self,
        script: Script,
        head: tuple[Any, ...],
        rest: tuple[Any, ...],
        then: Callable[[Any], T],
        tail: tuple[Any, ...] = (),
    ) -> None:
        self.script = script
        self.head = head
        self.rest = rest
        self.then = then
        self.tail = tail
        self._sent = False

    @property
    def args(self) -> tuple[Any, ...]:
        """The whole command, from ``EVALSHA`` on."""
        return self.head + self.rest + self.tail

    @property
    def call(self) -> ScriptCall:
        """The plan's one request."""
        return ScriptCall(self.script, self.args)

    def send(self, replies: list[Any] | None) -> list[Request]:
        if not self._sent:
            self._sent = True
            return [self.call]
        if replies is None:
            raise TypeError("a Single plan expects the reply to its call")
        raise StopIteration(self.then(replies[0]))

    def throw(
        self,
        typ: Any,
        val: Any = None,
        tb: TracebackType | None = None,
    ) -> list[Request]:
        raise typ if val is None else val


def alongside(plan: Plan[T], requests: Sequence[Request]) -> Plan[tuple[T, list[Any]]]:
    """`plan` with `requests` sent in its first batch, and their replies: on a standalone
    server one round trip for both (one pipeline), on a cluster one pipeline per node
    (the nodes concurrently in the asyncio registry). A broker reading a Redis Stream
    beats this way: ``alongside(registry.plans.heartbeat(...), [Command("XREADGROUP",
    ...)])``. The requests may run before, after or between the plan's own; an error reply
    to any of them raises like the plan's own."""
    try:
        batch = next(plan)
    except StopIteration as done:
        return done.value, list((yield list(requests)))
    replies = yield [*batch, *requests]
    extra = list(replies[len(batch) :])
    try:
        batch = plan.send(list(replies[: len(batch)]))
        while True:
            batch = plan.send((yield batch))
    except StopIteration as done:
        return done.value, extra


class RowStream(NamedTuple):
    """A streaming read: `plan` appends each group's rows to `groups` as soon as the group
    is complete (its keys and its rows, sorted by consumer, built when they are taken), so a
    driver hands them out after each batch (`handed_out`); groups come in the index's
    order."""

    plan: Plan[None]
    groups: list[tuple[GroupKeys, Iterable[ConsumerPresence]]]
    skipped: list[Skipped]
    """What the read set aside (docs/protocol.md, section 9), complete once `plan` is done."""
    unreadable: dict[ConsumerKey, str] | None = None
    """With metadata: each consumer whose metadata this package did not write, and why (its
    row's `meta` is empty); a driver raises `PresenceMetaError` once every row is out."""

    def handed_out(self) -> Iterator[list[ConsumerPresence]]:
        """The rows of each group completed so far, a group at a time, in order, taking
        each group out of `groups`: its rows are built when it is reached (the collector
        paused meanwhile, not while the caller holds them), so a driver holds one group's
        rows, not those of every group a round trip completed (`iter_snapshot` of 1,000,000
        consumers in groups of 10,000: about 20 groups a round trip)."""
        groups = self.groups
        while groups:
            _, rows = groups.pop(0)
            with gc_paused():
                part = list(rows)
            yield part

"""How a registry's client writes commands, and which of them the registry writes on a
connection itself (`Wire`): the one place that decides when a command is prebuilt.

The plans know no wire format: they yield requests (`ScriptCall`, `Command`, `Single`). A
registry that writes on its client's connections itself (`RegistryBase.sends_prebuilt`: a
standalone client with a connection pool) sends the heartbeats prebuilt, because the client's
own packing of a script call's many arguments costs more in pure Python than the rest of the
call: a single beat (`Single`: its head, the same for every beat of a group, packed once),
each call of a batched heartbeat and of a prune (`PREBUILT_SCRIPTS`); and the plain reads a
scrape sends by the hundred thousand (`PREBUILT_READS`), whose replies the plans take as the
server sends them. Every other request goes through the client as it is.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any

from redis.connection import ConnectionPool
from redis.utils import HIREDIS_AVAILABLE

from .plans import MAX_CACHED_GROUPS, Command, Request, ScriptCall, Single

PREBUILT_SCRIPTS = frozenset(("heartbeat_many", "prune"))
"""The scripts whose calls a registry that writes on its connections sends prebuilt: the
batched heartbeat's (the reporter's path, up to a thousand beats of five arguments a call)
and the prune's (five keys and two arguments for each of its 100 groups: prebuilt, a prune
of 1,000 consumers among 10,000 groups took 0.30 s instead of 0.58 s).
A single beat's call (`Single`) is prebuilt too, its head once per group."""

PREBUILT_READS = frozenset(
    ("ZCARD", "ZCOUNT", "ZRANGEBYSCORE", "ZRANGEBYLEX", "HMGET", "MGET", "EXISTS", "GET", "HLEN")
)
"""The plain commands a registry that writes on its connections sends prebuilt: reads of
many groups (a scrape at 100,000 groups sends 200,000 of them), whose replies the plans
take as the server sends them (no response callback of redis-py's changes them: integers,
bulk strings and arrays of them; a ``WITHSCORES`` reply as the RESP3 pairs or the flat
RESP2 array, which the plans read either way). redis-py's own pipeline costs about a sixth
more client time a command (its packing and reply dispatch in Python)."""


def resp(command: Sequence[Any], codec: tuple[str, str]) -> bytes:
    """A whole command in RESP, as redis-py's own packing writes it (`bulks` of its
    arguments after the array's length). A few times faster than the client's packing in
    pure Python, which matters for a script call carrying a thousand beats (five arguments
    each)."""
    return b"*%d\r\n" % len(command) + bulks(command, codec)


def bulks(args: Iterable[Any], codec: tuple[str, str]) -> bytes:
    """Arguments as RESP bulk strings, one after the other: `str` (encoded with `codec`, the
    client's encoding and its error handler), `int` or `bytes`."""
    encoding, errors = codec
    parts = []
    for arg in args:
        kind = type(arg)
        if kind is str:
            data = arg.encode(encoding, errors)
        elif kind is int:
            data = b"%d" % arg
        elif kind is bytes:
            data = arg
        else:
            raise TypeError(f"cannot pack a {kind.__name__} argument: {arg!r:.40}")
        parts.append(b"$%d\r\n%b\r\n" % (len(data), data))
    return b"".join(parts)


class Wire:
    """The wire format of a registry's client, and which commands the registry writes on a
    connection itself: `codec` (the client's encoding and error handler: how it writes a
    ``str``), how its connections write a whole command (`pack_command` when given, else
    `resp` with `codec`), and, with `prebuilt`, the commands it sends already packed
    (`single`, `batch`).

    It keeps the packed head of each single beat's call, by the identity of the head the
    planner keeps for its group (at most MAX_CACHED_GROUPS; it starts over when full). Shared
    by the registry's operations across threads and tasks, as the planner's caches are
    (`redis_presence.plans.caches`): one dict operation a step, entries immutable and
    written whole, so a race costs packing a head again, never a wrong one.
    """

    __slots__ = ("_codec", "_heads", "_pack", "prebuilt")

    def __init__(
        self,
        codec: tuple[str, str] = ("utf-8", "strict"),
        pack_command: Callable[[tuple[Any, ...]], bytes] | None = None,
        *,
        prebuilt: bool = False,
    ) -> None:
        self.prebuilt = prebuilt
        """Whether the registry writes the heartbeats' calls on its connections itself."""
        self._codec = codec
        self._pack: Callable[[tuple[Any, ...]], bytes] = pack_command or partial(resp, codec=codec)
        # id of a head -> (the head, its RESP with the array's length, that length), or of a
        # tail -> (the tail, its RESP, 0): each is kept, so its id is not reused.
        self._heads: dict[int, tuple[tuple[Any, ...], bytes, int]] = {}

    def command(self, args: tuple[Any, ...]) -> bytes:
        """A whole command, as the client's connections write it."""
        return self._pack(args)

    def single(self, plan: Single[Any]) -> bytes:
        """A single call's whole command in RESP, its ``str`` arguments encoded as the
        client's encoder does: its head (packed once for every call that shares it), its
        rest, then its tail (packed once too)."""
        head, tail = plan.head, plan.tail
        size = len(head) + len(plan.rest) + len(tail)
        kept = self._heads.get(id(head))
        if kept is None or kept[0] is not head or kept[2] != size:
            if len(self._heads) >= MAX_CACHED_GROUPS:
                self._heads.clear()
            packed = b"*%d\r\n" % size + bulks(head, self._codec)
            kept = self._heads[id(head)] = (head, packed, size)
        if not tail:
            return kept[1] + bulks(plan.rest, self._codec)
        after = self._heads.get(id(tail))
        if after is None or after[0] is not tail:
            after = self._heads[id(tail)] = (tail, bulks(tail, self._codec), 0)
        return kept[1] + bulks(plan.rest, self._codec) + after[1]

    def call(self, request: Request) -> bytes | None:
        """`request` as the client writes it when it is sent prebuilt (a call of
        `PREBUILT_SCRIPTS` or a command of `PREBUILT_READS`, on a registry that writes on
        its connections); else None."""
        if not self.prebuilt:
            return None
        if type(request) is ScriptCall and request.script.name in PREBUILT_SCRIPTS:
            return self._pack(request.args)
        if type(request) is Command and request.name in PREBUILT_READS:
            return self._pack((request.name, *request.args))
        return None

    def batch(self, batch: Sequence[Request]) -> bytes | None:
        """The batch as one write, when every request of it is sent prebuilt (`call`); else
        None (it goes as a pipeline of redis-py's)."""
        if not self.prebuilt:
            return None
        packed = [self.call(request) for request in batch]
        if any(part is None for part in packed):
            return None
        return b"".join(packed)  # type: ignore[arg-type]  # no None left


def hiredis_packer(client: Any) -> Callable[[tuple[Any, ...]], bytes] | None:
    """``hiredis.pack_command`` when `client`'s connections write commands with it, else
    None. A sync redis-py client packs with hiredis whenever hiredis is available and its
    pool was given no ``command_packer`` of its own (a ``str`` goes as UTF-8, whatever the
    client's encoder says); a prebuilt call is then the very bytes the client would write,
    and written in C, about 2.7 times faster than `resp`."""
    pool = getattr(client, "connection_pool", None)
    if not HIREDIS_AVAILABLE or not isinstance(pool, ConnectionPool):
        return None  # (an asyncio client packs in Python with its encoder, always)
    if pool.connection_kwargs.get("command_packer") is not None:
        return None
    pack: Callable[[tuple[Any, ...]], bytes] = importlib.import_module("hiredis").pack_command
    return pack

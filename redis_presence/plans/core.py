"""What every job of the planner shares: its `Scope` (prefix, limits, clock; the script
calls and their KEYS), the `Job` base that holds it, and the small decoders of replies
more than one job reads.
"""

from __future__ import annotations

import re
import time
import warnings
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any, NamedTuple, TypeVar

from ..beats import TOKEN
from ..errors import (
    PresenceDataError,
    PresenceDataWarning,
    PresenceError,
    PresenceProtocolError,
    PresenceReadOnlyError,
    refusal,
)
from ..events import DEFAULT_EVENTS_KEPT, PresenceEvent
from ..keys import PROTOCOL_MODES, PROTOCOL_VERSION, GroupKeys, Keyspace, setting_digits
from ..model import DEFAULT_MAX_FUTURE_MS, Skipped
from ..replies import server_now_ns
from ..scripts import script
from ..validation import check_instance, check_max_future_ms, check_ttl_ms
from .limits import Limits
from .requests import Command, Plan, ScriptCall

T = TypeVar("T")


def _none(reply: Any) -> None:
    return None


def _now_arg(now_ns: int | None) -> str:
    """How scripts receive the instant: decimal nanoseconds, or '' for the server clock."""
    return "" if now_ns is None else str(now_ns)


_queue = itemgetter(0)


TtlSource = str
"""Where a shared TTL comes from: "group", "prefix" or "default"."""


def _unique(skipped: list[Skipped]) -> tuple[Skipped, ...]:
    """What a read set aside, once per key and consumer (the first reason found for it), in
    the protocol's order: by key, then consumer (a whole group first), in code-point order
    (docs/protocol.md, section 9), whatever order the read found them in."""
    once = {(item.key, item.consumer): item for item in reversed(skipped)}
    return tuple(
        once[at] for at in sorted(once, key=lambda at: (at[0], at[1] is not None, at[1] or ""))
    )


def _report(skipped: list[Skipped]) -> None:
    """One `PresenceDataWarning` for each key a read set aside: the whole group, or the
    consumers of it it set aside (how many, and the first one's reason)."""
    whole: dict[str, Skipped] = {}
    rows: dict[str, list[Skipped]] = {}
    found = _unique(skipped)
    for item in found:
        if item.consumer is None:
            whole.setdefault(item.key, item)
        else:
            rows.setdefault(item.key, []).append(item)
    for key in dict.fromkeys(item.key for item in found):  # in `_unique`'s order
        if key in whole:
            said = whole[key].reason
        else:
            n = len(rows[key])
            consumers = "1 consumer" if n == 1 else f"{n} consumers"
            said = f"{consumers}, read the group's others: {rows[key][0].reason}"
        warnings.warn(PresenceDataWarning(f"redis-presence set aside {key}: {said}"), stacklevel=2)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def heartbeat_of(event: PresenceEvent) -> int:
    """The last heartbeat a derived event carries (it always carries one)."""
    return event.last_heartbeat_ns or 0


class Spoilt(NamedTuple):
    """A shared setting this package cannot read (a value or a key type it did not write):
    why, kept by the cache of settings as a value is, raised afresh where it is needed."""

    reason: str

    def error(self) -> PresenceDataError:
        return PresenceDataError(self.reason)


Setting = int | Spoilt | None
"""A shared setting as read: the stored ms, Spoilt, or None (nothing stored)."""


class _Refusal(NamedTuple):
    """What a script left unwritten: a whole group (`consumer` None) or one consumer of it."""

    group: int
    consumer: str | None
    error: PresenceError


def _refusals(flat: Sequence[Any]) -> list[_Refusal]:
    """A script's refusals, ``(group number, consumer or '', why)`` flat."""
    return [
        _Refusal(int(flat[i]), _text(flat[i + 1]) or None, refusal(_text(flat[i + 2])))
        for i in range(0, len(flat) - 2, 3)
    ]


def _quoted(text: str) -> str:
    """`text` in double quotes, control characters, quotes and backslashes as ``\\xHH``
    (``quoted`` in lua/lib.lua, so both spell a refusal alike)."""
    return '"' + re.sub(r'[\x00-\x1f\x7f"\\]', lambda m: f"\\x{ord(m[0]):02x}", text) + '"'


def _check_protocol(key: str, reply: Any) -> None:
    """Refuse a prefix whose ``P:protocol`` names a version other than PROTOCOL_MODES (none
    yet is fine: a reader of a prefix no writer claimed; ``"1"`` is a prefix in mode 1), in
    the words the scripts use (``check_protocol`` in lua/lib.lua)."""
    if reply is not None and _text(reply) not in PROTOCOL_MODES:
        raise PresenceProtocolError(
            f"{key} says this prefix was written by protocol version "
            f"{_quoted(_text(reply)[:40])}; this package speaks version {PROTOCOL_VERSION} "
            "(docs/protocol.md)"
        )


def _stored_ttl(key: str, reply: Any, what: str = "a TTL") -> int | None:
    """A stored shared TTL or progress budget (`what`; None when none is stored); anything
    else is a data error."""
    if reply is None:
        return None
    try:
        return check_ttl_ms(setting_digits(reply))
    except (TypeError, ValueError):
        raise PresenceDataError(
            f"{key} holds {what} this package did not write: {reply!r:.40}"
        ) from None


class Scope:
    """What every job of one planner shares and never changes: its keys (`Keyspace`), whether
    it plans for a cluster, whether it refuses writes, its `Limits`, how many events each log
    keeps, the clock guard and the clock (`Planner` documents them); and the steps every job
    takes with them, and the instance token its beats carry. Set once when built, so shared
    by every plan on any thread or task."""

    __slots__ = (
        "clock",
        "clustered",
        "events_kept",
        "guard",
        "instance",
        "keys",
        "limits",
        "max_future_ms",
        "read_only",
    )

    def __init__(
        self,
        prefix: str = "presence",
        *,
        clustered: bool = False,
        read_only: bool = False,
        limits: Limits = Limits(),  # noqa: B008 (an immutable tuple)
        events_kept: int = DEFAULT_EVENTS_KEPT,
        max_future_ms: int | None = DEFAULT_MAX_FUTURE_MS,
        clock: Callable[[], int] = time.monotonic_ns,
        instance: str | None = None,
    ) -> None:
        if not isinstance(read_only, bool):
            raise TypeError(f"read_only must be a bool, got {type(read_only).__name__}")
        if not isinstance(limits, Limits) or min(limits) < 1:
            raise ValueError(f"limits must be a Limits of positive ints, got {limits!r}")
        if type(events_kept) is not int or events_kept < 1:
            raise ValueError(f"events_kept must be a positive int, got {events_kept!r}")
        self.keys = Keyspace(prefix)
        self.clustered = clustered
        self.read_only = read_only
        self.limits = limits
        self.events_kept = events_kept
        self.max_future_ms = check_max_future_ms(max_future_ms)
        self.guard: int | str = "" if self.max_future_ms is None else self.max_future_ms
        """The clock guard as the scripts take it ('': none)."""
        self.clock = clock
        """Monotonic nanoseconds: how long what a planner read is trusted."""
        self.instance = None if instance is None else check_instance(instance)
        """The instance token every beat carries; None: this process's (`token`)."""

    @property
    def prefix(self) -> str:
        """The key prefix; planners with different prefixes never touch each other's keys."""
        return self.keys.prefix

    def token(self) -> str:
        """The instance token of a beat now: `instance`, else `process_instance` (drawn
        again after a fork, so a registry a forked worker inherits beats as another)."""
        return self.tokens[0]

    @property
    def tokens(self) -> list[str]:
        """A list whose only item is `token` now (the hot path reads ``tokens[0]``): for no
        given `instance`, the process's own (`redis_presence.beats.TOKEN`, refilled in a
        forked child)."""
        return [self.instance] if self.instance else TOKEN

    def writable(self, operation: str) -> None:
        """Refuse `operation` (a write) when this scope is read-only."""
        if self.read_only:
            raise PresenceReadOnlyError(
                f"{operation} writes, but this registry is read-only (read_only=True); "
                "use a registry on the primary"
            )

    @staticmethod
    def call(name: str, keys: Sequence[str], args: Sequence[Any]) -> ScriptCall:
        """A call of ``lua/<name>.lua`` (only writes use scripts): by ``FCALL`` for a script
        of the function library, else by ``EVALSHA``."""
        found = script(name)
        return ScriptCall(found, (*found.command, len(keys), *keys, *args))

    def write_keys(self, groups: Sequence[GroupKeys]) -> list[str]:
        """The KEYS of a script: each group's sorted set, hash, index mark, event log and
        hash of metadata (``group_keys(g)`` and ``meta_key(g)`` in lua/lib.lua); then, on a
        standalone server only, the index of groups, the index of event logs, the epoch
        marker, the protocol version (which the script checks before it writes, and whose
        mode it writes in) and the fleet indexes ``P:newest`` and ``P:oldest``; a script runs
        on a cluster iff it gets no index (``INDEX`` in lua/lib.lua: ``#KEYS % 5 == 1``)."""
        keys = [k for gk in groups for k in (gk.hb, gk.data, gk.mark, gk.events, gk.meta)]
        if not self.clustered:
            k = self.keys
            keys += (k.groups, k.events, k.epoch, k.protocol, k.newest, k.oldest)
        return keys

    def now(self, now_ns: int | None) -> Plan[int]:
        """`now_ns`, or the server clock (on a cluster, the clock of the index's node)."""
        if now_ns is not None:
            return now_ns
        (reply,) = yield [Command("TIME", node_key=self.keys.groups)]
        return server_now_ns(*reply)


class Job:
    """What every job class of the planner holds: its `Scope`, with the names its plans
    read most (`keys`, `limits`, `clustered`) at hand. A job holds no state of its own: what
    its plans share lives in the caches it is given (`redis_presence.plans.caches`)."""

    __slots__ = ("clustered", "keys", "limits", "scope")

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.keys = scope.keys
        self.limits = scope.limits
        self.clustered = scope.clustered

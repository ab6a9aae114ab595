"""What every job of the planner shares: its state (`PlannerCore`), the script calls and
their KEYS, the clock, and the small decoders of replies more than one job reads.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any, NamedTuple, TypeVar

from ..errors import (
    PresenceDataError,
    PresenceDataWarning,
    PresenceError,
    PresenceProtocolError,
    PresenceReadOnlyError,
    refusal,
)
from ..events import DEFAULT_EVENTS_KEPT, PresenceEvent
from ..keys import PROTOCOL_VERSION, GroupKeys, Keyspace
from ..model import DEFAULT_MAX_FUTURE_MS, Skipped
from ..replies import server_now_ns
from ..scripts import script
from ..validation import check_max_future_ms, check_ttl_ms
from .limits import Limits
from .requests import Command, Packing, Plan, ScriptCall

T = TypeVar("T")


def _none(reply: Any) -> None:
    return None


def _now_arg(now_ns: int | None) -> str:
    """How scripts receive the instant: decimal nanoseconds, or '' for the server clock."""
    return "" if now_ns is None else str(now_ns)


def _same(value: T) -> T:
    return value


_queue = itemgetter(0)


_BeatArgs = tuple[tuple[Any, ...], tuple[Any, ...], bytes | None, int]
"""A group's prebuilt single-beat call: head, tail, RESP head, and until when (monotonic
ns) its TTL may be trusted."""

TtlSource = str
"""Where a shared TTL comes from: "group", "prefix" or "default"."""


def _unique(skipped: list[Skipped]) -> tuple[Skipped, ...]:
    """What a read set aside, once per key (the first reason found for it)."""
    return tuple({item.key: item for item in reversed(skipped)}.values())[::-1]


def _report(skipped: list[Skipped]) -> None:
    """One `PresenceDataWarning` for each key a read set aside."""
    for item in _unique(skipped):
        warnings.warn(
            PresenceDataWarning(f"redis-presence set aside {item.key}: {item.reason}"),
            stacklevel=2,
        )


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def heartbeat_of(event: PresenceEvent) -> int:
    """The last heartbeat a derived event carries (it always carries one)."""
    return event.last_heartbeat_ns or 0


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


def _check_protocol(key: str, reply: Any) -> None:
    """Refuse a prefix whose ``P:protocol`` names another version (none yet is fine: a
    reader of a prefix no writer of this release claimed)."""
    if reply is not None and _text(reply) != PROTOCOL_VERSION:
        raise PresenceProtocolError(
            f"{key} says this prefix speaks protocol version {_text(reply)!r:.40}; this "
            f"package speaks version {PROTOCOL_VERSION} (docs/protocol.md)"
        )


def _stored_ttl(key: str, reply: Any) -> int | None:
    """A stored shared TTL (None when none is stored); anything else is a data error."""
    if reply is None:
        return None
    try:
        return check_ttl_ms(int(reply))
    except (TypeError, ValueError):
        raise PresenceDataError(
            f"{key} holds a TTL this package did not write: {reply!r:.40}"
        ) from None


class PlannerCore:
    """The planner's state and the steps every job shares (`Planner` documents the
    arguments)."""

    __slots__ = (
        "_beat_calls",
        "_beat_script",
        "_claimed",
        "_clock",
        "_encode",
        "_guard",
        "_packed",
        "_protocol_at",
        "_stucks",
        "_ttls",
        "_wire",
        "clustered",
        "events_kept",
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
        wire: Packing | None = None,
        packed: bool = False,
        limits: Limits = Limits(),  # noqa: B008 (an immutable tuple)
        events_kept: int = DEFAULT_EVENTS_KEPT,
        max_future_ms: int | None = DEFAULT_MAX_FUTURE_MS,
        clock: Callable[[], int] = time.monotonic_ns,
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
        self._guard: int | str = "" if self.max_future_ms is None else self.max_future_ms
        self._clock = clock
        self._encode: Callable[[Any], Any] = wire.encode if wire is not None else _same
        self._wire = wire
        self._packed = packed and wire is not None and not clustered
        self._beat_calls: dict[tuple[str, str], _BeatArgs] = {}
        self._beat_script = script("heartbeat")
        # Shared TTLs read from Redis: None (the prefix's) or a group's hash key -> (the
        # stored ms, None when none is stored; when it was read, monotonic ns).
        self._ttls: dict[str | None, tuple[int | None, int]] = {}
        # The shared progress budgets, read with the TTLs: (the stored ms or None, when).
        self._stucks: dict[str | None, tuple[int | None, int]] = {}
        # When this planner last checked ``P:protocol`` (monotonic ns; None: never).
        self._protocol_at: int | None = None
        self._claimed = False  # whether a beat of this planner claimed it (SET NX)

    @property
    def prefix(self) -> str:
        """The key prefix; planners with different prefixes never touch each other's keys."""
        return self.keys.prefix

    def _writable(self, operation: str) -> None:
        if self.read_only:
            raise PresenceReadOnlyError(
                f"{operation} writes, but this registry is read-only (read_only=True); "
                "use a registry on the primary"
            )

    def _call(
        self, name: str, keys: Sequence[str], args: Sequence[Any], *, pack: bool = False
    ) -> ScriptCall:
        """A call of ``lua/<name>.lua`` (only writes use scripts); with `pack`, carrying its
        RESP too (`ScriptCall.packed`)."""
        found = script(name)
        command = ("EVALSHA", found.sha, len(keys), *keys, *args)
        wire = self._wire
        return ScriptCall(found, command, wire.command(command) if pack and wire else None)

    def _write_keys(self, groups: Sequence[GroupKeys], *, meta: bool = False) -> list[str]:
        """The KEYS of a script: each group's sorted set, hash, index mark and event log
        (``group_keys(g)`` in lua/lib.lua) and, with `meta` (the scripts that call
        ``meta_layout()``), its hash of metadata; then, on a standalone server only, the
        index of groups and the index of event logs; a script runs on a cluster iff it gets
        no index (``INDEX`` in lua/lib.lua)."""
        if meta:
            keys = [k for gk in groups for k in (gk.hb, gk.data, gk.mark, gk.events, gk.meta)]
        else:
            keys = [key for gk in groups for key in (gk.hb, gk.data, gk.mark, gk.events)]
        if not self.clustered:
            keys += (self.keys.groups, self.keys.events, self.keys.epoch)
        return keys

    def clock_ns(self) -> Plan[int]:
        """The clock every read uses when its ``now_ns`` is None: the server's ``TIME`` (on
        a cluster, that of the index's node), in nanoseconds."""
        return (yield from self._now(None))

    def epoch(self) -> Plan[str | None]:
        """The epoch marker Redis holds now (None: none yet), as `changes` reads it: two reads
        under different markers read different data (Redis lost or replaced its data in
        between). Compared for equality only."""
        (marker,) = yield [Command("GET", (self.keys.epoch,))]
        return None if marker is None else _text(marker)

    def _now(self, now_ns: int | None) -> Plan[int]:
        """`now_ns`, or the server clock (on a cluster, the clock of the index's node)."""
        if now_ns is not None:
            return now_ns
        (reply,) = yield [Command("TIME", node_key=self.keys.groups)]
        return server_now_ns(*reply)

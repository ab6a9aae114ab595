"""The state a planner's plans share, each piece with one owner: what the planner read of its
prefix's shared keys (`SettingsCache`: the shared TTLs and progress budgets, the protocol
version) and the single-beat calls it keeps ready (`BeatCache`).

The rule for threads and tasks, the same for both. A planner is shared by every plan of its
registry, which may run at once on several threads (a sync registry shared across threads)
or asyncio tasks, so each cache is too, and takes no lock:

- every method is one step that never yields and does no I/O: a plan asks a cache, sends
  its requests, and hands their replies back to it in another step;
- an entry is an immutable tuple, written whole and never changed in place, and the
  mappings are never iterated; each entry carries when it was read, so entries are
  independent of each other;
- so any other step (another plan's write, or an emptying when the cache is full) may come
  between two of a method's reads or between two steps of a plan: each method treats an
  entry gone in between as never read (it reads it again), and a plan goes on with what it
  saw and read itself (`SharedAsks.seen`), never with a reference into the cache.

Dict operations are atomic in CPython (one bytecode under the GIL, a per-object lock in
free-threaded builds), so two plans racing may both read a setting again (a lost update:
one more ``GET``), never see a torn entry or fail on a missing one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from ..errors import PresenceDataError, PresenceError
from ..keys import GroupKeys, Keyspace, protocol_mode
from ..model import NS_PER_MS
from .core import Setting, Spoilt, _check_protocol, _stored_ttl
from .limits import MAX_CACHED_GROUPS, MAX_GROUPS_PER_CALL, TTL_CACHE_MS
from .requests import Command, Plan, Request

_WHAT = {"ttl": "a TTL", "stuck": "a progress budget"}
"""How a data error names each kind of shared setting."""

MAX_KEYS_TOGETHER = MAX_GROUPS_PER_CALL
"""Most keys of shared settings one ``MGET`` or ``EXISTS`` reads (each a group's, or the
prefix's): no more groups than an index page."""

Entry = tuple[Setting, int]
"""A shared setting as read (`Setting`), and when (monotonic ns)."""


def _setting(key: str, reply: Any, kind: str) -> Setting:
    """A stored setting as the cache keeps it: the ms, None (nothing stored), or `Spoilt`
    (a value, or a key type, this package did not write)."""
    if isinstance(reply, PresenceDataError):  # a key of another type (WRONGTYPE)
        return Spoilt(f"{key} holds another type of data than {_WHAT[kind]}: {reply}")
    try:
        return _stored_ttl(key, reply, _WHAT[kind])
    except PresenceDataError as error:
        return Spoilt(str(error))


class SharedAsks(NamedTuple):
    """The reads of shared settings a plan has to send (`SettingsCache.asks`)."""

    requests: tuple[Request, ...]
    protocol: bool
    """Whether the first request reads ``P:protocol``."""
    asks: list[tuple[str, str | None, str]]
    """Each other request's kind (``"ttl"``, ``"stuck"``), member (None: the prefix's) and
    key."""
    seen: dict[str, dict[str | None, Entry]]
    """What the plan goes on with, by kind: the entries that were fresh when it asked, then
    its replies (`SettingsCache.take`). Its own, not the cache: another plan may empty the
    cache while this one waits on Redis."""
    together: bool = False
    """Whether the settings' keys are read by an ``MGET`` and an ``EXISTS`` of up to
    MAX_KEYS_TOGETHER keys each (after the protocol's ``GET``) instead of a ``GET`` each:
    `spread` turns their replies into a reply per key."""


class SettingsCache:
    """What one planner read of its prefix's shared keys, and for how long it trusts it
    (TTL_CACHE_MS): the shared TTL and progress budget of the prefix and of each group it
    read (at most MAX_CACHED_GROUPS groups; it starts over when full), when it last checked
    ``P:protocol``, and whether one of its beats claimed it. `asks` says what to read again
    and `take` keeps the replies. Shared by its planner's plans across threads and tasks:
    the module's rule."""

    __slots__ = (
        "_apart",
        "_claimed",
        "_clock",
        "_keys",
        "_mode",
        "_protocol_at",
        "_stucks",
        "_ttls",
    )

    def __init__(self, keys: Keyspace, clock: Callable[[], int]) -> None:
        self._keys = keys
        self._clock = clock
        # None (the prefix's) or a group's hash key -> (the stored ms, None when none is
        # stored, Spoilt when it cannot be read; when it was read, monotonic ns).
        self._ttls: dict[str | None, Entry] = {}
        self._stucks: dict[str | None, Entry] = {}
        # When this planner last checked ``P:protocol`` (monotonic ns; None: never).
        self._protocol_at: int | None = None
        self._mode = "2"  # the mode ``P:protocol`` put the prefix in when last read
        self._claimed = False  # whether a beat of this planner claimed it (SET NX)
        self._apart = False  # whether MGET or EXISTS was refused: a GET a key instead

    def __len__(self) -> int:
        """How many settings it holds (of the prefix and of groups, both kinds)."""
        return len(self._ttls) + len(self._stucks)

    def forget(self) -> None:
        """Trust nothing read so far (after this planner stored a setting): the next plans
        read the settings again."""
        self._ttls.clear()
        self._stucks.clear()

    def asks(
        self,
        groups: Sequence[GroupKeys],
        *,
        ttls: bool = True,
        stucks: bool = False,
        together: bool = False,
    ) -> SharedAsks:
        """The reads of the shared TTLs (and with `stucks` the progress budgets) of the
        prefix and of each of `groups` not read in the last TTL_CACHE_MS, with the protocol
        version when it is due (none when all is fresh): a plan sends them, alone or with
        requests of its own, and hands their replies to `take`. With `together` (keys of
        many slots in one command: a standalone server only) the keys are read by an
        ``MGET`` and an ``EXISTS`` of up to MAX_KEYS_TOGETHER keys each
        (`SharedAsks.together`; `spread` first)."""
        limit = self._clock() - TTL_CACHE_MS * NS_PER_MS
        caches = [(self._ttls, "ttl")] if ttls else []
        if stucks:
            caches.append((self._stucks, "stuck"))
        if len(self._ttls) + len(self._stucks) + len(groups) > MAX_CACHED_GROUPS:
            self.forget()  # start over, as the single-beat cache does
        asks: list[tuple[str, str | None, str]] = []
        seen: dict[str, dict[str | None, Entry]] = {}
        places: dict[str | None, Any] = {None: self._keys, **{gk.data: gk for gk in groups}}
        for cache, kind in caches:
            fresh = seen[kind] = {}
            for member, place in places.items():
                entry = cache.get(member)
                if entry is None or entry[1] < limit:
                    asks.append((kind, member, getattr(place, kind)))
                else:
                    fresh[member] = entry
        protocol: list[Request] = []
        if self._protocol_at is None or self._protocol_at < limit:
            # The protocol version, with the shared settings (docs/protocol.md): every read
            # of the settings checks it (and a heartbeat claims it, `IndexPlans.claim`).
            protocol.append(Command("GET", (self._keys.protocol,)))
        keys = [key for _, _, key in asks]
        if together and keys and not self._apart:
            parts = [
                tuple(keys[i : i + MAX_KEYS_TOGETHER])
                for i in range(0, len(keys), MAX_KEYS_TOGETHER)
            ]
            reads: tuple[Request, ...] = (
                *(Command("MGET", part) for part in parts),
                *(Command("EXISTS", part) for part in parts),
            )
        else:
            reads, together = tuple(Command("GET", (key,)) for key in keys), False
        return SharedAsks((*protocol, *reads), bool(protocol), asks, seen, together)

    def spread(self, asks: SharedAsks, replies: Sequence[Any]) -> tuple[list[Any], list[int]]:
        """The replies to `asks` as `take` wants them, one per key (those of
        ``asks.together``'s ``MGET``), and the places of the keys to read again by a ``GET``
        each (the caller puts those replies in place): the keys ``MGET`` answered with
        nothing while ``EXISTS`` counted more keys than it returned values (a key of
        another type among them, which only its own ``GET`` tells from a key that is not
        there), or every key when either command was refused (a role of ``+get`` without
        ``+mget +exists``: this planner reads a ``GET`` a key from then on)."""
        if not asks.together:
            return list(replies), []
        skip = 1 if asks.protocol else 0
        head = list(replies[:skip])
        n = (len(replies) - skip) // 2
        values, exists = replies[skip : skip + n], replies[skip + n :]
        if any(isinstance(reply, Exception) for reply in (*values, *exists)):
            self._apart = True
            return [*head, *([None] * len(asks.asks))], list(range(skip, skip + len(asks.asks)))
        found: list[Any] = []
        doubt: list[int] = []
        for part, count in zip(values, exists, strict=True):
            if int(count) != sum(value is not None for value in part):
                doubt += (skip + len(found) + i for i, value in enumerate(part) if value is None)
            found += part
        return [*head, *found], doubt

    def take(self, asks: SharedAsks, replies: Sequence[Any], only: set[str] | None = None) -> None:
        """Keep the replies to `asks` (with `only`, of those groups' members and the
        prefix's only: what the plan went on to read), in the cache and in `asks.seen`. A
        setting this package cannot read (a value, or a key of another type) is kept as
        `Spoilt`, for the plan to raise or set its group aside; any other error reply among
        them raises, and so does another protocol version."""
        read_at = self._clock()
        skip = 1 if asks.protocol else 0
        wanted = None if only is None else {None, *only}
        kept = [
            reply
            for i, reply in enumerate(replies)
            if i < skip or wanted is None or asks.asks[i - skip][1] in wanted
        ]
        for i, reply in enumerate(kept):  # error replies come back in place (`Partial`)
            if isinstance(reply, PresenceError):
                if i >= skip and isinstance(reply, PresenceDataError):
                    continue  # a setting's key of another type: Spoilt, below
                raise reply
        if asks.protocol:
            self._took_protocol(replies[0], read_at)
        for (kind, member, key), reply in zip(asks.asks, replies[skip:], strict=True):
            if only is None or member is None or member in only:
                cache = self._ttls if kind == "ttl" else self._stucks
                cache[member] = asks.seen[kind][member] = (_setting(key, reply, kind), read_at)

    def trusted_until(self, gk: GroupKeys) -> int:
        """Until when (monotonic ns) the TTL this planner read for `gk` may be trusted: 0
        when it was emptied since (by another plan), so the next beat reads it again."""
        prefix, own = self._ttls.get(None), self._ttls.get(gk.data)
        if prefix is None or own is None:
            return 0
        return min(prefix[1], own[1]) + TTL_CACHE_MS * NS_PER_MS

    def protocol_asks(self) -> list[Request]:
        """The read of ``P:protocol`` when this planner has not read it for TTL_CACHE_MS
        (else none), for a plan that sends no read of the shared settings (which carry it):
        hand its replies to `protocol_took`."""
        limit = self._clock() - TTL_CACHE_MS * NS_PER_MS
        if self._protocol_at is None or self._protocol_at < limit:
            return [Command("GET", (self._keys.protocol,))]
        return []

    def protocol_took(self, replies: Sequence[Any]) -> None:
        """Check the replies to `protocol_asks` (none: nothing was asked)."""
        if replies:
            self._took_protocol(replies[0], self._clock())

    def _took_protocol(self, reply: Any, read_at: int) -> None:
        """Check ``P:protocol`` as read at `read_at`, and keep the mode it says."""
        _check_protocol(self._keys.protocol, reply)
        text = reply.decode() if isinstance(reply, bytes) else reply
        self._mode = protocol_mode(text)
        self._protocol_at = read_at

    @property
    def mode(self) -> str:
        """The prefix's mode (``"1"`` or ``"2"``, `redis_presence.keys.protocol_mode`) as this
        planner last read ``P:protocol`` (``"2"`` before it read it): what a cluster's
        scripts, which cannot read it, are told."""
        return self._mode

    def protocol_checked(self) -> Plan[None]:
        """Refuse a prefix of another protocol version, read when this planner has not read
        it for TTL_CACHE_MS: what a write checks on a cluster, where its script cannot read
        ``P:protocol`` (another slot), and a read that takes no shared setting."""
        asks = self.protocol_asks()
        if asks:
            self.protocol_took((yield asks))

    @property
    def claimed(self) -> bool:
        """Whether a beat of this planner claimed the prefix for this protocol version."""
        return self._claimed

    def claim(self) -> None:
        """Note that a beat of this planner claimed the prefix (``SET NX``)."""
        self._claimed = True


BeatCall = tuple[tuple[Any, ...], tuple[Any, ...], int]
"""A group's single-beat call, kept ready: the command up to the beat (`head`: the script,
KEYS, the TTL, the log's bounds, the clock guard), what follows the beat (`tail`: the mark's
lifetime on a cluster), and until when (monotonic ns) the TTL in it may be trusted."""


class BeatCache:
    """The single-beat calls a planner keeps ready, one per group (`BeatCall`), at most
    MAX_CACHED_GROUPS (it starts over when full; without a lock, each other thread keeping
    a call at the same instant may add one more before the next `keep` starts over): the
    hot path of a heartbeat finds its group's here with one ``get``. Shared by its
    planner's plans across threads and tasks, under the rule of this module."""

    __slots__ = ("_calls", "get")

    def __init__(self) -> None:
        self._calls: dict[tuple[str, str], BeatCall] = {}
        self.get: Callable[[tuple[str, str]], BeatCall | None] = self._calls.get
        """The call kept for ``(queue, group)``, or None."""

    def __len__(self) -> int:
        return len(self._calls)

    def keep(self, queue: str, group: str, call: BeatCall) -> BeatCall:
        """Keep `call` for the group (emptying the cache first when it is full)."""
        if len(self._calls) >= MAX_CACHED_GROUPS:
            self._calls.clear()
        self._calls[(queue, group)] = call
        return call

    def clear(self) -> None:
        """Forget every call (their TTLs are no longer to be trusted)."""
        self._calls.clear()

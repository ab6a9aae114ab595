"""Key layout: the only place where Redis key names are spelled.

For a prefix ``P``, a queue ``Q`` and a group ``G`` (both percent-encoded, see
`encode_name`)::

    P:{Q}:G:hb   zset   consumer -> last heartbeat, whole microseconds (exact as a double)
    P:{Q}:G:c    hash   consumer -> its stored value (STORED_VALUE, below)
    P:{Q}:G:ix   string index mark, on a cluster only; expires after INDEX_MARK_MS
                        (docs/protocol.md, section 14)
    P:{Q}:G:ttl  string the group's shared TTL in ms (`set_ttl(queue=, group=)`), if set
                        (SETTING_VALUE, below, as every shared setting)
    P:{Q}:G:m    hash   consumer -> its metadata (`describe`; META_VALUE, below); a field
                        goes with its consumer (deregister, prune)
    P:{Q}:G:stuck string the group's shared progress budget in ms
                        (`set_stuck_after(queue=, group=)`), if set
    P:{Q}:expect hash   group -> the minimum of active consumers it was declared with
                        (`expect`; MIN_ACTIVE_VALUE, below); outlives every consumer
    P:{Q}:events stream the queue's write-driven events (joined, recovered, left, pruned;
                        in mode 2 also draining, conflict, restarted, drain_requested),
                        capped (``MAXLEN ~``); an entry's fields are EVENT_FIELDS
    P:{Q}:events.copy
                 stream the log's key and EVENTS_COPY_SUFFIX: a scratch copy that exists only
                        inside the one script call whose XADD creates ``P:{Q}:events``
                        (``COPY`` there, then ``RENAME`` back: ``compact_log`` in
                        ``lua/lib.lua``); never left behind. Same hash tag, so same slot
    P:groups     zset   the index: the hash key ``P:{Q}:G:c`` of every group with a
                        tracked consumer, all with score 0, so they sort by name and the
                        groups of one queue are one range (`queue_range`)
    P:events     zset   the event log of every queue that logged an event, scored by the
                        server's clock (ms) when it last logged one (readers take the
                        recent ones; a full prune forgets logs idle for EVENT_LOG_TTL_MS)
    P:{P:events}:epoch
                 string the epoch marker (EPOCH_VALUE): in the slot of ``P:events`` (its
                        hash tag), written once (SET NX) by the first event logged into
                        an empty keyspace; a cursor carries it, so a reader tells data loss
    P:ttl        string the prefix's shared TTL in ms (`set_ttl()`), if set
    P:stuck      string the prefix's shared progress budget in ms (`set_stuck_after()`)
    P:expects    zset   the index of declared groups: the key ``P:{Q}:expect`` of every
                        queue with a declared group, all with score 0 (sorted by name)
    P:protocol   string the protocol version (PROTOCOL_VERSION, docs/protocol.md), written
                        ``SET NX`` by writers and checked by every reader and writer;
                        ``"1"`` keeps a prefix in mode 1 (PROTOCOL_MODES) until
                        ``redis-presence migrate`` sets it to ``"2"``
    P:newest     zset   standalone only: the hash key ``P:{Q}:G:c`` of every indexed group,
                        scored by a lower bound of its newest beat's whole microseconds, at
                        most a quarter of its TTL behind (``ZADD GT`` when a consumer joins
                        or starts a new quarter-TTL window; lowered to the real newest when
                        a consumer leaves or goes back in time); removed where the group
                        leaves ``P:groups``
    P:oldest     zset   standalone only: the same members, scored by a lower bound of the
                        group's oldest beat's microseconds (``ZADD LT`` when a consumer
                        joins or a beat moves one back in time)
    P:ttls       zset   standalone only: the hash key ``P:{Q}:G:c`` of every group with its
                        own shared TTL (``P:{Q}:G:ttl``), scored by that TTL in ms; kept by
                        ``lua/setting.lua`` with the setting (so it outlives the group's
                        consumers, as the setting does) and seeded by ``migrate``. A hint
                        for the fleet readers without a given TTL: its lowest score bounds
                        every group's TTL from below (with ``P:ttl`` or the default)
    P:index      set    the index of release 0.1 ("Q:G" members); only
                        ``redis-presence migrate`` reads it, and empties it

Every key of a queue carries the queue's hash tag ``{Q}``, so each per-queue script
touches one cluster slot. Encoded names hold only ``[A-Za-z0-9_.~%-]``: no ``:``,
braces, glob characters or whitespace, so distinct names never share a key, never
break the hash tag and never leave the prefix (ACL pattern ``~P:*``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import quote, unquote

from ._json import loads_flat
from .errors import PresenceDataError
from .validation import (
    MAX_META_BYTES,
    MAX_META_KEYS,
    MAX_MIN_ACTIVE,
    MAX_NAME_BYTES,
    check_meta,
    check_prefix,
)

PROTOCOL_VERSION = "2"
"""The version of the wire format (docs/protocol.md) this package reads and writes, stored
in ``P:protocol`` (claimed ``SET NX`` after a first beat): a client that finds a version
other than PROTOCOL_MODES refuses the prefix."""

PROTOCOL_MODES = ("1", "2")
"""The values of ``P:protocol`` this package accepts (none stored counts as ``"2"``): in
mode ``"1"`` (a prefix v1 clients still write) the scripts write v1 values, log no v2
event kinds and refuse drain requests, until ``redis-presence migrate`` flips it."""


def protocol_mode(stored: str | None) -> str:
    """The mode a stored ``P:protocol`` (None: none stored) puts a prefix in: ``"1"`` or
    ``"2"`` (the version is checked apart)."""
    return "1" if stored == "1" else "2"


INDEX_MARK_MS = 60_000
"""Lifetime of a group's index mark: how often a live group re-asserts its index entry."""

STORED_VALUE = (
    "registered_ns last_heartbeat_ns lease_count last_progress_ns capacity flags "
    "conflict_ns instance previous"
)
"""The stored value of one consumer (a field of ``P:{Q}:G:c``), version 2: nine fields
separated by single spaces; seven decimal integers (the first beat's and the last beat's
instants in nanoseconds, the lease count, the last progress's instant or 0, the capacity
or 0, the FLAG_DRAINING / FLAG_DRAIN_REQUESTED bits, the instant of the last duplicate
instance or 0) and two instance tokens (INSTANCE_PATTERN, ``-`` none). A version 1 value
(STORED_FIELDS or one more, ``registered last lease [progress]``, what a prefix in mode 1
still holds) is a prefix of it. ``lua/heartbeat.lua``, ``lua/heartbeat_many.lua`` and
``lua/drain.lua`` are its writers; `redis_presence.replies.stored_columns` the only
reader."""

STORED_FIELDS = 3
"""Fields of a version 1 stored value without progress (one more with it)."""
STORED_FIELDS_V2 = 9
"""Fields of a version 2 stored value."""
# FLAG_DRAINING (1: the consumer says it is draining), FLAG_DRAIN_REQUESTED (2: a drain
# was requested and no draining beat took it yet) and NO_INSTANCE ("-": the token a stored
# value holds for none) are spelled in `redis_presence.validation`, which the model imports
# without a driver (this module imports `errors`, which imports redis-py).
STORED_SEPARATOR = " "

META_VALUE = "JSON object of str to str, keys sorted, separators ',' and ':', UTF-8"
"""The stored metadata of one consumer (a field of ``P:{Q}:G:m``): one canonical spelling
per mapping, so a script tells a change by comparing strings (`encode_meta`)."""

EVENT_FIELDS = (
    "k: kind, g: the group's hash key, "
    "'c' + consumer: 'at_ns registered_ns last_heartbeat_ns lease_count', "
    "then in left and pruned entries 'm' + consumer: its metadata (META_VALUE) if it had any, "
    "in conflict and restarted entries 'i' + consumer: 'old_token new_token'"
)
"""One entry of ``P:{Q}:events``: the kind, the group (its hash key, an index member), then
one field per consumer the event is about, valued by four decimal integers; a ``left`` or
``pruned`` entry also keeps the metadata each consumer had when it went (``'m' +
consumer``, its stored value, unless longer than MAX_STORED_META_CHARS: ``log_meta`` in
``lua/lib.lua``), so a consumer's page still says which host, pid and version it was once
it is gone. One script call writes one entry per (kind, group), so a prune of a thousand
consumers is one entry. ``append_event`` in ``lua/lib.lua`` is the only writer;
`redis_presence.events` the only reader (which skips fields it does not know)."""


EVENTS_COPY_SUFFIX = ".copy"
"""What a queue's log key (``P:{Q}:events``) takes to name its scratch copy: the script whose
``XADD`` creates the log copies it there at its used size and renames the copy back in the
same call (``compact_log`` in ``lua/lib.lua``, which spells the suffix too; docs/protocol.md,
section 6). A client in another language may leave the compaction out."""


SETTING_VALUE = "1 to 10**12 ms in ASCII decimal digits"
"""A shared TTL or progress budget (``P:ttl``, ``P:stuck``, a group's ``:ttl``, ``:stuck``):
digits only, so no sign, space or underscore (which a lenient parser would read)."""

_SETTING = re.compile(rb"[0-9]{1,13}")


def setting_digits(value: Any) -> int:
    """The number a stored setting spells in digits (SETTING_VALUE; its range is the
    caller's to check); a `ValueError` for anything else."""
    raw = value.encode() if isinstance(value, str) else value
    if not isinstance(raw, bytes) or _SETTING.fullmatch(raw) is None:
        raise ValueError(f"not decimal digits: {value!r:.40}")
    return int(raw)


MIN_ACTIVE_VALUE = "1 to 1000000 in canonical decimal digits: no sign, no leading zero"
"""A declared minimum (a field of ``P:{Q}:expect``): `expect` writes nothing else, and a
reader sets any other value aside (`decode_min_active`): "0", "02", "+5", " 5", "1_0" are
not minimums, whatever a lenient parser makes of them."""

_MIN_ACTIVE = re.compile(rb"[1-9][0-9]{0,6}")


def decode_min_active(key: str, group: Any, value: Any) -> int:
    """The declared minimum a stored value spells (MIN_ACTIVE_VALUE); anything else is a
    `PresenceDataError` naming `key` and `group`."""
    raw = value.encode() if isinstance(value, str) else value
    if isinstance(raw, bytes) and _MIN_ACTIVE.fullmatch(raw) and int(raw) <= MAX_MIN_ACTIVE:
        return int(raw)
    name = group.decode("utf-8", "replace") if isinstance(group, bytes) else group
    raise PresenceDataError(
        f"{key} field {name!r:.80} holds a minimum this package did not write: {value!r:.40}"
    )


EPOCH_VALUE = "the server's TIME 'seconds.microseconds' and ':' + the stream id of the event"
"""The epoch marker's value on a standalone server (``mark_epoch`` in ``lua/lib.lua``); on
a cluster, a random token of the caller's, written with the event index. Only compared for
equality: a reader never parses it."""


_META_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""``json.dumps(meta, sort_keys=True, separators=(",", ":"), ensure_ascii=False)``, made once
(`json.dumps` makes an encoder a call for arguments other than its defaults)."""


def encode_meta(meta: dict[str, str]) -> str:
    """The stored spelling of a (validated) metadata mapping (META_VALUE)."""
    return _META_ENCODER.encode(meta)


MAX_STORED_META_CHARS = 6 * MAX_META_BYTES + 6 * MAX_META_KEYS + 2
"""The longest stored metadata `encode_meta` makes of a valid mapping (each byte of its
keys and values at most six JSON characters, six more a pair, and the braces): a longer
value is refused unread."""


def decode_meta(key: str, consumer: Any, value: Any) -> dict[str, str]:
    """The mapping a stored metadata value spells, when it is a mapping a client writes
    (META_VALUE): of str to str, within `check_meta`'s bounds, so at most MAX_META_KEYS
    keys (its spelling is not checked). Anything else (another type, an oversized or nested
    document: refused before JSON parsing recurses, 17 keys) is a `PresenceDataError`
    naming `key` and `consumer`."""
    try:
        text = value.decode() if isinstance(value, bytes) else value
        meta = loads_flat(text, opening="{", max_chars=MAX_STORED_META_CHARS)
        if not isinstance(meta, dict) or not all(type(v) is str for v in meta.values()):
            raise ValueError
        # Spelt within 512 bytes without a \u escape (which may spell a lone surrogate),
        # its keys and values are within every bound but these two (the common case,
        # without a check of each one); else they are all checked.
        if (
            len(meta) > MAX_META_KEYS
            or "" in meta
            or len(text.encode()) > MAX_NAME_BYTES
            or "\\u" in text
        ):
            check_meta(meta)
    except (ValueError, TypeError, UnicodeDecodeError, AttributeError):
        name = consumer.decode("utf-8", "replace") if isinstance(consumer, bytes) else consumer
        raise PresenceDataError(
            f"redis-presence key {key} field {name!r:.80} holds metadata this package did "
            f"not write: {value!r:.80}"
        ) from None
    return meta


def encode_name(name: str) -> str:
    """Injective, key-safe spelling of a queue or group name (UTF-8, percent-encoded)."""
    return quote(name, safe="", encoding="utf-8", errors="strict")


def decode_name(encoded: str) -> str:
    """Inverse of `encode_name`."""
    return unquote(encoded, encoding="utf-8", errors="strict")


@dataclass(frozen=True, slots=True)
class GroupKeys:
    """The keys of one (queue, group); `data` is also its member in the index."""

    queue: str
    group: str
    hb: str
    data: str
    mark: str
    ttl: str
    events: str
    meta: str
    stuck: str
    expect: str

    @property
    def member(self) -> str:
        """The group's member in the index (``P:groups``): its hash key."""
        return self.data


@lru_cache(maxsize=16_384)
def _group_keys(prefix: str, queue: str, group: str) -> GroupKeys:
    tag = f"{prefix}:{{{encode_name(queue)}}}"
    base = f"{tag}:{encode_name(group)}"
    return GroupKeys(
        queue,
        group,
        f"{base}:hb",
        f"{base}:c",
        f"{base}:ix",
        f"{base}:ttl",
        f"{tag}:events",
        f"{base}:m",
        f"{base}:stuck",
        f"{tag}:expect",
    )


class Keyspace:
    """Key names under one prefix."""

    __slots__ = (
        "epoch",
        "events",
        "expects",
        "groups",
        "legacy_index",
        "newest",
        "oldest",
        "prefix",
        "protocol",
        "stuck",
        "ttl",
        "ttls",
    )

    def __init__(self, prefix: str) -> None:
        self.prefix = check_prefix(prefix)
        self.groups = f"{prefix}:groups"
        self.events = f"{prefix}:events"
        self.epoch = f"{prefix}:{{{self.events}}}:epoch"  # in the slot of P:events
        self.ttl = f"{prefix}:ttl"
        self.stuck = f"{prefix}:stuck"
        self.expects = f"{prefix}:expects"
        self.legacy_index = f"{prefix}:index"
        self.protocol = f"{prefix}:protocol"
        self.newest = f"{prefix}:newest"
        self.oldest = f"{prefix}:oldest"
        self.ttls = f"{prefix}:ttls"

    def queue_expect(self, queue: str) -> str:
        """The declared groups of one queue (validated name)."""
        return f"{self.prefix}:{{{encode_name(queue)}}}:expect"

    def queue_of_expect(self, key: bytes | str) -> str:
        """The queue whose declared groups `key` holds; a foreign key is a data error."""
        return self._queue_of(key, "expect", f"the index {self.expects}")

    def queue_events(self, queue: str) -> str:
        """The event log of one queue (validated name)."""
        return f"{self.prefix}:{{{encode_name(queue)}}}:events"

    def queue_events_copy(self, queue: str) -> str:
        """The scratch copy of one queue's event log (EVENTS_COPY_SUFFIX), which exists only
        inside a script call."""
        return self.queue_events(queue) + EVENTS_COPY_SUFFIX

    def queue_of_events(self, key: bytes | str) -> str:
        """The queue whose event log `key` is; a foreign key is a data error."""
        return self._queue_of(key, "events", f"the event index {self.events}")

    def _queue_of(self, key: bytes | str, suffix: str, index: str) -> str:
        """The queue of a per-queue key ``P:{Q}:<suffix>`` listed in `index`: exactly the
        key this package would spell for it, else a `PresenceDataError`."""
        text = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
        head, tail = f"{self.prefix}:{{", f"}}:{suffix}"
        try:
            queue = decode_name(text[len(head) : -len(tail)])
        except UnicodeDecodeError:
            queue = ""
        spelled = f"{self.prefix}:{{{encode_name(queue)}}}:{suffix}"
        if not (text.startswith(head) and text.endswith(tail) and queue) or spelled != text:
            raise PresenceDataError(
                f"{index} holds a member this package did not write: {text!r:.80}"
            )
        return queue

    def group(self, queue: str, group: str) -> GroupKeys:
        """Keys of a (queue, group); names must already be validated."""
        return _group_keys(self.prefix, queue, group)

    def queue_range(self, queue: str) -> tuple[str, str]:
        """The ``ZRANGEBYLEX`` bounds of the index members of one queue's groups."""
        tag = f"{self.prefix}:{{{encode_name(queue)}}}:"
        return f"[{tag}", f"({tag[:-1]};"  # ';' follows ':': every member with this start

    def from_member(self, member: bytes | str) -> GroupKeys:
        """Keys of the group an index member names; a foreign member is a data error."""
        text = member.decode("utf-8", "replace") if isinstance(member, bytes) else member
        head = f"{self.prefix}:{{"
        q, sep, rest = text[len(head) :].partition("}:")
        try:
            keys = _group_keys(self.prefix, decode_name(q), decode_name(rest[:-2]))
        except UnicodeDecodeError:
            keys = None
        if keys is None or not (sep and q and rest) or keys.data != text:
            raise PresenceDataError(
                f"the index {self.groups} holds a member this package did not write: {text!r:.80}"
            )
        return keys

    def from_legacy_member(self, member: bytes | str) -> GroupKeys | None:
        """Keys of the group a member of the 0.1 index (``"Q:G"``) names, or None when the
        member is not one this package wrote."""
        text = member.decode("utf-8", "replace") if isinstance(member, bytes) else member
        q, sep, g = text.partition(":")
        try:
            keys = _group_keys(self.prefix, decode_name(q), decode_name(g))
        except UnicodeDecodeError:
            return None
        if not (sep and q and g) or f"{encode_name(keys.queue)}:{encode_name(keys.group)}" != text:
            return None
        return keys

    @property
    def acl_pattern(self) -> str:
        """The ACL key pattern that covers every key of this prefix."""
        return f"~{self.prefix}:*"

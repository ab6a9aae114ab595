"""Argument checks shared by every backend; they run before anything is written."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

MAX_NAME_BYTES = 512
"""Longest queue, group or consumer name, in UTF-8 bytes."""

MAX_LEASE_COUNT = 2**32 - 1
"""Lease counts are unsigned 32-bit integers."""

MAX_TTL_MS = 10**12
"""Largest accepted heartbeat budget (about 31 years); keeps every threshold exact in Lua."""

MAX_TIMESTAMP_NS = 2**53 * 1_000 - 1
"""Latest accepted timestamp (year 2255): microseconds stay exact as Redis scores."""

MAX_DELAY_MS = 24 * 3600 * 1000
"""Longest age a reporter may attach to a delayed beat."""

_PREFIX_FORBIDDEN = frozenset("{}*?[]\\ \t\r\n\x00")
MAX_PREFIX_LEN = 128

ConsumerKey = tuple[str, str, str]
"""The identity of one consumer: `(queue, group, consumer)`."""

FLAG_DRAINING = 1
"""Bit of a stored value's flags (`redis_presence.keys.STORED_VALUE`): the consumer says it is
draining."""
FLAG_DRAIN_REQUESTED = 2
"""Bit of a stored value's flags: a drain was requested and no draining beat took it yet."""
NO_INSTANCE = "-"
"""The instance token a stored value holds for none."""

MAX_CAPACITY = 2**32 - 1
"""Capacities are unsigned 32-bit integers (0: not reported)."""

INSTANCE_PATTERN = "[A-Za-z0-9_.-]{1,32}"
"""An instance token (a registry's `instance`): what tells two processes beating for one
consumer apart (``-`` is stored for none)."""

_INSTANCE = re.compile(INSTANCE_PATTERN)


class BeatSpec(NamedTuple):
    """One heartbeat for `heartbeat_many` with the version 2 fields: `capacity` (how many
    leases the consumer could hold; None keeps the stored one) and `draining` (True: it
    takes no new work; False: it does again; None keeps what is stored)."""

    queue: str
    group: str
    consumer: str
    lease_count: int = 0
    capacity: int | None = None
    draining: bool | None = None


Beat = tuple[str, str, str, int] | BeatSpec
"""One heartbeat for `heartbeat_many`: `(queue, group, consumer, lease_count)`, or a
`BeatSpec`."""

FullBeat = tuple[str, str, str, int, int, "int | None", "int | None", "bool | None"]
"""A checked beat with the version 2 fields: `(queue, group, consumer, lease_count,
delay_us, progress_delay_us or None, capacity or None, draining or None)`."""

CheckedBeat = tuple[str, str, str, int] | FullBeat
"""What `check_beats` returns of each beat: a plain 4-tuple, or a `FullBeat`."""

DelayedBeat = tuple[str, str, str, int, int] | tuple[str, str, str, int, int, int] | FullBeat
"""One heartbeat made `delay_us` microseconds before it is written, as a reporter sends it:
`(queue, group, consumer, lease_count, delay_us)`, and, when the consumer recorded
progress, how long before the write its last progress was: `progress_delay_us`; or a
`FullBeat` (its capacity and draining)."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_name(argument: str, value: Any) -> str:
    """A queue, group or consumer name: non-empty `str` of at most 512 UTF-8 bytes."""
    if type(value) is str and 0 < len(value) <= MAX_NAME_BYTES and value.isascii():
        return value  # the common case, without encoding: ASCII is one byte a character
    if not isinstance(value, str):
        raise TypeError(f"{argument} must be a str, got {type(value).__name__}")
    if not value:
        raise ValueError(f"{argument} must be a non-empty string")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ValueError(f"{argument} must be encodable as UTF-8 ({exc.reason})") from None
    if size > MAX_NAME_BYTES:
        raise ValueError(f"{argument} must be at most {MAX_NAME_BYTES} UTF-8 bytes, got {size}")
    return value


def check_lease_count(value: Any, argument: str = "lease_count") -> int:
    """An unsigned 32-bit count of in-flight leases."""
    if type(value) is int and 0 <= value <= MAX_LEASE_COUNT:
        return value  # the common case
    if not _is_int(value):
        raise TypeError(f"{argument} must be an int, got {type(value).__name__}")
    if not 0 <= value <= MAX_LEASE_COUNT:
        raise ValueError(f"{argument} must be in [0, {MAX_LEASE_COUNT}], got {value}")
    return int(value)


def check_capacity(value: Any, argument: str = "capacity") -> int | None:
    """An optional unsigned 32-bit capacity (None: keep the stored one)."""
    if value is None or (type(value) is int and 0 <= value <= MAX_CAPACITY):
        return value
    if not _is_int(value):
        raise TypeError(f"{argument} must be an int or None, got {type(value).__name__}")
    if not 0 <= value <= MAX_CAPACITY:
        raise ValueError(f"{argument} must be in [0, {MAX_CAPACITY}], got {value}")
    return int(value)


def check_flags(**flags: Any) -> None:
    """Each keyword a bool (`groups`' `details`, `capacity`, `departures`): a `TypeError`
    naming the first that is not."""
    for argument, value in flags.items():
        if type(value) is not bool:
            raise TypeError(f"{argument} must be a bool, got {type(value).__name__}")


def check_draining(value: Any, argument: str = "draining") -> bool | None:
    """An optional draining flag: True, False, or None (keep the stored one)."""
    if value is None or type(value) is bool:
        return value
    raise TypeError(f"{argument} must be a bool or None, got {type(value).__name__}")


def check_instance(value: Any, argument: str = "instance") -> str:
    """An instance token (INSTANCE_PATTERN)."""
    if type(value) is not str:
        raise TypeError(f"{argument} must be a str, got {type(value).__name__}")
    if _INSTANCE.fullmatch(value) is None:
        raise ValueError(f"{argument} must match {INSTANCE_PATTERN}, got {value!r:.40}")
    return value


def check_ttl_ms(value: Any, argument: str = "ttl_ms") -> int:
    """A positive heartbeat budget in milliseconds."""
    if not _is_int(value):
        raise TypeError(f"{argument} must be an int, got {type(value).__name__}")
    if not 0 < value <= MAX_TTL_MS:
        raise ValueError(f"{argument} must be a positive int at most {MAX_TTL_MS}, got {value}")
    return int(value)


def check_optional_ttl_ms(value: Any, argument: str = "ttl_ms") -> int | None:
    """`None` (the shared TTL stored in Redis, else the default) or a `check_ttl_ms` budget."""
    return None if value is None else check_ttl_ms(value, argument)


def check_retention_ms(value: Any, argument: str = "retention_ms") -> int | None:
    """How long past its expiry a consumer is kept before a prune removes it: ms in
    [0, MAX_TTL_MS], or `None` (DEFAULT_RETENTION_TTLS times its group's TTL)."""
    if value is None:
        return None
    if not _is_int(value):
        raise TypeError(f"{argument} must be an int or None, got {type(value).__name__}")
    if not 0 <= value <= MAX_TTL_MS:
        raise ValueError(f"{argument} must be in [0, {MAX_TTL_MS}] or None, got {value}")
    return int(value)


MIN_PRUNE_EVERY_MS = 100
"""The shortest interval of automatic removal (`prune_every_ms`)."""


def check_prune_every_ms(value: Any, argument: str = "prune_every_ms") -> int | None:
    """`None` (no automatic removal) or how often to prune, in ms, within
    [MIN_PRUNE_EVERY_MS, MAX_TTL_MS]."""
    if value is None:
        return None
    if not _is_int(value):
        raise TypeError(f"{argument} must be an int or None, got {type(value).__name__}")
    if not MIN_PRUNE_EVERY_MS <= value <= MAX_TTL_MS:
        raise ValueError(
            f"{argument} must be in [{MIN_PRUNE_EVERY_MS}, {MAX_TTL_MS}] or None, got {value}"
        )
    return int(value)


MAX_FUTURE_LIMIT_MS = 24 * 3600 * 1000
"""Largest accepted ``max_future_ms`` (a day)."""


def check_max_future_ms(value: Any, argument: str = "max_future_ms") -> int | None:
    """`None` (no clock guard) or how many ms an explicit ``now_ns`` may be ahead of the
    server clock, in [0, MAX_FUTURE_LIMIT_MS]."""
    if value is None:
        return None
    if not _is_int(value):
        raise TypeError(f"{argument} must be an int or None, got {type(value).__name__}")
    if not 0 <= value <= MAX_FUTURE_LIMIT_MS:
        raise ValueError(f"{argument} must be in [0, {MAX_FUTURE_LIMIT_MS}] or None, got {value}")
    return int(value)


def check_now_ns(value: Any, argument: str = "now_ns") -> int | None:
    """`None` (use the clock) or a non-negative integer timestamp in nanoseconds."""
    if value is None:
        return None
    if not _is_int(value):
        raise TypeError(f"{argument} must be an int or None, got {type(value).__name__}")
    if not 0 <= value <= MAX_TIMESTAMP_NS:
        raise ValueError(f"{argument} must be in [0, {MAX_TIMESTAMP_NS}], got {value}")
    return int(value)


MAX_META_KEYS = 16
"""Most keys of one consumer's metadata."""

MAX_META_BYTES = 1_024
"""Most UTF-8 bytes of one consumer's metadata, its keys and values together."""

MAX_MIN_ACTIVE = 1_000_000
"""Largest minimum of active consumers a declared group may ask for."""


def check_meta(value: Any, argument: str = "meta") -> dict[str, str]:
    """Consumer metadata: a mapping of at most MAX_META_KEYS names (non-empty str, as
    `check_name`) to str values (validated like names, or empty), MAX_META_BYTES in all."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{argument} must be a mapping of str to str, got {type(value).__name__}")
    if len(value) > MAX_META_KEYS:
        raise ValueError(f"{argument} must have at most {MAX_META_KEYS} keys, got {len(value)}")
    checked: dict[str, str] = {}
    size = 0
    for key, item in value.items():
        check_name(f"{argument} key", key)
        if not isinstance(item, str):
            raise TypeError(f"{argument}[{key!r:.40}] must be a str, got {type(item).__name__}")
        if item:
            check_name(f"{argument}[{key!r:.40}]", item)
        size += len(key.encode()) + len(item.encode())
        checked[key] = item
    if size > MAX_META_BYTES:
        raise ValueError(
            f"{argument} must be at most {MAX_META_BYTES} UTF-8 bytes in all, got {size}"
        )
    return checked


def check_optional_stuck_after_ms(value: Any, argument: str = "stuck_after_ms") -> int | None:
    """`None` (the shared budget, else DEFAULT_STUCK_AFTER_MS) or a positive budget in ms."""
    return None if value is None else check_ttl_ms(value, argument)


def check_min_active(value: Any, argument: str = "min_active") -> int:
    """How many active consumers a declared group must have: an int in [1, MAX_MIN_ACTIVE]
    (a group stops being declared with `unexpect`, not with 0)."""
    if not _is_int(value):
        raise TypeError(f"{argument} must be an int, got {type(value).__name__}")
    if not 1 <= value <= MAX_MIN_ACTIVE:
        raise ValueError(f"{argument} must be in [1, {MAX_MIN_ACTIVE}], got {value}")
    return int(value)


def check_prefix(value: Any) -> str:
    """A key prefix: printable, without braces, glob characters or whitespace."""
    if not isinstance(value, str):
        raise TypeError(f"prefix must be a str, got {type(value).__name__}")
    if not value or len(value) > MAX_PREFIX_LEN:
        raise ValueError(f"prefix must be 1 to {MAX_PREFIX_LEN} characters, got {len(value)}")
    bad = sorted(set(value) & _PREFIX_FORBIDDEN)
    if bad or not value.isprintable():
        shown = ", ".join(repr(c) for c in bad) or "a non-printable character"
        raise ValueError(f"prefix must not contain {shown}: {value!r}")
    return value


def check_filter(argument: str, value: Any) -> str | None:
    """A read's optional `queue` / `group` filter: None (every one) or a valid name."""
    return None if value is None else check_name(argument, value)


def check_consumer_key(queue: Any, group: Any, consumer: Any) -> ConsumerKey:
    """Validate the identity of one consumer."""
    return (
        check_name("queue", queue),
        check_name("group", group),
        check_name("consumer", consumer),
    )


def check_beats(beats: Iterable[Any]) -> list[CheckedBeat]:
    """Validate every beat of a batch (a 4-tuple as is, a `BeatSpec` as a `FullBeat`); an
    error names the beat's index and argument."""
    if isinstance(beats, str | bytes) or not isinstance(beats, Iterable):
        raise TypeError(
            "beats must be an iterable of (queue, group, consumer, lease_count) tuples, "
            f"got {type(beats).__name__}"
        )
    checked: list[CheckedBeat] = []
    keep = checked.append
    for index, beat in enumerate(beats):
        if type(beat) is tuple and len(beat) == 4:  # the common case, checked inline
            queue, group, consumer, lease = beat
            if (
                type(queue) is str
                and type(group) is str
                and type(consumer) is str
                and type(lease) is int
                and 0 < len(queue) <= MAX_NAME_BYTES
                and 0 < len(group) <= MAX_NAME_BYTES
                and 0 < len(consumer) <= MAX_NAME_BYTES
                and 0 <= lease <= MAX_LEASE_COUNT
                and queue.isascii()
                and group.isascii()
                and consumer.isascii()
            ):
                keep(beat)
                continue
        if isinstance(beat, BeatSpec):
            try:
                key = check_consumer_key(beat.queue, beat.group, beat.consumer)
                lease_count = check_lease_count(beat.lease_count)
                capacity = check_capacity(beat.capacity)
                draining = check_draining(beat.draining)
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"beats[{index}]: {exc}") from None
            keep((*key, lease_count, 0, None, capacity, draining))
            continue
        if not isinstance(beat, tuple | list) or len(beat) not in (3, 4):
            raise TypeError(
                f"beats[{index}] must be a (queue, group, consumer, lease_count) tuple, "
                f"got {beat!r:.80}"
            )
        queue, group, consumer = beat[0], beat[1], beat[2]
        lease = beat[3] if len(beat) == 4 else 0
        try:
            key = check_consumer_key(queue, group, consumer)
            lease_count = check_lease_count(lease)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"beats[{index}]: {exc}") from None
        keep((*key, lease_count))
    return checked


def check_delayed_beats(beats: Sequence[Any]) -> Sequence[DelayedBeat]:
    """Validate a reporter's delayed beats (`DelayedBeat`); an error names the beat's index.
    Cheap for what a reporter sends: every field is checked by its common-case fast path."""
    most_us = MAX_DELAY_MS * 1_000
    for index, beat in enumerate(beats):
        try:
            if len(beat) == 8:
                queue, group, consumer, lease, delay_us, progress_us, capacity, draining = beat
                if progress_us is not None and (
                    type(progress_us) is not int or not 0 <= progress_us <= most_us
                ):
                    raise ValueError(
                        f"progress_delay_us must be an int in [0, {most_us}] or None, "
                        f"got {progress_us!r}"
                    )
                check_capacity(capacity)
                check_draining(draining)
            elif len(beat) == 6:
                queue, group, consumer, lease, delay_us, progress_us = beat
                if type(progress_us) is not int or not 0 <= progress_us <= most_us:
                    raise ValueError(
                        f"progress_delay_us must be an int in [0, {most_us}], got {progress_us!r}"
                    )
            else:
                queue, group, consumer, lease, delay_us = beat
            check_consumer_key(queue, group, consumer)
            check_lease_count(lease)
            if type(delay_us) is not int or not 0 <= delay_us <= most_us:
                raise ValueError(f"delay_us must be an int in [0, {most_us}], got {delay_us!r}")
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"beats[{index}]: {exc}") from None
    return beats


__all__ = [
    "FLAG_DRAINING",
    "FLAG_DRAIN_REQUESTED",
    "INSTANCE_PATTERN",
    "MAX_CAPACITY",
    "MAX_DELAY_MS",
    "MAX_FUTURE_LIMIT_MS",
    "MAX_LEASE_COUNT",
    "MAX_META_BYTES",
    "MAX_META_KEYS",
    "MAX_MIN_ACTIVE",
    "MAX_NAME_BYTES",
    "MAX_TIMESTAMP_NS",
    "MAX_TTL_MS",
    "NO_INSTANCE",
    "Beat",
    "BeatSpec",
    "CheckedBeat",
    "ConsumerKey",
    "DelayedBeat",
    "FullBeat",
    "check_beats",
    "check_capacity",
    "check_consumer_key",
    "check_delayed_beats",
    "check_draining",
    "check_filter",
    "check_instance",
    "check_lease_count",
    "check_max_future_ms",
    "check_meta",
    "check_min_active",
    "check_name",
    "check_now_ns",
    "check_optional_stuck_after_ms",
    "check_optional_ttl_ms",
    "check_prefix",
    "check_ttl_ms",
]

"""Ages and moments as text, shared by the CLI's renderer and the web pages: whole units,
no float on the way; and the instants a ``since`` names (``15m``, an ISO 8601 instant)."""

from __future__ import annotations

import re
from datetime import datetime, timezone

from .events import EVENT_LOG_TTL_MS, LOG_LAG_MS

__all__ = ["SINCE_HELP", "human_age", "iso_utc", "iso_utc_ms", "looks_like_since", "parse_since"]


def human_age(age_ms: int) -> str:
    """`"12s ago"`, `"5m ago"`, `"3h ago"`, `"2d ago"`: whole units, rounded down."""
    seconds = max(0, age_ms) // 1000
    if seconds < 60:
        return f"{seconds}s ago"
    if seconds < 3600:
        return f"{seconds // 60}m ago"
    if seconds < 86_400:
        return f"{seconds // 3600}h ago"
    return f"{seconds // 86_400}d ago"


def iso_utc(timestamp_ns: int) -> str:
    """ISO-8601 UTC to the second, e.g. `2025-01-31T08:15:00Z` (no float on the way)."""
    moment = datetime.fromtimestamp(timestamp_ns // 1_000_000_000, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def iso_utc_ms(timestamp_ns: int) -> str:
    """ISO-8601 UTC to the millisecond, e.g. `2025-01-31T08:15:00.123Z`."""
    seconds, rest = divmod(timestamp_ns, 1_000_000_000)
    moment = datetime.fromtimestamp(seconds, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{rest // 1_000_000:03d}Z"


SINCE_UNITS_NS = {"s": 10**9, "m": 60 * 10**9, "h": 3_600 * 10**9, "d": 86_400 * 10**9}
_AGO = re.compile(r"([0-9]{1,9})([smhd])")
SINCE_REACH_NS = (EVENT_LOG_TTL_MS - 2 * LOG_LAG_MS) * 1_000_000
"""How far back `since` may go: the event logs last a day after their last event."""
SINCE_HELP = (
    "an instant (ISO 8601, e.g. `2026-12-04T22:05:00Z`; UTC without an offset; or "
    "nanoseconds since the epoch) or a time ago (`90s`, `15m`, `2h`, `1d`), at most a day back"
)


def parse_since(value: str, now_ns: int) -> int:
    """The instant a `since` value names (`SINCE_HELP`), in ns; `ValueError` else."""
    text = value.strip()
    ago = _AGO.fullmatch(text)
    if ago is not None:
        at = now_ns - int(ago[1]) * SINCE_UNITS_NS[ago[2]]
    elif text.isascii() and text.isdigit() and len(text) <= 20:
        at = int(text)
    else:
        try:
            when = datetime.fromisoformat(text.replace("z", "Z"))
        except ValueError:
            raise ValueError(f"since must be {SINCE_HELP}, got {value!r:.60}") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        delta = when - datetime(1970, 1, 1, tzinfo=timezone.utc)
        at = (delta.days * 86_400 + delta.seconds) * 10**9 + delta.microseconds * 1_000
    if at > now_ns:
        raise ValueError(f"since must not be in the future (now is {now_ns} ns), got {value!r:.60}")
    if at < now_ns - SINCE_REACH_NS:
        raise ValueError(
            f"since must be at most a day back (the event logs last a day), got {value!r:.60}"
        )
    return at


def looks_like_since(value: str) -> bool:
    """Whether `value` is spelled as a `since` (a time ago, nanoseconds or an ISO 8601
    instant) rather than an event cursor (base64url JSON: never digits first then ``-``,
    never only digits, never a number and a unit alone)."""
    text = value.strip()
    return bool(_AGO.fullmatch(text) or text.isdigit() or _ISO_START.match(text))


_ISO_START = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")

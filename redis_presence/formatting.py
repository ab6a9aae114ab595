"""Ages and moments as text, shared by the CLI's renderer and the web pages: whole units,
no float on the way."""

from __future__ import annotations

from datetime import datetime, timezone

__all__ = ["human_age", "iso_utc", "iso_utc_ms"]


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

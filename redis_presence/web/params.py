"""The path and query parameters of every route, checked: a value a route cannot use is a
`BadRequest` naming its parameter (a 400 JSON error), never an exception of the library.

Names (``queue``, ``group``, the ``search`` text, and the two segments of
``/api/v1/groups/<queue>/<group>``) are checked as the library checks them (non-empty, at
most 512 UTF-8 bytes); page cursors and limits are `paging`'s (`paging.ask`, the same
for every list); event cursors (``cursor`` or the ``Last-Event-ID`` header) are the
library's (`redis_presence.events`), refused with its `ValueError`.
"""

from __future__ import annotations

from collections.abc import Collection
from urllib.parse import unquote

from starlette.exceptions import HTTPException
from starlette.requests import Request

from redis_presence.events import EventCursor
from redis_presence.model import PresenceState
from redis_presence.validation import check_name

NAMES = frozenset({"queue", "group", "consumer", "search"})
"""The query parameters that hold a name (or a part of one), checked as names."""
MAX_TEXT_CHARS = 16_384
"""The longest value of any other text parameter (a cursor is far shorter)."""
LAST_EVENT_ID = "Last-Event-ID"


class BadRequest(ValueError):
    """A path or query parameter the route cannot use (400); `parameter` names it."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter


def text(request: Request, name: str) -> str | None:
    """A text query parameter (None when absent or empty); a name is checked as a name."""
    value = request.query_params.get(name)
    if not value:
        return None
    if name in NAMES:
        try:
            check_name(name, value)
        except ValueError as exc:
            raise BadRequest(name, str(exc)) from None
    elif len(value) > MAX_TEXT_CHARS:
        raise BadRequest(name, f"{name} must be at most {MAX_TEXT_CHARS:,} characters")
    return value


def flag(request: Request, name: str) -> bool:
    """A boolean query parameter: ``1``/``true``/``yes`` or ``0``/``false``/``no`` (absent:
    false)."""
    value = (request.query_params.get(name) or "").lower()
    if value in ("", "0", "false", "no"):
        return False
    if value in ("1", "true", "yes"):
        return True
    raise BadRequest(name, f"{name} must be 1 or 0, got {value!r:.60}")


def choice(request: Request, name: str, allowed: Collection[str]) -> str | None:
    """A query parameter that is one of `allowed` (None when absent or empty)."""
    value = request.query_params.get(name)
    if not value:
        return None
    if value not in allowed:
        known = ", ".join(allowed)
        raise BadRequest(name, f"{name} must be one of {known}, got {value!r:.60}")
    return value


def parse_states(values: Collection[str]) -> frozenset[PresenceState]:
    """`state` query values (repeatable, or comma-separated) as states; `ValueError` else."""
    found = set()
    for value in values:
        for part in value.split(","):
            if not part.strip():
                continue
            try:
                found.add(PresenceState(part.strip().lower()))
            except ValueError:
                known = ", ".join(s.value for s in PresenceState)
                raise ValueError(f"state must be one of {known}, got {part!r}") from None
    return frozenset(found)


def states(request: Request) -> frozenset[PresenceState]:
    try:
        return parse_states(request.query_params.getlist("state"))
    except ValueError as exc:
        raise BadRequest("state", str(exc)[:200]) from None


def path_names(request: Request, prefix: str) -> tuple[str, str]:
    """`(queue, group)` from the raw path after `prefix`: exactly two percent-encoded
    segments, so names may hold ``/``, ``%``, spaces and newlines; each a valid name."""
    queue, group = path_parts(request, prefix, ("queue", "group"))
    return queue, group


def path_parts(request: Request, prefix: str, parameters: tuple[str, ...]) -> list[str]:
    """One valid name per parameter from the raw path after `prefix`, each one
    percent-encoded segment (404 for another number of segments)."""
    raw = request.scope.get("raw_path") or request.url.path.encode()
    path = raw.decode("latin-1").partition("?")[0]
    start = request.scope.get("root_path", "").rstrip("/") + prefix
    parts = path[len(start) :].split("/")
    if not path.startswith(start) or len(parts) != len(parameters) or not all(parts):
        where = "/".join(f"<{parameter}>" for parameter in parameters)
        raise HTTPException(404, f"expected {prefix}{where} (percent-encoded)")
    names = []
    for parameter, part in zip(parameters, parts, strict=True):
        try:
            names.append(check_name(parameter, unquote(part, errors="strict")))
        except UnicodeDecodeError:
            raise BadRequest(parameter, f"{parameter} must be percent-encoded UTF-8") from None
        except ValueError as exc:
            raise BadRequest(parameter, str(exc)) from None
    return names


def event_cursor(request: Request) -> tuple[str | None, str]:
    """The event cursor of `/api/v1/events` (``cursor``, else the ``Last-Event-ID`` header
    of a reconnecting `EventSource`) and the name of the one it came from."""
    value = request.query_params.get("cursor") or None
    source = "cursor"
    if value is None:
        value, source = request.headers.get("last-event-id") or None, LAST_EVENT_ID
    try:
        if value is not None:
            EventCursor.decode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        # RecursionError: what a deeply nested cursor raised before the library bounded
        # its own decoding (its `ValueError` since).
        raise BadRequest(source, refused(source, exc)) from None
    return value, source


def refused(source: str, exc: BaseException) -> str:
    """The message of a refused event cursor, naming where it came from."""
    if isinstance(exc, RecursionError):
        return f"{source} is not a cursor that this API returned (nested too deeply)"
    message = str(exc)[:200]
    return message if message.startswith(source) else f"{source}: {message}"


__all__ = [
    "BadRequest",
    "choice",
    "event_cursor",
    "flag",
    "parse_states",
    "path_names",
    "path_parts",
    "states",
    "text",
]

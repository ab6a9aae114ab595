"""The path and query parameters of every route, checked: a value a route cannot use is a
`BadRequest` naming its parameter (a 400 JSON error), never an exception of the library.

Names (``queue``, ``group``, the ``search`` text, and the two segments of
``/api/v1/groups/<queue>/<group>``) are checked as the library checks them (non-empty, at
most 512 UTF-8 bytes); page cursors and limits are `paging`'s (`paging.ask`, the same
for every list); event cursors (``cursor`` or the ``Last-Event-ID`` header) are the
library's (`redis_presence.events`), refused with its `ValueError`.

Every page and every ``/api/v1`` route takes only the query parameters `QUERY` lists for
it (`known`): any other is a `BadRequest` naming it, so a filter a route does not have
(``?stuck=1`` where there is none) is refused, never silently ignored. The operations'
routes (``/metrics``, ``/healthz``, ``/readyz``, ``/static``) read no parameter and check
none (scrapers and probes may add their own).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from enum import Enum
from typing import TypeVar
from urllib.parse import quote, unquote, urlencode

from starlette.exceptions import HTTPException
from starlette.requests import Request

from redis_presence.events import EventCursor
from redis_presence.formatting import SINCE_HELP, parse_since
from redis_presence.model import PresenceState
from redis_presence.validation import check_name

E = TypeVar("E", bound=Enum)

NAMES = frozenset({"queue", "group", "consumer", "search", "queue_contains", "group_contains"})
"""The query parameters that hold a name (or a part of one), checked as names."""
MAX_TEXT_CHARS = 16_384
"""The longest value of any other text parameter (a cursor is far shorter)."""
LAST_EVENT_ID = "Last-Event-ID"

_PAGED = ("limit", "cursor")
_META = ("host", "version", "field", "value")
"""The metadata search of the consumer lists (`meta_filter`)."""
_ROLLUP = ("by", "queue", "group", "limit")
QUERY: Mapping[str, tuple[str, ...]] = {
    "/": ("queue", "group", "state", "idle", "stuck", "dead_leases", "sort", "window", *_PAGED),
    "/group": ("queue", "group", "state", "search", "stuck", *_META, "window", *_PAGED, "history"),
    "/consumers": ("queue", "group", "state", "search", "stuck", "meta", *_META, *_PAGED),
    "/hosts": _ROLLUP,
    "/events": ("queue", "group", "kind", "since", "cursor"),
    "/consumer": ("queue", "group", "consumer"),
    "/api/v1/groups": (
        "queue",
        "group",
        "queue_contains",
        "group_contains",
        "state",
        "idle",
        "stuck",
        "dead_leases",
        *_PAGED,
    ),
    "/api/v1/groups/": ("state", "search", "stuck", *_META, *_PAGED, "history"),
    "/api/v1/consumers": ("queue", "group", "state", "search", "stuck", "meta", *_META, *_PAGED),
    "/api/v1/consumers/": (),
    "/api/v1/hosts": _ROLLUP,
    "/api/v1/events": ("queue", "group", "cursor", "since"),
}
"""The query parameters each page and API route takes, by the app's route path (a prefix
route's path ends with ``/``); docs/_hooks/openapi.py documents exactly these."""
SHOWN_ONLY = frozenset({"sort", "window"})
"""The parameters that choose how a page shows its rows (their order over every group, the
charts' time window), not which rows: not filters, so not the API routes' (a page's own
JSON twin, ``Accept: application/json``, takes them)."""
_SPELLED = {
    "/api/v1/groups/": "/api/v1/groups/{queue}/{group}",
    "/api/v1/consumers/": "/api/v1/consumers/{queue}/{group}/{consumer}",
}


RECOUNTING = HTTPException(
    503, "the totals are being recounted (Redis's data keeps changing): try again shortly"
)
"""A filter only the totals' count knows (``dead_leases=1``) while they cannot be trusted."""


class BadRequest(ValueError):
    """A path or query parameter the route cannot use (400); `parameter` names it."""

    def __init__(self, parameter: str, message: str) -> None:
        super().__init__(message)
        self.parameter = parameter


class UnknownParameter(BadRequest):
    """A query parameter the route does not take; `without` is the request's query string
    without any such parameter (what an error page offers to open instead)."""

    def __init__(self, parameter: str, message: str, without: str) -> None:
        super().__init__(parameter, message)
        self.without = without


def known(request: Request, route: str) -> None:
    """Refuse (`UnknownParameter`, a 400 naming it) the first query parameter `route` does
    not take (`QUERY`)."""
    takes = QUERY[route]
    pairs = request.query_params.multi_items()
    for name, _ in pairs:
        if name not in takes:
            kept = urlencode([(k, v) for k, v in pairs if k in takes], quote_via=quote)
            listed = ", ".join(takes) or "none"
            raise UnknownParameter(
                name[:60],
                f"{_SPELLED.get(route, route)} takes no parameter {name!r:.60} "
                f"(it takes: {listed})",
                kept,
            )


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


def parse_members(name: str, kind: type[E], values: Collection[str]) -> frozenset[E]:
    """The query values of `name` (repeatable, or comma-separated, any case) as members of
    the string enum `kind`; a `ValueError` naming `name` and the members else."""
    found = set()
    for value in values:
        for part in value.split(","):
            if not part.strip():
                continue
            try:
                found.add(kind(part.strip().lower()))
            except ValueError:
                known = ", ".join(member.value for member in kind)
                raise ValueError(f"{name} must be one of {known}, got {part[:40]!r}") from None
    return frozenset(found)


def parse_states(values: Collection[str]) -> frozenset[PresenceState]:
    """`state` query values (repeatable, or comma-separated) as states; `ValueError` else."""
    return parse_members("state", PresenceState, values)


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


def since(request: Request, now_ns: int) -> int | None:
    """The `since` query parameter as an instant in ns (None: absent, or a reconnecting
    `EventSource`'s ``Last-Event-ID`` goes on instead); a `BadRequest` naming it when it
    is not `SINCE_HELP`, or with a ``cursor``."""
    value = request.query_params.get("since")
    if not value or request.headers.get("last-event-id"):
        return None  # a reconnecting EventSource goes on from where its stream was
    if request.query_params.get("cursor"):
        raise BadRequest("since", "since starts a read where a cursor would: send one of them")
    try:
        return parse_since(value[:100], now_ns)
    except ValueError as exc:
        raise BadRequest("since", str(exc)) from None


META_SHORTHANDS = ("host", "version")
"""Query parameters that search one metadata field by its exact value (``host=web-1``)."""


def meta_filter(request: Request) -> tuple[str, str | None] | None:
    """The metadata search of a consumer list: ``host=`` or ``version=`` (that field's
    exact value), or ``field=`` with ``value=`` (any field; without `value`, the consumers
    without that field: the roll-up's "(none)"). One of them at most; each checked as
    `describe` checks metadata."""
    asked = [name for name in (*META_SHORTHANDS, "field") if request.query_params.get(name)]
    if len(asked) > 1:
        raise BadRequest(asked[1], f"search one metadata field at a time: {' and '.join(asked)}")
    value = request.query_params.get("value") or None
    if not asked:
        if value is not None:
            raise BadRequest("value", "value= searches the field named by field=")
        return None
    name = asked[0]
    if name == "field":
        field = _meta_text("field", request.query_params["field"])
        return field, None if value is None else _meta_text("value", value)
    if value is not None:
        raise BadRequest("value", f"value= goes with field=, not with {name}=")
    return name, _meta_text(name, request.query_params[name])


def _meta_text(parameter: str, value: str) -> str:
    """A metadata key or value as `describe` takes it (as a name: non-empty, at most 512
    UTF-8 bytes)."""
    try:
        return check_name(parameter, value)
    except ValueError as exc:
        raise BadRequest(parameter, str(exc)) from None


def rollup_field(request: Request, default: str) -> str:
    """The ``by`` of a roll-up: a metadata field's name (`default` when absent)."""
    value = request.query_params.get("by")
    return default if not value else _meta_text("by", value)


__all__ = [
    "QUERY",
    "SHOWN_ONLY",
    "SINCE_HELP",
    "BadRequest",
    "UnknownParameter",
    "choice",
    "event_cursor",
    "flag",
    "known",
    "meta_filter",
    "parse_members",
    "parse_since",
    "parse_states",
    "path_names",
    "path_parts",
    "rollup_field",
    "since",
    "states",
    "text",
]

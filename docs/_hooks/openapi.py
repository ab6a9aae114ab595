"""The web service's routes, documented once: the OpenAPI document and the routes table of
docs/web.md are built from `ROUTES`, and tests/test_docs.py checks that it names exactly the
routes of `redis_presence.web.app.create_app` (so a new route cannot go undocumented).

Importable without mkdocs (the test imports it); the mkdocs hook is `hooks.py` beside it.
The document has an operation for each route the app serves (`served_routes`)."""

from __future__ import annotations

import json
from typing import Any

from redis_presence.web import WebConfig, create_app, paging

Param = tuple[str, str]  # (name, description)

_QUEUE = ("queue", "exact queue name")
_GROUP = ("group", "exact group name")
_STATE = ("state", "`active`, `stale` or `expired`; repeatable or comma-separated")
_SEARCH = ("search", "case-insensitive substring of the consumer name")
_GROUPS_PAGE = ("limit", paging.GROUPS_PAGE.describe())
_GROUPS_API = ("limit", paging.GROUPS_API.describe())
_CONSUMERS_PAGE = ("limit", paging.CONSUMERS_PAGE.describe())
_CONSUMERS_API = ("limit", paging.CONSUMERS_API.describe())
_CURSOR = ("cursor", "opaque, from `next_cursor` / `prev_cursor` (names a row, not an offset)")
_WINDOW = (
    "window",
    "`1h` (default), `6h` or `24h`: the charts' time window, as far as the event log reaches",
)
_JSON = ("Accept", "`application/json` answers the page's JSON twin")
_META_SEARCH = [
    ("host", "metadata search: consumers whose `host` is exactly this"),
    ("version", "metadata search: consumers whose `version` is exactly this"),
    ("field", "metadata search: any field (with `value`; alone, the consumers without it)"),
    ("value", "the exact value of `field`"),
]
_HISTORY = ("history", "`1`: the group's chart and timeline of the last hour too (`history`)")
_ROLLUP = [
    ("by", "the metadata field to roll up by: `host` (default), `version`, or any key"),
    ("queue", "exact queue name: its consumers alone"),
    ("group", "exact group name (with `queue`): its consumers alone"),
    ("limit", "values shown, 1 to 1,000 (default 500); the others are counted"),
]
_ROLLUP_DESCRIPTION = (
    "One row per value of the field: consumers active, stale, expired and stuck, groups, "
    "leases and leases held by expired consumers, `drained`; `(none)`: consumers without "
    "the field, `(unreadable)`: metadata another program wrote. Reads every consumer it "
    "rolls up with its metadata (bounded commands; 2 to 4 s at 30,000 consumers here)."
)
_STUCK = (
    "stuck",
    "`1`: only stuck consumers (active, holding leases, no progress within their group's "
    "progress budget)",
)
_GROUPS_STUCK = (
    "stuck",
    "`1`: only the groups with a stuck consumer, each with its count in `stuck` (the groups "
    "the service's last count found, at most 30 s old, each read again now)",
)
_DEAD_LEASES = (
    "dead_leases",
    "`1`: only the groups whose expired consumers hold leases, in the index's order unless "
    "sorted (the groups the service's last count of every consumer found, at most 30 s old, "
    "each read again now; `leases` and `leases_expired` from that count)",
)
_IDLE = ("idle", "`1`: only the groups nobody reads or below their minimum")
_GROUPS_STATE = ("state", "only the groups with consumers in one of these states: " + _STATE[1])

# app route path -> what it serves. `path` (optional) is the OpenAPI path when the app's
# route matches a prefix; `kind` is the response's media type.
ROUTES: dict[str, dict[str, Any]] = {
    "/": {
        "summary": "The dashboard: a page of the tracked or declared groups, and totals",
        "description": "Attention first: the groups whose verdict is STOPPED, STALLED or "
        "DEGRADED, or whose expired consumers hold leases, then the rest (`sort=queue`: the "
        "index's order), a page at a time (each page reads and counts the groups it shows), "
        "those below their declared minimum or that nobody reads marked; the totals from one "
        "shared read of every group, with its time; live counts per state, updated from the "
        "event stream.",
        "query": [
            ("queue", "queue name contains"),
            ("group", "group name contains"),
            _GROUPS_STATE,
            _IDLE,
            _GROUPS_STUCK,
            _DEAD_LEASES,
            _GROUPS_PAGE,
            _CURSOR,
            (
                "sort",
                "`attention` (the default: STOPPED, STALLED, DEGRADED, leases held by expired "
                "consumers first), `queue` (the index's order), or `active`, `stale`, "
                "`expired`, `min`, `leases`, `dead_leases` (the fewest first), `-active`... "
                "(the most first): ordered over every group by the shared read of the "
                "totals; the page's rows read now",
            ),
            _WINDOW,
        ],
        "kind": "text/html",
    },
    "/group": {
        "summary": "One group's page: its consumers, their metadata and progress",
        "description": "400 without `queue` and `group`; 404 when the group is neither "
        "tracked nor declared.",
        "query": [
            _QUEUE,
            _GROUP,
            _STATE,
            _SEARCH,
            _STUCK,
            *_META_SEARCH,
            _WINDOW,
            _CONSUMERS_PAGE,
            _CURSOR,
            _HISTORY,
        ],
        "kind": "text/html",
    },
    "/consumers": {
        "summary": "Consumers across groups, searchable by name",
        "description": "The same filters as `/api/v1/consumers`.",
        "query": [
            _QUEUE,
            _GROUP,
            _STATE,
            _SEARCH,
            _STUCK,
            ("meta", "`1`: show each row's metadata"),
            *_META_SEARCH,
            _CONSUMERS_PAGE,
            _CURSOR,
        ],
        "kind": "text/html",
    },
    "/events": {
        "summary": "The fleet's events since an instant, or after a cursor, a page at a time",
        "description": "Oldest first, from `since` (15 minutes ago by default) or `cursor` "
        "(the page's own, to go on); kinds filtered after the read; at most 5 reads of 200 "
        "events a view. JSON twin: `events` (each with `derived`), `cursor`, `more`, "
        "`now_ns`, `read`, `since_ns`. 410 when a log was trimmed past `since`.",
        "query": [
            _QUEUE,
            _GROUP,
            (
                "kind",
                "`joined`, `recovered`, `left`, `pruned`, `stale`, `expired`; "
                "repeatable or comma-separated",
            ),
            ("since", "an instant (ISO 8601, ns) or a time ago (`15m`), at most a day back"),
            ("cursor", "go on from the page's `cursor`"),
        ],
        "kind": "text/html",
    },
    "/hosts": {
        "summary": "Consumers rolled up by a metadata field (by host by default)",
        "description": _ROLLUP_DESCRIPTION,
        "query": _ROLLUP,
        "kind": "text/html",
    },
    "/consumer": {
        "summary": "One consumer's page: its state, leases, progress, metadata and history",
        "description": "Its state history over the last hour (transition events, newest "
        "first) from one bounded read of the queue's event log; 400 without `queue`, `group` "
        "and `consumer`; 404 when it is neither tracked nor in the history read.",
        "query": [_QUEUE, _GROUP, ("consumer", "exact consumer name")],
        "kind": "text/html",
    },
    "/api/v1/groups": {
        "summary": "Every tracked or declared group with its counts",
        "description": "`groups`: `queue`, `group`, `active`, `stale`, `expired`, "
        "`min_active` (null: not declared), `below`, `stuck` (null unless `stuck=1`), `leases` "
        "and `leases_expired` (null unless `dead_leases=1`), and its "
        "`verdict` (`OK`, `DRAINING`, `DEGRADED`, `STOPPED`; `STALLED` needs the consumers' "
        "progress, which the group's own page reads) with its `reason` in words, in the "
        "index's order; `next_cursor` / `prev_cursor` (null at either end). The dashboard's "
        "filters, with exact names in `queue` and `group`.",
        "query": [
            _QUEUE,
            _GROUP,
            ("queue_contains", "queue name contains (case-insensitive), as the dashboard's"),
            ("group_contains", "group name contains (case-insensitive), as the dashboard's"),
            _GROUPS_STATE,
            _IDLE,
            _GROUPS_STUCK,
            _DEAD_LEASES,
            _GROUPS_API,
            _CURSOR,
        ],
        "kind": "application/json",
    },
    "/api/v1/groups/": {
        "path": "/api/v1/groups/{queue}/{group}",
        "summary": "One group: its counts, progress budget and a page of its consumers",
        "description": "Each name is one percent-encoded path segment (`a/b` is `a%2Fb`); "
        "`group` has the list's fields, its `verdict` judged with its consumers' progress "
        "(`STALLED` when every active one is stuck); "
        "404 when the group is neither tracked nor declared. With `history=1`, `history`: "
        "the group page's chart (`series`) and `timeline` of the last hour, from one bounded "
        "read of the queue's event log (else null).",
        "path_params": [
            ("queue", "the queue, percent-encoded"),
            ("group", "the group, percent-encoded"),
        ],
        "query": [_STATE, _SEARCH, _STUCK, *_META_SEARCH, _CONSUMERS_API, _CURSOR, _HISTORY],
        "kind": "application/json",
    },
    "/api/v1/consumers": {
        "summary": "Consumer rows, ordered by (queue, group, consumer)",
        "description": "`consumers`: rows with the `ConsumerPresence` field names; "
        "`next_cursor` / `prev_cursor` (null at either end).",
        "query": [
            _QUEUE,
            _GROUP,
            _STATE,
            _SEARCH,
            _STUCK,
            ("meta", "`1`: read each row's metadata too"),
            *_META_SEARCH,
            _CONSUMERS_API,
            _CURSOR,
        ],
        "kind": "application/json",
    },
    "/api/v1/consumers/": {
        "path": "/api/v1/consumers/{queue}/{group}/{consumer}",
        "summary": "One consumer: its row now, metadata and transitions of the last hour",
        "description": "`row` (null when not tracked now), `meta`, `timeline` (newest "
        "first; `derived`: stale/expired by the rule), `start_ns` and `reaches_back` (false "
        "when the event log does not reach back an hour); 404 when it is neither tracked "
        "nor in the history read.",
        "path_params": [
            ("queue", "the queue, percent-encoded"),
            ("group", "the group, percent-encoded"),
            ("consumer", "the consumer, percent-encoded"),
        ],
        "kind": "application/json",
    },
    "/api/v1/hosts": {
        "summary": "Consumers rolled up by a metadata field: `?by=host|version|<field>`",
        "description": _ROLLUP_DESCRIPTION + " The same model as `/hosts`' JSON twin.",
        "query": _ROLLUP,
        "kind": "application/json",
    },
    "/api/v1/events": {
        "summary": "The registry's events: one poll, or a server-sent event stream",
        "description": "With `Accept: text/event-stream`, a stream (`hello`, `presence`, "
        "`cursor`, `status`, `snapshot` messages); otherwise the `events` after `cursor` "
        "(or `since`) and the cursor to go on from, `more` when the next is due at once. "
        "410 `resync_required` for a cursor that cannot go on.",
        "query": [
            _QUEUE,
            _GROUP,
            ("cursor", "go on from this cursor (no cursor: no events, a cursor from now)"),
            (
                "since",
                "without a cursor: the events after this instant, "
                "ISO 8601, ns since the epoch, or a time ago (`15m`), at most a day back",
            ),
        ],
        "headers": [("Last-Event-ID", "a stream's cursor, as `EventSource` resends it")],
        "kind": "application/json",
    },
    "/api/v1/drain": {
        "summary": "Ask a consumer to drain (POST; only with `serve --drain-token`)",
        "description": 'A JSON body `{"queue", "group", "consumer"}` and the drain '
        "token in `X-Presence-Drain-Token` (same origin only): `request_drain`, which logs "
        "`drain_requested`; 200 `drain_requested: true`, 404 `not_tracked`, 403 "
        "`drain_disabled` (no drain token), `cross_origin` or `drain_forbidden`, 415 for a "
        "body that is not `application/json`.",
        "method": "post",
        "headers": [("X-Presence-Drain-Token", "the drain token (`--drain-token`)")],
        "body": '`{"queue": Q, "group": G, "consumer": C}`',
        "kind": "application/json",
    },
    "/metrics": {
        "summary": "Prometheus metrics, computed at scrape time",
        "description": "Per-group gauges; per-consumer series with `--per-consumer-metrics`.",
        "kind": "text/plain",
    },
    "/healthz": {
        "summary": "Liveness: 200 whenever the process runs (no token, no Redis call)",
        "kind": "application/json",
    },
    "/readyz": {
        "summary": "Readiness: one `TIME` to Redis; 200 with its clock, or 503 with the reason",
        "kind": "application/json",
    },
    "/static": {
        "path": "/static/{file}",
        "summary": "The dashboard's script and stylesheet (shipped in the wheel)",
        "path_params": [("file", "a file name")],
        "kind": "application/octet-stream",
    },
}

ERRORS = {
    "400": "a bad parameter, or one the route does not take (`parameter` names it)",
    "401": "the auth token is missing or wrong",
    "404": "no such group (`see`: its queue's groups) or consumer",
    "405": "any method but GET",
    "410": "an event cursor that cannot go on: resync",
    "421": "a `Host` the service does not answer to",
    "502": "foreign data under the prefix, or a prefix of another protocol version",
    "503": "Redis cannot be reached, refused the credentials, or the pool is busy",
}


def _parameter(where: str, param: Param) -> dict[str, Any]:
    name, description = param
    return {
        "name": name,
        "in": where,
        "required": where == "path",
        "description": description,
        "schema": {"type": "string"},
    }


def served_routes() -> list[str]:
    """The paths of the routes `create_app` serves, in its order."""
    return [getattr(route, "path", "") for route in create_app(WebConfig()).routes]


def openapi(version: str, served: list[str] | None = None) -> dict[str, Any]:
    """The service's OpenAPI 3.1 document: one operation per route of `served` (default:
    every documented route), each described by `ROUTES`; LookupError for an undocumented one."""
    paths: dict[str, Any] = {}
    for route in served if served is not None else list(ROUTES):
        info = ROUTES.get(route)
        if info is None:
            raise LookupError(f"the app serves {route!r}: describe it in ROUTES ({__file__})")
        parameters = [_parameter("path", p) for p in info.get("path_params", [])]
        parameters += [_parameter("query", p) for p in info.get("query", [])]
        parameters += [_parameter("header", p) for p in info.get("headers", [])]
        if info["kind"] == "text/html":
            parameters.append(_parameter("header", _JSON))
        responses: dict[str, Any] = {
            "200": {"description": "OK", "content": {info["kind"]: {}}},
        }
        responses.update({code: {"description": text} for code, text in ERRORS.items()})
        operation: dict[str, Any] = {
            "summary": info["summary"],
            "parameters": parameters,
            "responses": responses,
        }
        if "description" in info:
            operation["description"] = info["description"]
        if "body" in info:
            operation["requestBody"] = {
                "required": True,
                "description": info["body"],
                "content": {"application/json": {}},
            }
        paths[info.get("path", route)] = {info.get("method", "get"): operation}
    return {
        "openapi": "3.1.0",
        "info": {"title": "redis-presence serve", "version": version},
        "components": {
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "basic": {"type": "http", "scheme": "basic"},
            }
        },
        "paths": paths,
    }


def openapi_json(version: str, served: list[str] | None = None) -> str:
    return json.dumps(openapi(version, served), indent=2) + "\n"


def routes_table() -> str:
    """The routes as a Markdown table (docs/web.md)."""
    rows = ["| route | parameters | returns |", "| --- | --- | --- |"]
    for route, info in ROUTES.items():
        names = [p[0] for p in info.get("query", [])]
        params = ", ".join(f"`{n}`" for n in names) or "none"
        if "body" in info:
            params = f"body {info['body']}"
        summary = info["summary"]
        if "description" in info:
            summary += ". " + info["description"]
        rows.append(f"| `{info.get('path', route)}` | {params} | {summary} |")
    return "\n".join(rows) + "\n"

"""The Starlette app of `redis-presence serve`: pages, the JSON API, SSE, metrics, health.

Each route reads through `PresenceData` (the only module that talks to the registry) and
hands rows to a template or to JSON. Nothing here writes to Redis. Errors are JSON under
`/api/` (and for the probes) and a page elsewhere; never a traceback. Passwords in the
Redis URL never reach a response or a log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from prometheus_client import exposition
from redis.backoff import NoBackoff
from redis.retry import Retry
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Match, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from redis_presence import (
    AsyncRedisPresenceRegistry,
    ConsumerPresence,
    PresenceState,
)
from redis_presence.errors import (
    PresenceAuthError,
    PresenceConnectionError,
    PresenceDataError,
    PresenceError,
    PresencePoolExhausted,
    PresenceResyncRequired,
)
from redis_presence.formatting import human_age, iso_utc
from redis_presence.urls import (
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_POOL_TIMEOUT_S,
    parse_url,
    redact,
)

from . import events as live_events
from . import history, metrics, params
from .auth import TokenAuth, check_token
from .data import NO_META_ERRORS, GroupStats, PresenceData, TtlInUse
from .guard import CatchAll
from .pages import MAX_LIMIT, ConsumerFilter, GroupFilter
from .params import BadRequest
from .security import HostCheck, SecurityHeaders

log = logging.getLogger("redis_presence.web")

CONNECT_TIMEOUT_S = 2.0
"""How long a read waits for a TCP connection before Redis counts as unreachable (503)."""
REPLY_TIMEOUT_S = 10.0
"""How long a read waits for Redis to answer."""
PAGE_SIZE = 50
"""Consumers per dashboard page (the API's `limit` defaults to 100, at most 1,000)."""
GROUPS_PER_PAGE = 200
GROUP_API = "/api/v1/groups/"
CONSUMER_API = "/api/v1/consumers/"
NO_GROUP = "queue {queue!r} has no tracked or declared group {group!r}"
NEEDS_BOTH = "a group page needs queue= and group="
SSE_PING_S = 15
SSE_RETRY_MS = 2000
BUSY_RETRY_AFTER_S = 5
"""The ``Retry-After`` of a 503 that says the service is busy (streams or pool full)."""

RegistryFactory = Callable[[], AsyncRedisPresenceRegistry]

TTL_SOURCES = {
    "option": "--ttl-ms",
    "group": "stored for this group",
    "prefix": "stored for the prefix",
    "default": "the default: none stored",
}
"""How the page names where its TTL came from (`TtlInUse.source`)."""


@dataclass(frozen=True)
class WebConfig:
    """What `redis-presence serve` runs with (the global options and its own)."""

    url: str = "redis://localhost:6379/0"
    prefix: str = "presence"
    ttl_ms: int | None = None
    """``--ttl-ms``; None uses the shared TTL (`registry.ttl_source`), as the events do."""
    read_only: bool = False
    auth_token: str | None = None
    per_consumer_metrics: bool = False
    stuck_metrics: bool = False
    """``--stuck-metrics``: each scrape reads every consumer, to count the stuck ones per
    group (on with `per_consumer_metrics`, which reads them anyway)."""
    now_ns: int | None = None
    """A fixed clock for every read (tests); None is the Redis server's clock."""
    read_cache_s: float = 0.5
    """How long one snapshot serves every page and API request (0: read each time)."""
    totals_cache_s: float = 5.0
    """How long one read of the fleet's totals (every group's counts) serves every groups
    page (0: read each time); see `PresenceData.totals`."""
    live_interval_s: float = 0.5
    """How often each filter's poller asks `registry.changes` for what changed (one
    poller per distinct (queue, group) of the open event streams)."""
    max_streams: int = live_events.DEFAULT_MAX_STREAMS
    """``--max-streams``: open event streams at most; past them a new one is a 503."""
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    """``--max-connections``: the registry's pool size (a standalone URL's
    ``?max_connections=`` wins)."""
    pool_timeout_s: float = DEFAULT_POOL_TIMEOUT_S
    """``--pool-timeout``: how long a read waits for a free connection of a full pool."""
    access_log: bool = True
    allowed_hosts: tuple[str, ...] = ()
    """The ``Host`` names it answers to besides the loopback ones and the address a request
    arrived at (``--host`` and ``--allowed-host``); others get 421."""

    def open_registry(self) -> AsyncRedisPresenceRegistry:
        """An asyncio registry for `url` (connects on first use, fails fast when down)."""
        pool: dict[str, Any] = {}
        if parse_url(self.url).topology == "standalone":  # the package's waiting pool
            pool = {"max_connections": self.max_connections, "pool_timeout": self.pool_timeout_s}
        return AsyncRedisPresenceRegistry.from_url(
            self.url,
            prefix=self.prefix,
            read_only=self.read_only,
            socket_connect_timeout=CONNECT_TIMEOUT_S,
            socket_timeout=REPLY_TIMEOUT_S,
            retry=Retry(NoBackoff(), 1),
            **pool,
        )


# -- formatting -------------------------------------------------------------------------


def segment(name: str) -> str:
    """`name` as one percent-encoded URL path segment (``/`` included)."""
    return quote(name, safe="")


def consumer_json(
    row: ConsumerPresence, *, with_meta: bool, meta_errors: Mapping[Any, str] = NO_META_ERRORS
) -> dict[str, object]:
    """A row's JSON: its `ConsumerPresence` fields; `meta` is null when it was not read, and
    `meta_error` says why it is empty when another program's metadata could not be read."""
    fields = row.to_dict()
    if not with_meta:
        fields["meta"] = None
    elif row.key in meta_errors:
        fields["meta_error"] = meta_errors[row.key]
    return fields


def group_json(stats: GroupStats) -> dict[str, object]:
    return stats.to_dict() | {"nobody_reading": stats.nobody_reading}


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("redis_presence.web", "templates"),
        autoescape=True,  # every name is data: rendered as text, never as markup
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["age"] = human_age
    env.filters["iso"] = iso_utc
    env.filters["q"] = lambda value: quote(value, safe="")
    env.filters["thousands"] = lambda value: f"{value:,}"
    return env


# -- errors -----------------------------------------------------------------------------


def _status_of(exc: PresenceError) -> tuple[int, str]:
    if isinstance(exc, PresencePoolExhausted):  # this service is busy; Redis may be fine
        return 503, "service_busy"
    if isinstance(exc, PresenceConnectionError):
        return 503, "redis_unavailable"
    if isinstance(exc, PresenceAuthError):
        return 503, "redis_refused_access"
    if isinstance(exc, PresenceDataError):
        return 502, "redis_foreign_data"
    return 502, "redis_error"


def _wants_json(request: Request) -> bool:
    path = request.url.path
    return path.startswith("/api/") or path in ("/readyz", "/metrics", "/healthz")


class _Service:
    """The state one app holds: its config, registry, reads and live feed."""

    def __init__(
        self, config: WebConfig, factory: RegistryFactory | None, clock: Callable[[], int] | None
    ) -> None:
        self.config = config
        self.factory = factory or config.open_registry
        self.clock = clock
        self.templates = Jinja2Templates(env=_environment())
        self.data: PresenceData | None = None
        self.feed: live_events.LiveFeed | None = None

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        registry = self.factory()
        fixed = self.config.now_ns
        clock = self.clock if fixed is None else (lambda: fixed)
        self.data = PresenceData(
            registry,
            ttl_ms=self.config.ttl_ms,
            clock=clock,
            read_cache_s=self.config.read_cache_s,
            totals_cache_s=self.config.totals_cache_s,
        )
        self.feed = live_events.LiveFeed(
            self.data,
            interval_s=self.config.live_interval_s,
            max_streams=self.config.max_streams,
        )
        try:
            yield
        finally:
            await self.feed.close()
            await self.data.aclose()
            await registry.aclose()

    @property
    def reads(self) -> PresenceData:
        assert self.data is not None, "the app's lifespan has not started"
        return self.data

    @property
    def live(self) -> live_events.LiveFeed:
        assert self.feed is not None, "the app's lifespan has not started"
        return self.feed

    # -- error responses

    def error(
        self,
        request: Request,
        status: int,
        code: str,
        message: str,
        since_ns: int | None = None,
        **extra: str,
    ) -> Response:
        """A JSON error (the API, the probes, a page's JSON twin) or an error page; with
        `since_ns`, since when Redis cannot be reached (the page's script shows it); `extra`
        goes into the JSON (a 400's `parameter`)."""
        since = {} if since_ns is None else {"since_ns": since_ns}
        if _wants_json(request) or _json_view(request):
            body = {"error": code, "message": message} | since | extra
            return JSONResponse(body, status_code=status, headers={"Cache-Control": "no-store"})
        live = {"error": code, "message": message} | since
        return self.templates.TemplateResponse(
            request,
            "error.html",
            self.context(request, status=status, code=code, message=message, now_ns=0, live=live),
            status_code=status,
        )

    async def on_presence_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, PresenceError)
        status, code = _status_of(exc)
        log.warning("%s %s: %s", request.method, request.url.path, exc)
        down = code in ("redis_unavailable", "redis_refused_access")
        since = self.live.unreachable_since_ns() if down and self.feed is not None else None
        response = self.error(request, status, code, str(exc), since)
        if code == "service_busy":
            response.headers["Retry-After"] = str(BUSY_RETRY_AFTER_S)
        return response

    async def on_bad_request(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, BadRequest)
        return self.error(request, 400, "bad_request", str(exc), parameter=exc.parameter)

    async def on_http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        response = self.error(request, exc.status_code, code, str(exc.detail))
        response.headers.update(exc.headers or {})
        return response

    # -- shared pieces

    def context(self, request: Request, **values: Any) -> dict[str, Any]:
        root = request.scope.get("root_path", "").rstrip("/")
        if values.get("live"):
            values["live"] = values["live"] | {"root": root}
        ttl = values.pop("ttl", None) or (self.data.last_ttl if self.data else None)
        base: dict[str, Any] = {
            "root": root,
            "prefix": self.config.prefix,
            "ttl": ttl,
            "ttl_sources": TTL_SOURCES,
            "redis_url": redact(self.config.url),
            "states": [s.value for s in PresenceState],
        }
        return base | values


# -- query parameters (checked in .params) ----------------------------------------------

_text, _cursor, _limit, _flag = params.text, params.cursor, params.limit, params.flag
_states, _path_names = params.states, params.path_names


def _json_view(request: Request) -> bool:
    """Whether a page was asked for as JSON (the page's script refreshing itself)."""
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/html" not in accept


def _json(model: dict[str, Any]) -> Response:
    return JSONResponse(model, headers={"Cache-Control": "no-store", "Vary": "Accept"})


def _query(request: Request, *, cursor: str | None, name: str = "cursor") -> str:
    """The page's query string with `name` set to `cursor` (removed when None)."""
    pairs = [(k, v) for k, v in request.query_params.multi_items() if k != name]
    if cursor is not None:
        pairs.append((name, cursor))
    return urlencode(pairs, quote_via=quote)


def _page(response: Response) -> Response:
    """A page's headers: its JSON twin lives at the same URL."""
    response.headers["Vary"] = "Accept"
    response.headers["Cache-Control"] = "no-store"
    return response


# -- the app ----------------------------------------------------------------------------


class PrefixRoute(Route):
    """A route for every path under `path` (which ends with ``/``), whatever the decoded
    path holds: names may decode to newlines, which Starlette's path patterns refuse."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        path, root = scope["path"], scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        if scope["type"] != "http" or not path.startswith(self.path):
            return Match.NONE, {}
        child_scope = {"endpoint": self.endpoint, "path_params": {}}
        if self.methods and scope["method"] not in self.methods:
            return Match.PARTIAL, child_scope
        return Match.FULL, child_scope


class AccessLog:
    """One log line per request with the raw (percent-encoded) path, so a name holding a
    newline cannot forge a log line; no header (and so no token) is logged."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            raw = scope.get("raw_path") or scope["path"].encode()
            query = scope.get("query_string", b"")
            target = raw + (b"?" + query if query else b"")
            client = scope.get("client") or ("-", 0)
            log.info(
                "%s %s %s %d %.1f ms",
                client[0],
                scope["method"],
                target.decode("ascii", "backslashreplace"),
                status,
                (time.perf_counter() - started) * 1000,
            )


def create_app(
    config: WebConfig,
    registry_factory: RegistryFactory | None = None,
    *,
    clock: Callable[[], int] | None = None,
) -> Starlette:
    """The ASGI app for `config`. `registry_factory` replaces `config.open_registry` (it is
    called inside the app's event loop); `clock` replaces the Redis server's clock (tests)."""
    service = _Service(config, registry_factory, clock)
    views = Views(service)
    routes = [
        Route("/", views.overview, name="overview"),
        Route("/group", views.group_page, name="group"),
        Route("/consumers", views.consumers_page, name="consumers"),
        Route("/consumer", views.consumer_page, name="consumer"),
        Route("/api/v1/groups", views.api_groups),
        PrefixRoute(GROUP_API, views.api_group),
        Route("/api/v1/consumers", views.api_consumers),
        PrefixRoute(CONSUMER_API, views.api_consumer),
        Route("/api/v1/events", views.api_events),
        Route("/metrics", views.metrics),
        Route("/healthz", views.healthz),
        Route("/readyz", views.readyz),
        Mount("/static", StaticFiles(packages=[("redis_presence.web", "static")]), name="static"),
    ]
    middleware = []
    if config.access_log:
        middleware.append(Middleware(AccessLog))
    middleware.append(Middleware(SecurityHeaders))
    middleware.append(Middleware(HostCheck, allowed=config.allowed_hosts))
    if config.auth_token:
        check_token(config.auth_token)  # now, not at the first request
        middleware.append(Middleware(TokenAuth, token=config.auth_token))
    middleware.append(Middleware(CatchAll))  # innermost: below the log and the checks
    app = Starlette(
        routes=routes,
        middleware=middleware,
        lifespan=service.lifespan,
        exception_handlers={
            PresenceError: service.on_presence_error,
            BadRequest: service.on_bad_request,
            HTTPException: service.on_http_error,
        },
    )
    app.state.service = service
    return app


class Views:
    """The route handlers of one app."""

    def __init__(self, service: _Service) -> None:
        self.service = service

    # -- pages

    async def overview(self, request: Request) -> Response:
        service = self.service
        where = GroupFilter(
            queue_text=_text(request, "queue") or "",
            group_text=_text(request, "group") or "",
            states=_states(request),
            attention=_flag(request, "idle"),
        )
        limit = _limit(request, GROUPS_PER_PAGE)
        # One page of groups (read and counted from the cursor on) and, meanwhile, the
        # fleet's totals (one shared read of every group, at most `totals_cache_s` old).
        cursor = params.group_cursor(request)
        totals, (now_ns, page, ttl) = await asyncio.gather(
            service.reads.totals(), service.reads.group_page(where, cursor=cursor, limit=limit)
        )
        if _json_view(request):
            return _json(
                {"now_ns": now_ns}
                | ttl.to_dict()
                | {
                    "totals": totals.to_dict(),
                    "groups": [group_json(g) for g in page.groups],
                    "next_cursor": page.next_cursor,
                    "prev_cursor": page.prev_cursor,
                }
            )
        filters = {
            "queue": where.queue_text,
            "group": where.group_text,
            "states": sorted(s.value for s in where.states),
            "idle": where.attention,
        }
        sparks = await history.sparklines(service.reads, [(g.queue, g.group) for g in page.groups])
        context = service.context(
            request,
            now_ns=now_ns,
            ttl=ttl,
            groups=page.groups,
            sparks=sparks,
            totals=totals,
            prev_cursor=page.prev_cursor,
            next_cursor=page.next_cursor,
            first_query=_query(request, cursor=None),
            prev_query=_query(request, cursor=page.prev_cursor),
            next_query=_query(request, cursor=page.next_cursor),
            filters=filters,
            live={
                "view": "groups",
                "now_ns": now_ns,
                "ttl_ms": ttl.ttl_ms,
                "filters": filters,
                "groups": [group_json(g) for g in page.groups],
                "totals": totals.to_dict(),
                "next_cursor": page.next_cursor,
                "prev_cursor": page.prev_cursor,
            },
        )
        return _page(service.templates.TemplateResponse(request, "overview.html", context))

    async def group_page(self, request: Request) -> Response:
        queue, group = _text(request, "queue"), _text(request, "group")
        if queue is None or group is None:
            raise BadRequest("queue" if queue is None else "group", NEEDS_BOTH)
        return await self._consumers_view(request, queue, group, group_page=True)

    async def consumers_page(self, request: Request) -> Response:
        queue, group = _text(request, "queue"), _text(request, "group")
        return await self._consumers_view(request, queue, group, group_page=False)

    async def _consumers_view(
        self, request: Request, queue: str | None, group: str | None, *, group_page: bool
    ) -> Response:
        service = self.service
        states, search = _states(request), _text(request, "search")
        cursor, limit = _cursor(request), _limit(request, PAGE_SIZE)
        stats: GroupStats | None = None
        stuck_after_ms: int | None = None
        with_meta = group_page or _flag(request, "meta")
        if group_page and queue is not None and group is not None:
            found = await service.reads.group(
                queue, group, states=states, search=search, cursor=cursor, limit=limit
            )
            reading, stats, page = found.reading, found.stats, found.page
            stuck_after_ms = found.stuck_after_ms
            if stats is None:
                raise HTTPException(404, NO_GROUP.format(queue=queue, group=group))
        else:
            where = ConsumerFilter(queue, group, states, search)
            reading, page = await service.reads.consumers(
                where, cursor=cursor, limit=limit, with_meta=with_meta
            )
        now_ns, ttl = reading.now_ns, reading.ttl
        filters = {
            "queue": queue or "",
            "group": group or "",
            "states": sorted(s.value for s in states),
            "search": search or "",
            "limit": limit,
        }
        if _json_view(request):
            return _json(
                {"now_ns": now_ns}
                | ttl.to_dict()
                | {
                    "group": group_json(stats) if stats else None,
                    "stuck_after_ms": stuck_after_ms,
                    "consumers": [
                        consumer_json(row, with_meta=with_meta, meta_errors=reading.meta_errors)
                        for row in page.rows
                    ],
                    "next_cursor": page.next_cursor,
                    "prev_cursor": page.prev_cursor,
                }
            )
        past = None
        if group_page and queue is not None and group is not None:
            past = await history.group_history(service.reads, queue, group)
        context = service.context(
            request,
            now_ns=now_ns,
            ttl=ttl,
            stats=stats,
            past=past,
            group_page=group_page,
            with_meta=with_meta,
            meta_errors=reading.meta_errors,
            rows=page.rows,
            next_cursor=page.next_cursor,
            prev_cursor=page.prev_cursor,
            filters=filters,
            first_query=_query(request, cursor=None),
            prev_query=_query(request, cursor=page.prev_cursor),
            next_query=_query(request, cursor=page.next_cursor),
            live={
                "view": "consumers",
                "now_ns": now_ns,
                "ttl_ms": ttl.ttl_ms,
                "queue": queue,
                "group": group,
                "group_page": group_page,
                "with_meta": with_meta,
                "stuck_after_ms": stuck_after_ms,
                "states": filters["states"],
                "search": search or "",
                "limit": limit,
                "next_cursor": page.next_cursor,
                "prev_cursor": page.prev_cursor,
            },
        )
        return _page(service.templates.TemplateResponse(request, "consumers.html", context))

    async def consumer_page(self, request: Request) -> Response:
        fields = ("queue", "group", "consumer")
        queue, group, consumer = (_text(request, field) for field in fields)
        if queue is None or group is None or consumer is None:
            missing = next(field for field in fields if _text(request, field) is None)
            raise BadRequest(missing, "a consumer page needs queue=, group= and consumer=")
        view, model = await self._consumer(queue, group, consumer)
        if _json_view(request):
            return _json(model)
        service = self.service
        stuck_after_ms = await service.reads.stuck_after_ms(queue, group)
        context = service.context(
            request,
            now_ns=view.log.now_ns,
            queue=queue,
            group=group,
            consumer=consumer,
            row=view.row,
            meta=view.meta,
            meta_error=view.meta_error,
            log=view.log,
            timeline=view.timeline,
            stuck_after_ms=stuck_after_ms,
            live={},
        )
        return _page(service.templates.TemplateResponse(request, "consumer.html", context))

    async def api_consumer(self, request: Request) -> Response:
        queue, group, consumer = params.path_parts(
            request, CONSUMER_API, ("queue", "group", "consumer")
        )
        _, model = await self._consumer(queue, group, consumer)
        return JSONResponse(model, headers={"Cache-Control": "no-store"})

    async def _consumer(
        self, queue: str, group: str, consumer: str
    ) -> tuple[history.ConsumerView, dict[str, Any]]:
        """One consumer's page model; 404 when it is neither tracked nor in the history."""
        view = await history.consumer_view(self.service.reads, queue, group, consumer)
        if view.row is None and not view.timeline:
            raise HTTPException(
                404, f"group {queue!r}/{group!r} has no consumer {consumer!r} (nor had this hour)"
            )
        model = view.log.to_dict() | {
            "consumer": consumer,
            "row": None if view.row is None else consumer_json(view.row, with_meta=False),
            "meta": dict(view.meta),
            "meta_error": view.meta_error,
            "timeline": [t.to_dict() for t in view.timeline],
        }
        return view, model

    # -- the JSON API

    @staticmethod
    def _meta(now_ns: int, ttl: TtlInUse) -> dict[str, object]:
        return {"now_ns": now_ns} | ttl.to_dict()

    async def api_groups(self, request: Request) -> Response:
        where = GroupFilter(queue=_text(request, "queue"), group=_text(request, "group"))
        now_ns, page, ttl = await self.service.reads.group_page(
            where, cursor=params.group_cursor(request), limit=_limit(request, MAX_LIMIT)
        )
        return JSONResponse(
            self._meta(now_ns, ttl)
            | {
                "groups": [g.to_dict() for g in page.groups],  # min_active, below too
                "next_cursor": page.next_cursor,
                "prev_cursor": page.prev_cursor,
            }
        )

    async def api_group(self, request: Request) -> Response:
        queue, group = _path_names(request, GROUP_API)
        found = await self.service.reads.group(
            queue,
            group,
            states=_states(request),
            search=_text(request, "search"),
            cursor=_cursor(request),
            limit=_limit(request, 100),
        )
        reading, stats, page = found.reading, found.stats, found.page
        if stats is None:
            raise HTTPException(404, NO_GROUP.format(queue=queue, group=group))
        return JSONResponse(
            self._meta(reading.now_ns, reading.ttl)
            | {
                "group": stats.to_dict(),
                "stuck_after_ms": found.stuck_after_ms,
                "consumers": [
                    consumer_json(row, with_meta=True, meta_errors=reading.meta_errors)
                    for row in page.rows
                ],
                "next_cursor": page.next_cursor,
                "prev_cursor": page.prev_cursor,
            }
        )

    async def api_consumers(self, request: Request) -> Response:
        where = ConsumerFilter(
            _text(request, "queue"),
            _text(request, "group"),
            _states(request),
            _text(request, "search"),
        )
        with_meta = _flag(request, "meta")
        reading, page = await self.service.reads.consumers(
            where, cursor=_cursor(request), limit=_limit(request, 100), with_meta=with_meta
        )
        return JSONResponse(
            self._meta(reading.now_ns, reading.ttl)
            | {
                "consumers": [
                    consumer_json(row, with_meta=with_meta, meta_errors=reading.meta_errors)
                    for row in page.rows
                ],
                "next_cursor": page.next_cursor,
                "prev_cursor": page.prev_cursor,
            }
        )

    async def api_events(self, request: Request) -> Response:
        """The events of the registry: a server-sent event stream for ``Accept:
        text/event-stream``, else one poll (`cursor` None: no events, a cursor from now)."""
        queue, group = _text(request, "queue"), _text(request, "group")
        cursor, source = params.event_cursor(request)
        reads = self.service.reads
        if "text/event-stream" in request.headers.get("accept", ""):
            feed = self.service.live
            if feed.streams >= feed.max_streams:
                return JSONResponse(
                    {
                        "error": "too_many_streams",
                        "message": f"this service already serves {feed.max_streams:,} event "
                        "streams (--max-streams): try again later, or poll /api/v1/events "
                        "with a cursor",
                    },
                    status_code=503,
                    headers={"Retry-After": str(BUSY_RETRY_AFTER_S), "Cache-Control": "no-store"},
                )
            return EventSourceResponse(
                self._stream(cursor, queue, group),
                ping=SSE_PING_S,
                headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
            )
        try:
            events, next_cursor = await reads.changes(cursor, queue=queue, group=group)
        except PresenceResyncRequired as exc:
            _, fresh = await reads.changes(None, queue=queue, group=group)
            return JSONResponse(
                {
                    "error": "resync_required",
                    "message": str(exc),
                    "cursor": fresh,
                },
                status_code=410,
                headers={"Cache-Control": "no-store"},
            )
        except (TypeError, ValueError) as exc:
            raise BadRequest(source, params.refused(source, exc)) from None
        return JSONResponse(
            {
                "events": [event.to_dict() for event in events],
                "cursor": next_cursor,
                "now_ns": live_events.cursor_now_ns(next_cursor),
            },
            headers={"Cache-Control": "no-store"},
        )

    async def _stream(
        self, cursor: str | None, queue: str | None, group: str | None
    ) -> AsyncIterator[ServerSentEvent | bytes]:
        yield ServerSentEvent(comment="redis-presence events", retry=SSE_RETRY_MS)
        try:
            # Joined here, where leaving is sure (the generator's end): a stream that never
            # started never holds a place.
            sub = self.service.live.subscribe(cursor, queue=queue, group=group)
        except live_events.StreamsFull:
            return  # a race past the route's check: the client retries after SSE_RETRY_MS
        try:
            async for chunk in sub.chunks():  # each message's bytes made once for all
                yield chunk
        finally:
            sub.close()

    # -- operations

    async def metrics(self, request: Request) -> Response:
        config = self.service.config
        per_consumer = config.per_consumer_metrics
        reading = await metrics.scrape(
            self.service.reads, read_consumers=per_consumer or config.stuck_metrics
        )
        if reading.error:
            log.warning("scrape: Redis read failed: %s", reading.error)
        accept = request.headers.get("accept", "")
        if metrics.wants_openmetrics_only(accept):
            encoder, content_type = exposition.choose_encoder(accept)
            body = encoder(metrics.registry_for(reading, per_consumer=per_consumer))
        else:
            body = metrics.render_text(reading, per_consumer=per_consumer)
            content_type = metrics.TEXT_CONTENT_TYPE
        return Response(body, media_type=None, headers={"Content-Type": content_type})

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        try:
            now_ns = await self.service.reads.ping()
        except PresenceError as exc:
            _, code = _status_of(exc)
            busy = isinstance(exc, PresencePoolExhausted)  # not "Redis is down": it was not asked
            return JSONResponse(
                {
                    "status": "busy" if busy else "unavailable",
                    "error": code,
                    "message": str(exc),
                },
                status_code=503,
                headers={"Retry-After": str(BUSY_RETRY_AFTER_S)} if busy else None,
            )
        return JSONResponse({"status": "ready", "redis_time_ns": now_ns})


__all__ = ["WebConfig", "create_app"]

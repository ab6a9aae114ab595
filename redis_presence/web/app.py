"""The Starlette app of `redis-presence serve`: pages, the JSON API, SSE, metrics, health.

Each route reads through `PresenceData` (the only module that talks to the registry) and
hands rows to a template or to JSON. Nothing here writes to Redis. Errors are JSON under
`/api/` (and for the probes) and a page elsewhere; never a traceback. Passwords in the
Redis URL never reach a response or a log line.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote, urlencode

from prometheus_client import exposition
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from redis_presence import ConsumerPresence
from redis_presence.errors import (
    PresenceError,
    PresencePoolExhausted,
)

from . import drain, history, metrics, paging, params, rollups, sorting
from .asgi import AccessLog, PrefixRoute
from .auth import TokenAuth, check_token
from .event_routes import EventViews
from .guard import CatchAll
from .params import BadRequest
from .readings import NO_META_ERRORS, GroupStats, TtlInUse
from .security import HostCheck, SecurityHeaders
from .selection import ConsumerFilter, GroupFilter
from .service import (
    BUSY_RETRY_AFTER_S,
    Link,
    NotFound,
    RegistryFactory,
    WebConfig,
    _json,
    _json_view,
    _page,
    _Service,
    _status_of,
)

log = logging.getLogger("redis_presence.web")

GROUP_API = "/api/v1/groups/"
CONSUMER_API = "/api/v1/consumers/"
NO_GROUP = "queue {queue!r} has no tracked or declared group {group!r}"
NEEDS_BOTH = "a group page needs queue= and group="


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


# -- query parameters (checked in .params) ----------------------------------------------

_text, _flag, _states, _path_names = params.text, params.flag, params.states, params.path_names


def _window(request: Request) -> history.Window:
    """The pictures' time window (``window=1h|6h|24h``; the last hour by default)."""
    return history.window_of(params.choice(request, "window", history.WINDOWS))


def window_links(request: Request, shown: history.Window) -> list[tuple[str, str, bool]]:
    """``(name, query, shown)`` of each window: this page's query with that window."""
    kept = [(k, v) for k, v in request.query_params.multi_items() if k != "window"]
    return [
        (
            name,
            urlencode(kept + ([] if w == history.DEFAULT_WINDOW else [("window", name)])),
            w == shown,
        )
        for name, w in history.WINDOWS.items()
    ]


def sort_links(request: Request, shown: sorting.Sort | None) -> dict[str, str]:
    """The query of each sortable column of the groups table (a count: the most first, then
    reversed; ``queue``: the index's order), from the first page, the filters kept."""
    kept = [(k, v) for k, v in request.query_params.multi_items() if k not in ("sort", "cursor")]
    links = {"queue": urlencode([*kept, ("sort", sorting.QUEUE)]), "attention": urlencode(kept)}
    for column in sorting.COLUMNS:
        now_descending = shown is not None and shown.column == column and shown.descending
        name = sorting.Sort(column, not now_descending).name
        links[column] = urlencode([*kept, ("sort", name)])
    return links


def _no_group(queue: str, group: str, *, page: bool) -> NotFound:
    """The 404 of a group neither tracked nor declared: it links to its queue's groups (the
    dashboard filtered by the queue's name, or the API's exact list)."""
    if page:
        link = Link("/", urlencode({"queue": queue}, quote_via=quote), f"The groups of {queue}")
    else:
        link = Link("/api/v1/groups", urlencode({"queue": queue}, quote_via=quote), "")
    return NotFound(NO_GROUP.format(queue=queue, group=group), link)


# -- the app ----------------------------------------------------------------------------


def create_app(
    config: WebConfig,
    registry_factory: RegistryFactory | None = None,
    *,
    clock: Callable[[], int] | None = None,
) -> Starlette:
    """The ASGI app for `config`. `registry_factory` replaces `config.open_registry` (it is
    called inside the app's event loop); `clock` replaces the Redis server's clock (tests)."""
    service = _Service(config, registry_factory, clock)
    drain_token = None
    if config.drain_token is not None:  # now, not at the first request
        drain_token = drain.check_drain_token(
            config.drain_token, auth_token=config.auth_token, read_only=config.read_only
        )
    views = Views(service, drain_token)
    events = EventViews(service)
    routes = [
        Route("/", views.overview, name="overview"),
        Route("/group", views.group_page, name="group"),
        Route("/consumers", views.consumers_page, name="consumers"),
        Route("/consumer", views.consumer_page, name="consumer"),
        Route("/hosts", views.hosts_page, name="hosts"),
        Route("/events", events.events_page, name="events"),
        Route("/api/v1/groups", views.api_groups),
        PrefixRoute(GROUP_API, views.api_group),
        Route("/api/v1/consumers", views.api_consumers),
        PrefixRoute(CONSUMER_API, views.api_consumer),
        Route("/api/v1/hosts", views.api_hosts),
        Route("/api/v1/events", events.api_events),
        Route(drain.DRAIN_PATH, views.api_drain, methods=["POST"]),
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

    def __init__(self, service: _Service, drain_token: bytes | None = None) -> None:
        self.service = service
        self.rollups = rollups.SharedRollups()
        self.drain_token = drain_token
        """The drain token's bytes (`web.drain`); None: drain requests are off."""

    # -- pages

    async def overview(self, request: Request) -> Response:
        params.known(request, "/")
        service = self.service
        where = GroupFilter(
            queue_text=_text(request, "queue") or "",
            group_text=_text(request, "group") or "",
            states=_states(request),
            attention=_flag(request, "idle"),
            stuck=_flag(request, "stuck"),
            dead_leases=_flag(request, "dead_leases"),
        )
        window = _window(request)
        # One page of groups (read and counted from the cursor on) and, meanwhile, the
        # fleet's totals (one shared read of every group, at most `totals_cache_s` old),
        # which must agree with the page: of its epoch, and holding what it shows; else
        # read again, or "recounting" (None) when Redis's data changed in between.
        ask = paging.ask(request, paging.GROUPS_PAGE)
        sort = sorting.parse(request.query_params.get("sort"))
        # `dead_leases=1` pages the groups the totals' count found (the index's order).
        order = sorting.BY_QUEUE if sort is None and where.dead_leases else sort
        # Ordered by every group's counts (the totals' read), the page's read now; totals
        # that cannot be trusted (Redis's data keeps changing): the index's order.
        found = None if order is None else await service.reads.ordered_page(where, order, page=ask)
        if found is None and where.dead_leases:
            raise params.RECOUNTING
        if found is None:
            cached, reading = await asyncio.gather(
                service.reads.totals(), service.reads.group_page(where, page=ask)
            )
            order = None
        else:
            cached, reading = found
        now_ns, page, ttl = reading.now_ns, reading.page, reading.ttl
        totals = await service.reads.totals_for(reading, cached)
        shown_totals = totals.to_dict() if totals is not None else None
        # Each group's stuck consumers: counted with the totals (or by `stuck=1`'s read).
        # (a sorted page's rows come from the totals' order: the count gives them theirs)
        counted = where.stuck and order is None
        rows = page.rows if counted or totals is None else totals.with_stuck(page.rows)
        if _json_view(request):
            return _json(
                {"now_ns": now_ns}
                | ttl.to_dict()
                | {"totals": shown_totals, "recounting": totals is None}
                | {"groups": [group_json(g) for g in rows]}
                | paging.cursors(page)
            )
        filters = {
            "queue": where.queue_text,
            "group": where.group_text,
            "states": sorted(s.value for s in where.states),
            "idle": where.attention,
            "stuck": where.stuck,
            "dead_leases": where.dead_leases,
            "sort": sort.name if sort else sorting.QUEUE,
        }
        sparks = await history.sparklines(
            service.reads, [(g.queue, g.group, g.active) for g in rows], window
        )
        context = service.context(
            request,
            now_ns=now_ns,
            ttl=ttl,
            groups=rows,
            sparks=sparks,
            spark_scale=max((c.scale for c in sparks.values()), default=None),
            window=window,
            windows=window_links(request, window),
            sort=sort,
            sort_links=sort_links(request, sort),
            totals=totals,
            **paging.links(request, page),
            filters=filters,
            live={
                "view": "groups",
                "now_ns": now_ns,
                "ttl_ms": ttl.ttl_ms,
                "filters": filters,
                "groups": [group_json(g) for g in rows],
                "totals": shown_totals,
                "recounting": totals is None,
            }
            | paging.cursors(page),
        )
        return _page(service.templates.TemplateResponse(request, "overview.html", context))

    async def group_page(self, request: Request) -> Response:
        params.known(request, "/group")
        queue, group = _text(request, "queue"), _text(request, "group")
        if queue is None or group is None:
            raise BadRequest("queue" if queue is None else "group", NEEDS_BOTH)
        return await self._consumers_view(request, queue, group, group_page=True)

    async def consumers_page(self, request: Request) -> Response:
        params.known(request, "/consumers")
        queue, group = _text(request, "queue"), _text(request, "group")
        return await self._consumers_view(request, queue, group, group_page=False)

    async def _consumers_view(
        self, request: Request, queue: str | None, group: str | None, *, group_page: bool
    ) -> Response:
        service = self.service
        states, search = _states(request), _text(request, "search")
        stuck = _flag(request, "stuck")
        meta = params.meta_filter(request)
        ask = paging.ask(request, paging.CONSUMERS_PAGE)
        stats: GroupStats | None = None
        stuck_after_ms: int | None = None
        with_meta = group_page or _flag(request, "meta") or meta is not None
        window = _window(request) if group_page else history.DEFAULT_WINDOW
        if group_page and queue is not None and group is not None:
            found = await service.reads.group(
                queue, group, states=states, search=search, page=ask, stuck=stuck, meta=meta
            )
            reading, stats, page = found.reading, found.stats, found.page
            stuck_after_ms = found.stuck_after_ms
            if stats is None:
                raise _no_group(queue, group, page=True)
        else:
            where = ConsumerFilter(queue, group, states, search, stuck, meta)
            reading, page = await service.reads.consumers(where, page=ask, with_meta=with_meta)
        now_ns, ttl = reading.now_ns, reading.ttl
        service.live.shown(queue, group, page.rows)  # its stream's rows, read again live
        past = None
        # The page draws its history; its JSON twin (what a live page reads again) carries
        # it when asked: one bounded read of the queue's log, ~0.2 s for a full one.
        drawn = not _json_view(request) or _flag(request, "history")
        if group_page and queue is not None and group is not None and drawn:
            past = await history.group_history(
                service.reads,
                queue,
                group,
                active_now=stats.active if stats else None,
                window=window,
            )
        filters = {
            "queue": queue or "",
            "group": group or "",
            "states": sorted(s.value for s in states),
            "search": search or "",
            "stuck": stuck,
            "limit": ask.limit,
            "meta": meta,
        }
        if _json_view(request):
            return _json(
                {"now_ns": now_ns}
                | ttl.to_dict()
                | {
                    "group": group_json(stats) if stats else None,
                    "stuck_after_ms": stuck_after_ms,
                    "history": None if past is None else past.to_dict(),
                    "consumers": [
                        consumer_json(row, with_meta=with_meta, meta_errors=reading.meta_errors)
                        for row in page.rows
                    ],
                }
                | paging.cursors(page)
            )
        context = service.context(
            request,
            now_ns=now_ns,
            ttl=ttl,
            stats=stats,
            past=past,
            window=window,
            windows=window_links(request, window),
            group_page=group_page,
            with_meta=with_meta,
            meta_errors=reading.meta_errors,
            rows=page.rows,
            **paging.links(request, page),
            filters=filters,
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
                "stuck": stuck,
                "meta": meta,
                "limit": ask.limit,
            }
            | paging.cursors(page),
        )
        return _page(service.templates.TemplateResponse(request, "consumers.html", context))

    async def consumer_page(self, request: Request) -> Response:
        params.known(request, "/consumer")
        fields = ("queue", "group", "consumer")
        queue, group, consumer = (_text(request, field) for field in fields)
        if queue is None or group is None or consumer is None:
            missing = next(field for field in fields if _text(request, field) is None)
            raise BadRequest(missing, "a consumer page needs queue=, group= and consumer=")
        view, model = await self._consumer(queue, group, consumer)
        if _json_view(request):
            return _json(model)
        service = self.service
        if view.row is not None:  # its stream's `rows` move its age and leases
            service.live.shown(queue, group, [view.row])
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
            departed=view.departed,
            log=view.log,
            timeline=view.timeline,
            stuck_after_ms=stuck_after_ms,
            drain_offered=self.drain_token is not None,
            live={
                "view": "consumer",
                "now_ns": view.log.now_ns,
                "ttl_ms": view.log.ttl_ms,
                "queue": queue,
                "group": group,
                "consumer": consumer,
            },
        )
        return _page(service.templates.TemplateResponse(request, "consumer.html", context))

    async def hosts_page(self, request: Request) -> Response:
        """The consumers rolled up by a metadata field (`by`, the host by default)."""
        params.known(request, "/hosts")
        found, model = await self._rollup(request)
        if _json_view(request):
            return _json(model)
        service = self.service
        context = service.context(
            request,
            now_ns=found.now_ns,
            ttl=found.ttl,
            reading=found,
            shown=found.rows[: model["limit"]],
            fields=rollups.FIELDS,
            filters={
                "by": found.field,
                "queue": _text(request, "queue") or "",
                "group": _text(request, "group") or "",
            },
            live={},
        )
        return _page(service.templates.TemplateResponse(request, "hosts.html", context))

    async def api_hosts(self, request: Request) -> Response:
        params.known(request, "/api/v1/hosts")
        _, model = await self._rollup(request)
        return _json(model)

    async def _rollup(self, request: Request) -> tuple[rollups.RollupReading, dict[str, Any]]:
        field = params.rollup_field(request, rollups.DEFAULT_FIELD)
        queue, group = _text(request, "queue"), _text(request, "group")
        if group is not None and queue is None:
            raise BadRequest("group", "group= needs queue= (a group is named within its queue)")
        try:
            limit = paging.parse_limit(request.query_params.get("limit"), rollups.SHOWN)
        except ValueError as exc:
            raise BadRequest("limit", str(exc)) from None
        found = await self.rollups.read(self.service.reads, field, queue=queue, group=group)
        model = self._meta(found.now_ns, found.ttl) | {
            "by": field,
            "queue": queue,
            "group": group,
            "consumers": found.consumers,
            "unreadable": found.unreadable,
            "values": [row.to_dict() for row in found.rows[:limit]],
            "more_values": max(0, len(found.rows) - limit),
            "limit": limit,
        }
        return found, model

    async def api_drain(self, request: Request) -> Response:
        """``POST /api/v1/drain`` (`web.drain`): only with ``--drain-token``."""
        return await drain.drain(request, self.service.reads.registry, self.drain_token)

    async def api_consumer(self, request: Request) -> Response:
        params.known(request, CONSUMER_API)
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
        model = (
            view.log.to_dict()
            | {
                "consumer": consumer,
                "row": None if view.row is None else consumer_json(view.row, with_meta=False),
                "meta": dict(view.meta),
                "meta_error": view.meta_error,
                "timeline": [t.to_dict() for t in view.timeline],
            }
            | view.to_dict()
        )
        return view, model

    # -- the JSON API

    @staticmethod
    def _meta(now_ns: int, ttl: TtlInUse) -> dict[str, object]:
        return {"now_ns": now_ns} | ttl.to_dict()

    async def api_groups(self, request: Request) -> Response:
        params.known(request, "/api/v1/groups")
        where = GroupFilter(
            queue=_text(request, "queue"),
            group=_text(request, "group"),
            queue_text=_text(request, "queue_contains") or "",
            group_text=_text(request, "group_contains") or "",
            states=_states(request),
            attention=_flag(request, "idle"),
            stuck=_flag(request, "stuck"),
            dead_leases=_flag(request, "dead_leases"),
        )
        ask = paging.ask(request, paging.GROUPS_API)
        reads = self.service.reads
        found = None  # `dead_leases`: counted with the totals, paged from them
        if where.dead_leases:
            found = await reads.ordered_page(where, sorting.BY_QUEUE, page=ask)
        if where.dead_leases and found is None:
            raise params.RECOUNTING
        reading = found[1] if found is not None else await reads.group_page(where, page=ask)
        now_ns, page, ttl = reading.now_ns, reading.page, reading.ttl
        return JSONResponse(
            self._meta(now_ns, ttl)
            # min_active, below too; `stuck` null unless counted (`stuck=1`)
            | {"groups": [g.to_dict() for g in page.rows]}
            | paging.cursors(page)
        )

    async def api_group(self, request: Request) -> Response:
        params.known(request, GROUP_API)
        queue, group = _path_names(request, GROUP_API)
        found = await self.service.reads.group(
            queue,
            group,
            states=_states(request),
            search=_text(request, "search"),
            page=paging.ask(request, paging.CONSUMERS_API),
            stuck=_flag(request, "stuck"),
            meta=params.meta_filter(request),
        )
        reading, stats, page = found.reading, found.stats, found.page
        if stats is None:
            raise _no_group(queue, group, page=False)
        reads = self.service.reads
        past = None
        if _flag(request, "history"):  # one bounded read of the queue's log: asked for
            past = await history.group_history(reads, queue, group, active_now=stats.active)
        return JSONResponse(
            self._meta(reading.now_ns, reading.ttl)
            | {
                "group": stats.to_dict(),
                "stuck_after_ms": found.stuck_after_ms,
                "history": None if past is None else past.to_dict(),  # the page's chart
                "consumers": [
                    consumer_json(row, with_meta=True, meta_errors=reading.meta_errors)
                    for row in page.rows
                ],
            }
            | paging.cursors(page)
        )

    async def api_consumers(self, request: Request) -> Response:
        params.known(request, "/api/v1/consumers")
        where = ConsumerFilter(
            _text(request, "queue"),
            _text(request, "group"),
            _states(request),
            _text(request, "search"),
            _flag(request, "stuck"),
            params.meta_filter(request),
        )
        with_meta = _flag(request, "meta") or where.meta is not None
        reading, page = await self.service.reads.consumers(
            where, page=paging.ask(request, paging.CONSUMERS_API), with_meta=with_meta
        )
        return JSONResponse(
            self._meta(reading.now_ns, reading.ttl)
            | {
                "consumers": [
                    consumer_json(row, with_meta=with_meta, meta_errors=reading.meta_errors)
                    for row in page.rows
                ],
            }
            | paging.cursors(page)
        )

    # -- operations

    async def metrics(self, request: Request) -> Response:
        config = self.service.config
        per_consumer = config.per_consumer_metrics
        reading = await metrics.scrape(
            self.service.reads,
            read_consumers=per_consumer or config.stuck_metrics,
            capacity=config.capacity_metrics,
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

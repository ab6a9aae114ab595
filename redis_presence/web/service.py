"""What one web app holds and how it answers errors: `WebConfig` (what `redis-presence
serve` runs with), `_Service` (the registry, the reads, the live feed and the templates of
one app) and the JSON or HTML error responses."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import jinja2
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.templating import Jinja2Templates

from redis_presence import AsyncRedisPresenceRegistry, PresenceState
from redis_presence.clients import DEFAULT_MAX_CONNECTIONS, DEFAULT_POOL_TIMEOUT_S
from redis_presence.errors import (
    PresenceAuthError,
    PresenceConnectionError,
    PresenceDataError,
    PresenceError,
    PresencePoolExhausted,
    PresenceProtocolError,
)
from redis_presence.formatting import human_age, iso_utc
from redis_presence.pruning import PrunePass, prune_forever
from redis_presence.redaction import redact
from redis_presence.url_parsing import parse_url

from . import feed as live_events
from .params import BadRequest, UnknownParameter
from .reads import PresenceData

log = logging.getLogger("redis_presence.web")

CONNECT_TIMEOUT_S = 2.0
"""How long a read waits for a TCP connection before Redis counts as unreachable (503)."""
REPLY_TIMEOUT_S = 10.0
"""How long a read waits for Redis to answer."""
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
    capacity_metrics: bool = False
    """``--capacity-metrics``: each scrape also reads every group's live consumers' values
    (two commands a group more, 17 s for a scrape of 100,000 one-consumer queues against
    6 s without): capacity, free slots, draining and conflicts (protocol version 2). Off,
    a scrape reads only the stale consumers' values, of the groups that have some, so a
    consumer that drained and left still excuses its group's shortfall (the verdict's
    `DRAINING`) at the cost of the stale consumers alone."""
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
    prune_every_s: float | None = None
    """``--prune-every``: automatic removal, a prune pass this often (None: off, the
    default); it needs the writer's role, so a read-only service refuses it."""
    prune_retention_ms: int | None = None
    """``--prune-retention``: how long past expiry a consumer is kept (None: the default,
    DEFAULT_RETENTION_TTLS times its group's TTL)."""
    drain_token: str | None = None
    """``--drain-token``: the second secret that lets the dashboard ask a consumer to
    drain (``POST /api/v1/drain``, `web.drain`); None (the default): no drain is offered,
    and the service writes nothing but what ``--prune-every`` asks."""
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
    env.filters["lasting"] = lasting
    return env


def lasting(span_ms: int) -> str:
    """A span as "no progress for" says it: `"40 s"`, `"7 min"`, `"2 h 5 min"` (whole units,
    rounded down; dashboard.js's `lasting` is the same)."""
    seconds = max(0, span_ms) // 1000
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


# -- errors ---------------------------------------------------------------------------


def _status_of(exc: PresenceError) -> tuple[int, str]:
    if isinstance(exc, PresencePoolExhausted):  # this service is busy; Redis may be fine
        return 503, "service_busy"
    if isinstance(exc, PresenceConnectionError):
        return 503, "redis_unavailable"
    if isinstance(exc, PresenceAuthError):
        return 503, "redis_refused_access"
    if isinstance(exc, PresenceProtocolError):  # Redis answered: the prefix is another's
        return 502, "other_protocol_version"
    if isinstance(exc, PresenceDataError):
        return 502, "redis_foreign_data"
    return 502, "redis_error"


def _wants_json(request: Request) -> bool:
    path = request.url.path
    return path.startswith("/api/") or path in ("/readyz", "/metrics", "/healthz")


def _log_pass(done: PrunePass) -> None:
    """One log line per automatic prune pass (a failed one is a warning)."""
    if done.error is not None:
        log.warning("prune pass: %s (%s pruned)", done.error, done.removed or 0)
    else:
        log.info("prune pass: %d pruned in %.3f s", done.removed or 0, done.seconds)


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
        pruning = None
        if self.config.prune_every_s is not None:
            pruning = asyncio.create_task(
                prune_forever(
                    registry,
                    self.config.prune_every_s,
                    self.config.prune_retention_ms,
                    self.config.ttl_ms,
                    on_pass=_log_pass,
                ),
                name="presence-prune",
            )
        try:
            yield
        finally:
            if pruning is not None:
                pruning.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pruning
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
        link: Link | None = None,
        **extra: str,
    ) -> Response:
        """A JSON error (the API, the probes, a page's JSON twin) or an error page; with
        `since_ns`, since when Redis cannot be reached (the page's script shows it); `extra`
        goes into the JSON (a 400's `parameter`); `link`, where to go instead (the page
        shows it, the JSON has its `see` URL)."""
        since = {} if since_ns is None else {"since_ns": since_ns}
        root = request.scope.get("root_path", "").rstrip("/")
        if _wants_json(request) or _json_view(request):
            see = {} if link is None or not link.path else {"see": link.href(root)}
            body = {"error": code, "message": message} | since | extra | see
            return JSONResponse(body, status_code=status, headers={"Cache-Control": "no-store"})
        live = {"error": code, "message": message} | since
        shown = None if link is None else (link.href(root), link.label)
        return self.templates.TemplateResponse(
            request,
            "error.html",
            self.context(
                request, status=status, code=code, message=message, now_ns=0, live=live, see=shown
            ),
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
        # An error page offers the page without a parameter it does not take.
        link = None
        if isinstance(exc, UnknownParameter) and not request.url.path.startswith("/api/"):
            link = Link("", exc.without, "Open this page without it")
        return self.error(request, 400, "bad_request", str(exc), link=link, parameter=exc.parameter)

    async def on_http_error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        link = exc.link if isinstance(exc, NotFound) else None
        response = self.error(request, exc.status_code, code, str(exc.detail), link=link)
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


@dataclass(frozen=True)
class Link:
    """Where an error sends its reader instead: a route path of the app (below its root
    path; empty: the page asked for), its query string and the link's text."""

    path: str
    query: str
    label: str

    def href(self, root: str) -> str:
        if not self.path:
            return f"?{self.query}"
        return root + self.path + (f"?{self.query}" if self.query else "")


class NotFound(HTTPException):
    """A 404 that says where to look instead (`link`)."""

    def __init__(self, detail: str, link: Link) -> None:
        super().__init__(404, detail)
        self.link = link


def _json_view(request: Request) -> bool:
    """Whether a page was asked for as JSON (the page's script refreshing itself)."""
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "text/html" not in accept


def _json(model: dict[str, Any]) -> Response:
    """A page's JSON twin: the same headers as the page."""
    return JSONResponse(model, headers={"Cache-Control": "no-store", "Vary": "Accept"})


def _page(response: Response) -> Response:
    """A page's headers: its JSON twin lives at the same URL."""
    response.headers["Vary"] = "Accept"
    response.headers["Cache-Control"] = "no-store"
    return response

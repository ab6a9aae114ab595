"""The events routes of `redis-presence serve`: the fleet's events page (``/events``) and
``/api/v1/events``, one poll with a cursor or a server-sent event stream fed by the shared
poller of `web.feed`. Like every route, they read through `PresenceData` and write nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import quote, urlencode

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from redis_presence.errors import PresenceError, PresenceResyncRequired
from redis_presence.events import EventKind

from . import feed as live_events
from . import fleet_events, params
from .params import BadRequest
from .service import BUSY_RETRY_AFTER_S, _json, _json_view, _page, _Service

SSE_PING_S = 15
SSE_RETRY_MS = 2000

_text = params.text


class EventViews:
    """The events route handlers of one app."""

    def __init__(self, service: _Service) -> None:
        self.service = service

    async def events_page(self, request: Request) -> Response:
        """The fleet's events since an instant (15 minutes ago by default) or after a
        cursor, filtered by queue, group and kind, a page at a time."""
        params.known(request, "/events")
        queue, group = _text(request, "queue"), _text(request, "group")
        try:
            kinds = fleet_events.parse_kinds(request.query_params.getlist("kind"))
        except ValueError as exc:
            raise BadRequest("kind", str(exc)) from None
        reads = self.service.reads
        cursor = request.query_params.get("cursor") or None  # checked by its decoding
        since_text = request.query_params.get("since") or fleet_events.DEFAULT_SINCE
        since_ns = None
        if cursor is None:
            try:
                since_ns = params.parse_since(since_text[:100], await reads.now_ns())
            except ValueError as exc:
                raise BadRequest("since", str(exc)) from None
            cursor = await reads.cursor_since(since_ns, queue=queue, group=group)
        elif request.query_params.get("since"):
            raise BadRequest("since", "since starts a read where a cursor would: send one of them")
        try:
            found = await fleet_events.events_page(
                reads, cursor, queue=queue, group=group, kinds=kinds
            )
        except PresenceResyncRequired as exc:
            start = (
                "" if since_ns is None else f"the events since {since_text} cannot all be read: "
            )
            if _json_view(request):
                return JSONResponse(
                    {"error": "resync_required", "message": start + str(exc)},
                    status_code=410,
                    headers={"Cache-Control": "no-store"},
                )
            raise HTTPException(410, start + str(exc)) from None
        except (TypeError, ValueError) as exc:
            raise BadRequest("cursor", params.refused("cursor", exc)) from None
        model = found.to_dict() | {"since_ns": since_ns}
        if _json_view(request):
            return _json(model)
        service = self.service
        filters = {
            "queue": queue or "",
            "group": group or "",
            "kinds": sorted(k.value for k in kinds),
            "since": since_text if since_ns is not None else "",
        }
        go_on = [("cursor", found.cursor)] + [
            (name, value)
            for name, value in request.query_params.multi_items()
            if name in ("queue", "group", "kind")
        ]
        context = service.context(
            request,
            now_ns=found.now_ns,
            found=found,
            since_ns=since_ns,
            derived=fleet_events.DERIVED,
            kinds=[k.value for k in EventKind],
            filters=filters,
            next_query=urlencode(go_on, quote_via=quote),
            live={},
        )
        return _page(service.templates.TemplateResponse(request, "events.html", context))

    async def api_events(self, request: Request) -> Response:
        """The events of the registry: a server-sent event stream for ``Accept:
        text/event-stream``, else one poll (`cursor` None: no events, a cursor from now)."""
        params.known(request, "/api/v1/events")
        queue, group = _text(request, "queue"), _text(request, "group")
        cursor, source = params.event_cursor(request)
        reads = self.service.reads
        since_ns = None
        if "since" in request.query_params:
            since_ns = params.since(request, await reads.now_ns())
            if since_ns is not None:
                cursor = await reads.cursor_since(since_ns, queue=queue, group=group)
        if "text/event-stream" in request.headers.get("accept", ""):
            if cursor is not None:  # refused here, a 400, not in the stream
                try:
                    await reads.check_cursor(cursor, queue=queue, group=group)
                except (TypeError, ValueError) as exc:
                    raise BadRequest(source, params.refused(source, exc)) from None
                except PresenceError:
                    pass  # Redis cannot say now: the stream tells its status
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
            found = await reads.changes(cursor, queue=queue, group=group)
        except PresenceResyncRequired as exc:
            _, fresh = await reads.changes(None, queue=queue, group=group)
            said = str(exc)
            if since_ns is not None:  # no cursor of the caller's: the logs do not reach back
                said = f"the events since {since_ns} ns cannot all be read: {said}"
            return JSONResponse(
                {
                    "error": "resync_required",
                    "message": said,
                    "cursor": fresh,
                },
                status_code=410,
                headers={"Cache-Control": "no-store"},
            )
        except (TypeError, ValueError) as exc:
            raise BadRequest(source, params.refused(source, exc)) from None
        events, next_cursor = found
        return JSONResponse(
            {
                "events": [event.to_dict() for event in events],
                "cursor": next_cursor,
                "now_ns": live_events.cursor_now_ns(next_cursor),
                "more": bool(getattr(found, "more", False)),  # ask again at once
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


__all__ = ["SSE_PING_S", "SSE_RETRY_MS", "EventViews"]

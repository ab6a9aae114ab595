"""`/api/v1/events`: the registry's events as a server-sent event stream, and cursor polls.

Each open stream runs `registry.changes(cursor)` once per interval from its own cursor (the
library's opaque cursor, which survives a restart of the service), so a tick costs what
changed since the last one, never a read of the fleet. The messages a stream sends:

* ``hello`` ``{"cursor"}``: the stream is open and goes on from this cursor;
* ``presence``: one `PresenceEvent` (`PresenceEvent.to_dict`), in the registry's order;
* ``cursor`` ``{"cursor", "now_ns"}`` (with the cursor as the SSE id): every event up to
  `now_ns` was sent, so a reconnecting `EventSource` goes on from there; after each read
  that found events, and every CURSOR_EVERY_S otherwise;
* ``status`` ``{"redis_up", "message"}``: Redis failed, or answers again (the cursor is
  kept: nothing is lost while it is down);
* ``snapshot`` ``{"reason", "cursor"}``: the cursor could not go on (its log was trimmed, or
  it is older than the logs last): events were lost, so take a fresh read of what you show,
  then apply the events after `cursor`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator
from typing import Any, NamedTuple

from redis_presence.errors import PresenceError, PresenceResyncRequired
from redis_presence.events import Cursor

from .data import PresenceData

CURSOR_EVERY_S = 10.0
"""How often a quiet stream still sends its cursor (so a reconnect resumes recently)."""


class StreamMessage(NamedTuple):
    """One server-sent event: its name, its JSON data and, for cursors, its id."""

    event: str
    data: dict[str, Any]
    id: str | None = None

    def json(self) -> str:
        return json.dumps(self.data, ensure_ascii=False)


def check_cursor(cursor: str | None) -> None:
    """`ValueError` naming `cursor` unless it is None or one `changes()` returned."""
    if cursor is not None:
        Cursor.decode(cursor)


def cursor_now_ns(cursor: str) -> int:
    """The instant up to which a cursor's events were given."""
    return Cursor.decode(cursor).now_ns


async def stream(
    data: PresenceData,
    cursor: str | None,
    *,
    queue: str | None = None,
    group: str | None = None,
    interval_s: float = 0.5,
    scrub: Any = str,
) -> AsyncGenerator[StreamMessage, None]:
    """The messages of one event stream from `cursor` (None: from now) until the client
    goes away; `scrub` removes secrets from error messages."""
    redis_up = True
    greeted = False
    lost: str | None = None  # why the stream had to start over (a snapshot is due)
    last_cursor_at = time.monotonic()
    if cursor is not None:
        yield StreamMessage("hello", {"cursor": cursor}, cursor)
        greeted = True
    while True:
        try:
            if cursor is None:
                _, cursor = await data.changes(None, queue=queue, group=group)
                events: list[Any] = []
            else:
                events, cursor = await data.changes(cursor, queue=queue, group=group)
        except PresenceResyncRequired as exc:
            cursor, lost = None, scrub(str(exc))
            continue
        except PresenceError as exc:
            if redis_up:
                redis_up = False
                yield StreamMessage("status", {"redis_up": False, "message": scrub(str(exc))})
            await asyncio.sleep(interval_s)
            continue
        if not redis_up:
            redis_up = True
            yield StreamMessage("status", {"redis_up": True, "message": ""})
        if not greeted:
            greeted = True
            yield StreamMessage("hello", {"cursor": cursor}, cursor)
        if lost is not None:
            yield StreamMessage("snapshot", {"reason": lost, "cursor": cursor}, cursor)
            lost = None
        for event in events:
            yield StreamMessage("presence", event.to_dict())
        if events or time.monotonic() - last_cursor_at >= CURSOR_EVERY_S:
            last_cursor_at = time.monotonic()
            yield StreamMessage(
                "cursor", {"cursor": cursor, "now_ns": cursor_now_ns(cursor)}, cursor
            )
        await asyncio.sleep(interval_s)


__all__ = ["StreamMessage", "check_cursor", "cursor_now_ns", "stream"]

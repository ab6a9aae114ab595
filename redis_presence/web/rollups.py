"""The hosts page's read: every consumer (of a queue or a group, when given) with its
metadata, rolled up by one metadata field (`redis_presence.rollup`).

What one view costs Redis: the fleet read of `iter_snapshot(with_meta=True)` (the index
a page of `Limits.groups` groups at a time, each group's ``HGETALL`` or ``HSCAN`` steps of
`Limits.consumers`, one ``HMGET`` of its metadata per `Limits.consumers` names, at most
`Limits.rows` rows a round trip): no command does unbounded work, but the view reads every
consumer it rolls up, so it costs what a snapshot with metadata costs (docs/web.md gives
the figures at 30,000 consumers). The rows are tallied as they come, a chunk at a time:
the service holds one tally per value, not the rows (at most FLEET_READS such reads at
once, shared with the fleet-wide consumer lists). Requests for the same roll-up while one
is being read share it (`SharedRollups`): a hundred viewers of ``/hosts`` cost one read.
"""

from __future__ import annotations

import asyncio
from typing import NamedTuple

from redis_presence.errors import PresenceMetaError
from redis_presence.rollup import Rollup, RollupRow

from .reads import STREAM_CHUNK, PresenceData, TtlInUse

DEFAULT_FIELD = "host"
FIELDS = ("host", "version")
"""The fields the page offers at once (any other is asked by name)."""
SHOWN = 500
"""Values a page shows when the request gives no ``limit`` (the others are counted)."""


class RollupReading(NamedTuple):
    """The values of `field` among the consumers read at `now_ns`, and how many there were."""

    now_ns: int
    ttl: TtlInUse
    field: str
    consumers: int
    rows: list[RollupRow]
    unreadable: int
    """Consumers whose metadata could not be read (another program's): in `UNREADABLE`."""


async def rollup(
    reads: PresenceData, field: str, *, queue: str | None = None, group: str | None = None
) -> RollupReading:
    """The consumers (of `queue` or `group`, when given) rolled up by `field`, from one
    streamed read of them with their metadata."""
    ttl = await (
        reads.ttl(queue, group) if queue is not None and group is not None else reads.ttl()
    )
    now = await reads.now_ns()
    tally = Rollup(field)
    unreadable: dict[tuple[str, str, str], str] = {}
    async with reads.fleet_reads:
        stream = reads.registry.iter_snapshot(
            now_ns=now,
            ttl_ms=reads.explicit_ttl_ms,
            queue=queue,
            group=group,
            with_meta=True,
        )
        chunk = []
        try:
            async for row in stream:
                chunk.append(row)
                if len(chunk) >= STREAM_CHUNK:
                    tally.feed(chunk)
                    chunk = []
        except PresenceMetaError as exc:  # raised once every row was handed out
            unreadable = dict(exc.unreadable)
        tally.feed(chunk)
    return RollupReading(now, ttl, field, tally.consumers, tally.rows(unreadable), len(unreadable))


Key = tuple[str, str | None, str | None]


class SharedRollups:
    """The roll-ups being read, by (field, queue, group): a request for one that is being
    read awaits that read rather than starting another (nothing is kept once it is done:
    the next request reads Redis again). One per app, on its event loop."""

    __slots__ = ("_reading",)

    def __init__(self) -> None:
        self._reading: dict[Key, asyncio.Future[RollupReading]] = {}

    async def read(
        self, reads: PresenceData, field: str, *, queue: str | None, group: str | None
    ) -> RollupReading:
        key = (field, queue, group)
        task = self._reading.get(key)
        if task is None:
            task = asyncio.ensure_future(rollup(reads, field, queue=queue, group=group))
            self._reading[key] = task
            task.add_done_callback(lambda done: self._done(key, done))
        return await asyncio.shield(task)

    def _done(self, key: Key, task: asyncio.Future[RollupReading]) -> None:
        if self._reading.get(key) is task:
            del self._reading[key]
        if not task.cancelled():
            task.exception()  # retrieved: each awaiting request raises it itself


__all__ = ["DEFAULT_FIELD", "FIELDS", "SHOWN", "RollupReading", "SharedRollups", "rollup"]

"""The plans that read: snapshots (whole and streamed), counts, one consumer, its
metadata, group timelines from the event logs, and the size of a prefix.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import Any

from ..errors import PresenceDataError, PresenceMetaError
from ..events import (
    EventKind,
    PresenceEvent,
    foreign_entries,
    group_event,
    logged_departures,
    logged_events,
    sorted_events,
    window,
)
from ..history import Departed, GroupLog
from ..keys import GroupKeys, decode_meta
from ..model import (
    DEFAULT_PRESENCE_TTL_MS,
    DEFAULT_STUCK_AFTER_MS,
    NO_META,
    ConsumerMeta,
    ConsumerPresence,
    Counts,
    PresenceState,
    Rows,
    Skipped,
    gc_paused,
)
from ..replies import Columns, sound_columns, stored_columns, stored_heartbeat_ns
from ..validation import (
    ConsumerKey,
    check_consumer_key,
    check_filter,
    check_name,
    check_now_ns,
    check_optional_stuck_after_ms,
    check_optional_ttl_ms,
)
from .caches import SettingsCache
from .core import Job, Scope, Spoilt, _report, _text, _unique, heartbeat_of
from .index import IndexPlans
from .requests import Command, Partial, Plan, Request, RowStream
from .settings import SettingsPlans


class _Read:
    """One group being read by a streaming read: its size, its HSCAN cursor (None before
    the first command) and what came back so far."""

    __slots__ = ("cursor", "done", "gk", "size", "table")

    def __init__(self, gk: GroupKeys, size: int) -> None:
        self.gk = gk
        self.size = size
        self.cursor: int | None = None
        self.done = False
        self.table: dict[Any, Any] = {}


def _meta_of(
    gk: GroupKeys, name: str, value: Any, unreadable: dict[ConsumerKey, str]
) -> ConsumerMeta:
    """A stored metadata value as `ConsumerMeta`; one this package did not write is
    `NO_META`, with why in `unreadable`."""
    try:
        return ConsumerMeta(decode_meta(gk.meta, name, value))
    except PresenceDataError as error:
        unreadable[gk.queue, gk.group, name] = str(error)
        return NO_META


def _sound_columns(gk: GroupKeys, table: Any, skipped: list[Skipped]) -> Columns:
    """`sound_columns` of one group, each consumer it cannot decode set aside in `skipped`."""
    columns, bad = sound_columns(gk, table)
    skipped += (Skipped(gk.data, str(error), gk.queue, gk.group, name) for name, error in bad)
    return columns


def _by_names(item: tuple[GroupKeys, Iterable[ConsumerPresence]]) -> tuple[str, str]:
    return item[0].queue, item[0].group


def _chunks(names: list[str], size: int) -> list[list[str]]:
    return [names[i : i + size] for i in range(0, len(names), size)]


def _log_counts(info: Any) -> tuple[int, int]:
    """``(entries-added, length)`` of a log's ``XINFO STREAM`` (zeros when it is gone)."""
    if not isinstance(info, dict):
        return 0, 0
    fields = {_text(k): v for k, v in info.items()}
    return int(fields.get("entries-added", 0)), int(fields.get("length", 0))


class ReadPlans(Job):
    """The plans that read: snapshots (whole and streamed), counts, one consumer, its
    metadata, group timelines from the event logs, the size of a prefix, and the server
    clock. Built from its `Scope`, its planner's `SettingsCache` (a snapshot reads the
    settings it needs with each page), and the jobs whose steps it takes (`SettingsPlans`,
    `IndexPlans`)."""

    __slots__ = ("_cache", "_index", "_settings")

    def __init__(
        self, scope: Scope, cache: SettingsCache, settings: SettingsPlans, index: IndexPlans
    ) -> None:
        super().__init__(scope)
        self._cache = cache
        self._settings = settings
        self._index = index

    def clock_ns(self) -> Plan[int]:
        """The clock every read uses when its ``now_ns`` is None: the server's ``TIME`` (on
        a cluster, that of the index's node), in nanoseconds."""
        return (yield from self.scope.now(None))

    def epoch(self) -> Plan[str | None]:
        """The epoch marker Redis holds now (None: none yet), as `changes` reads it: two reads
        under different markers read different data (Redis lost or replaced its data in
        between). Compared for equality only."""
        (marker,) = yield [Command("GET", (self.scope.keys.epoch,))]
        return None if marker is None else _text(marker)

    def index_sizes(self) -> Plan[tuple[int, int]]:
        """The number of indexed groups and of declared groups (``ZCARD`` of each index,
        one batch): they change when a group comes or goes, what a cached read of every
        group cannot know without reading again."""
        keys = self.scope.keys
        indexed, declared = yield [
            Command("ZCARD", (keys.groups,)),
            Command("ZCARD", (keys.expects,)),
        ]
        return int(indexed), int(declared)

    def snapshot(
        self,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        queue: str | None = None,
        group: str | None = None,
        stuck_after_ms: int | None = None,
        with_meta: bool = False,
    ) -> Plan[list[ConsumerPresence]]:
        """Every tracked consumer (of one queue, or one group, when given), ordered by
        (queue, group, consumer), expired ones too: `iter_snapshot`'s rows, in order."""
        stream = self.iter_snapshot(
            now_ns,
            ttl_ms,
            queue=queue,
            group=group,
            stuck_after_ms=stuck_after_ms,
            with_meta=with_meta,
        )
        return self.collect(stream)

    @staticmethod
    def collect(stream: RowStream) -> Plan[list[ConsumerPresence]]:
        yield from stream.plan
        rows: Rows[ConsumerPresence] = Rows()
        with gc_paused():
            for _, part in sorted(stream.groups, key=_by_names):
                rows += part
        rows.skipped = _unique(stream.skipped)
        if stream.unreadable:  # every row was read: the error hands them out
            raise PresenceMetaError(stream.unreadable, rows)
        return rows

    def iter_snapshot(
        self,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        queue: str | None = None,
        group: str | None = None,
        stuck_after_ms: int | None = None,
        with_meta: bool = False,
    ) -> RowStream:
        """The rows of `snapshot`, group by group as they are read (`RowStream`).

        Every row is aged against one instant, `now_ns` or the server clock read once first,
        and classified with `ttl_ms`, or with each group's shared TTL when it is None; `stuck`
        is judged with `stuck_after_ms`, or each group's shared budget when it is None
        (`set_stuck_after`). What it cannot decode is set aside, with a `PresenceDataWarning`
        (docs/protocol.md, section 9): a consumer whose stored value another program wrote
        (its group's others are read), and, unless one group is named, a group with a key of
        another type or a spoilt shared setting (one named group raises its data error).
        With `with_meta`, each row's `meta` is read too (``HMGET`` of at
        most `Limits.consumers` names a command); without it, no metadata is read. Metadata
        this package did not write is a `PresenceMetaError` once every row was read (those
        consumers' `meta` empty; `snapshot` hands every row to the error).
        The index is read a page of `Limits.groups` groups at a time; a group of at most
        `Limits.consumers` consumers is read by one ``HGETALL`` (one instant), a larger one by
        ``HSCAN`` steps of that many (each row consistent, the group not one instant); one
        round trip asks for at most `Limits.rows` consumers.
        """
        ttl = check_optional_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        stuck = check_optional_stuck_after_ms(stuck_after_ms)
        if type(with_meta) is not bool:
            raise TypeError(f"with_meta must be a bool, got {type(with_meta).__name__}")
        queue, group = check_filter("queue", queue), check_filter("group", group)
        groups: list[tuple[GroupKeys, Iterable[ConsumerPresence]]] = []
        skipped: list[Skipped] = []
        unreadable: dict[ConsumerKey, str] | None = {} if with_meta else None
        plan = self._stream(now, ttl, queue, group, groups, skipped, stuck, unreadable)
        return RowStream(plan, groups, skipped, unreadable)

    def _stream(
        self,
        now_ns: int | None,
        ttl_ms: int | None,
        queue: str | None,
        group: str | None,
        out: list[tuple[GroupKeys, Iterable[ConsumerPresence]]],
        skipped: list[Skipped],
        stuck_after_ms: int | None = None,
        unreadable: dict[ConsumerKey, str] | None = None,
    ) -> Plan[None]:
        now = yield from self.scope.now(now_ns)
        after: Any = None
        # A read of one named group fails on its group's bad data (a key of another type, a
        # shared setting it cannot read); a fleet read sets that group aside. A stored
        # value it cannot read costs its own row only, in either (`_read`).
        aside = None if queue is not None and group is not None else skipped
        while True:
            groups, after = yield from self._index.listed(queue, group, after, skipped)
            if groups:
                # Each group's size with the shared settings the page needs, in one batch.
                shared = ttl_ms is None or stuck_after_ms is None
                asks = self._cache.asks(groups, stucks=stuck_after_ms is None) if shared else None
                also = asks.requests if asks is not None else ()
                n = len(groups)
                lengths = [Command("HLEN", (gk.data,)) for gk in groups]
                if aside is None:
                    replies = yield [*lengths, *also]
                    sizes = replies[:n]
                else:
                    replies = yield Partial([*lengths, *also])
                    sizes = self._index.set_aside(groups, replies[:n], aside)
                kept = [i for i, size in enumerate(sizes) if size is not None]
                groups = [groups[i] for i in kept]
                if asks is not None and also:
                    self._cache.take(asks, replies[n:], {gk.data for gk in groups})
                sized = dict(zip(groups, (int(sizes[i]) for i in kept), strict=True))
                seen = asks.seen if asks is not None else {}  # what this plan saw or read
                ttls: list[int | Spoilt] = (
                    [ttl_ms] * len(groups)
                    if ttl_ms is not None
                    else self._settings.settled(seen["ttl"], DEFAULT_PRESENCE_TTL_MS, groups, "ttl")
                )
                stucks: list[int | Spoilt] = (
                    [stuck_after_ms] * len(groups)
                    if stuck_after_ms is not None
                    else self._settings.settled(
                        seen["stuck"], DEFAULT_STUCK_AFTER_MS, groups, "stuck"
                    )
                )
                settings = [
                    t if isinstance(t, Spoilt) else (u if isinstance(u, Spoilt) else (t, u))
                    for t, u in zip(ttls, stucks, strict=True)
                ]
                # A group whose shared setting cannot be read: its data error when it is
                # the one group named, else it is set aside.
                if aside is None:
                    for setting in settings:
                        if isinstance(setting, Spoilt):
                            raise setting.error()
                groups, pairs = self._settings.keep(
                    groups, settings, [] if aside is None else aside
                )
                yield from self._read(
                    groups,
                    [sized[gk] for gk in groups],
                    [t for t, _ in pairs],
                    now,
                    out,
                    skipped,
                    [u for _, u in pairs],
                    unreadable,
                )
            if after is None:
                _report(skipped)
                return

    def _read(
        self,
        groups: list[GroupKeys],
        sizes: list[int],
        ttls: list[int],
        now_ns: int,
        out: list[tuple[GroupKeys, Iterable[ConsumerPresence]]],
        skipped: list[Skipped],
        stucks: list[int] | None = None,
        unreadable: dict[tuple[str, str, str], str] | None = None,
    ) -> Plan[None]:
        """Read groups of known sizes in order, a window of them per round trip: each small
        group in one ``HGETALL``, each large one in ``HSCAN`` steps; a group goes to `out`
        once it is complete and every group before it is out. With `unreadable` (a dict),
        each row's metadata is read too, and what cannot be decoded is noted there. A
        consumer whose stored value this package cannot decode is set aside in `skipped`,
        and the group's other consumers are read (docs/protocol.md, section 9)."""
        most = self.limits.consumers
        ttl_of = dict(zip(groups, ttls, strict=True))
        stuck_of = dict(zip(groups, stucks or [DEFAULT_STUCK_AFTER_MS] * len(groups), strict=True))
        pending = deque(_Read(gk, size) for gk, size in zip(groups, sizes, strict=True))
        window: deque[_Read] = deque()
        while pending or window:
            budget = self.limits.rows
            batch: list[Request] = []
            sent: list[_Read] = []
            for read in window:  # the large groups already on their way
                if not read.done:
                    batch.append(Command("HSCAN", (read.gk.data, read.cursor or 0, "COUNT", most)))
                    sent.append(read)
                    budget -= most
            while pending:
                read = pending[0]
                cost = min(read.size, most)
                if batch and cost > budget:
                    break
                pending.popleft()
                window.append(read)
                if read.size > most:
                    batch.append(Command("HSCAN", (read.gk.data, 0, "COUNT", most)))
                else:
                    batch.append(Command("HGETALL", (read.gk.data,)))
                sent.append(read)
                budget -= cost
            replies = yield batch
            with gc_paused():
                for read, reply in zip(sent, replies, strict=True):
                    if read.size > most:
                        cursor, part = reply
                        read.table.update(part)
                        read.cursor = int(cursor)
                        read.done = read.cursor == 0
                    else:
                        read.table, read.done = reply, True
                finished = []
                while window and window[0].done:
                    done = window.popleft()
                    finished.append((done.gk, _sound_columns(done.gk, done.table, skipped)))
                    done.table = {}
            metas = None if unreadable is None else (yield from self._metas(finished, unreadable))
            with gc_paused():
                for i, (gk, columns) in enumerate(finished):
                    rows = ConsumerPresence.columns(
                        gk.queue,
                        gk.group,
                        *columns,
                        now_ns=now_ns,
                        ttl_ms=ttl_of[gk],
                        stuck_after_ms=stuck_of[gk],
                        metas=None if metas is None else metas[i],
                    )
                    out.append((gk, rows))  # built when taken: RowStream.handed_out

    def _metas(
        self, finished: list[tuple[GroupKeys, Columns]], unreadable: dict[ConsumerKey, str]
    ) -> Plan[list[list[ConsumerMeta]]]:
        """The metadata of every consumer of the finished groups, in their order: ``HMGET``
        of at most `Limits.consumers` names a command, `Limits.rows` names a round trip. A
        value this package did not write is `NO_META`, and why is noted in `unreadable`."""
        most, per_trip = self.limits.consumers, self.limits.rows
        asks = [
            (i, start)
            for i, (_, columns) in enumerate(finished)
            for start in range(0, len(columns[0]), most)
        ]
        found: list[list[ConsumerMeta]] = [[] for _ in finished]
        trip = max(1, per_trip // most)
        for first in range(0, len(asks), trip):
            part = asks[first : first + trip]
            replies = yield [
                Command("HMGET", (finished[i][0].meta, *finished[i][1][0][start : start + most]))
                for i, start in part
            ]
            for (i, start), values in zip(part, replies, strict=True):
                gk, names = finished[i][0], finished[i][1][0][start : start + most]
                found[i] += (
                    NO_META if value is None else _meta_of(gk, name, value, unreadable)
                    for name, value in zip(names, values, strict=True)
                )
        return found

    def count_active_by_group(
        self,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        queue: str | None = None,
        group: str | None = None,
    ) -> Plan[dict[tuple[str, str], int]]:
        """Active consumers per (queue, group) (of one queue, or one group, when given),
        counted server-side in O(log n) a group; groups without one have no key. `ttl_ms`
        None is each group's shared TTL."""
        ttl = check_optional_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        return self._count(now, ttl, check_filter("queue", queue), check_filter("group", group))

    def _count(
        self, now_ns: int | None, ttl_ms: int | None, queue: str | None, group: str | None
    ) -> Plan[dict[tuple[str, str], int]]:
        now = yield from self.scope.now(now_ns)
        counts: Counts = Counts()
        skipped: list[Skipped] = []
        aside = None if queue is not None and group is not None else skipped
        after: Any = None
        while True:
            groups, after = yield from self._index.listed(queue, group, after, skipped)
            if groups:
                groups, ttls = yield from self._settings.sound_ttls(
                    groups, ttl_ms, aside, together=True
                )
                found = yield from self.active(groups, now, ttls, aside, skipped)
                counts.update(
                    ((gk.queue, gk.group), n)
                    for gk, n in zip(groups, found, strict=True)
                    if n is not None and n
                )
            if after is None:
                counts.skipped = _unique(skipped)
                _report(skipped)
                return counts

    def count_active(
        self,
        queue: str,
        group: str,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
    ) -> Plan[int]:
        """Active consumers of one group (0 when it has none, or is not tracked)."""
        queue, group = check_filter("queue", queue) or "", check_filter("group", group) or ""
        ttl = check_optional_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        return self._count_one(self.keys.group(queue, group), now, ttl)

    def consumer(
        self,
        queue: str,
        group: str,
        consumer: str,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        stuck_after_ms: int | None = None,
    ) -> Plan[ConsumerPresence | None]:
        """One consumer's row (None: not tracked), aged at `now_ns` and classified with
        `ttl_ms` and `stuck_after_ms` (None: the group's shared ones): one ``HMGET`` (a
        command of the reader role), and no other consumer of its group is read."""
        queue, group, consumer = check_consumer_key(queue, group, consumer)
        ttl = check_optional_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        stuck = check_optional_stuck_after_ms(stuck_after_ms)
        return self._consumer(self.keys.group(queue, group), consumer, now, ttl, stuck)

    def _consumer(
        self,
        gk: GroupKeys,
        consumer: str,
        now_ns: int | None,
        ttl_ms: int | None,
        stuck_after_ms: int | None,
    ) -> Plan[ConsumerPresence | None]:
        now = yield from self.scope.now(now_ns)
        (ttl,), (stuck,) = yield from self._settings.ttls_and_stucks([gk], ttl_ms, stuck_after_ms)
        ((value,),) = yield [Command("HMGET", (gk.data, consumer))]  # the reader role's
        if value is None:
            return None
        name = consumer.encode() if isinstance(value, bytes) else consumer
        columns = stored_columns(gk, {name: value})
        (row,) = ConsumerPresence.columns(
            gk.queue, gk.group, *columns, now_ns=now, ttl_ms=ttl, stuck_after_ms=stuck
        )
        return row

    def consumer_meta(self, queue: str, group: str, consumer: str) -> Plan[ConsumerMeta]:
        """One consumer's metadata (`describe`; empty when none is stored): one ``HMGET``;
        metadata this package did not write is a `PresenceMetaError`."""
        queue, group, consumer = check_consumer_key(queue, group, consumer)
        return self._consumer_meta(self.keys.group(queue, group), consumer)

    def _consumer_meta(self, gk: GroupKeys, consumer: str) -> Plan[ConsumerMeta]:
        ((value,),) = yield [Command("HMGET", (gk.meta, consumer))]  # the reader role's
        unreadable: dict[ConsumerKey, str] = {}
        meta = NO_META if value is None else _meta_of(gk, consumer, value, unreadable)
        if unreadable:
            raise PresenceMetaError(unreadable)
        return meta

    def group_logs(
        self,
        groups: Sequence[tuple[str, str]],
        *,
        since_ns: int,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        entries: int = 1_000,
    ) -> Plan[list[GroupLog]]:
        """What `history` rebuilds each group's recent past from: its active count now, the
        newest `entries` entries (at most) of each queue's event log (``XREVRANGE ...
        COUNT``, one per queue), the heartbeats now of the consumers they name, and the
        crossings in ``(since_ns, now]`` of its consumers (``Limits.consumers`` at most per
        line). Bounded: it never reads a whole log or a whole group."""
        gks = [self.keys.group(check_name("queue", q), check_name("group", g)) for q, g in groups]
        ttl = check_optional_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        if isinstance(entries, bool) or not isinstance(entries, int) or entries < 1:
            raise ValueError(f"entries must be a positive int, got {entries!r}")
        since = check_now_ns(since_ns, "since_ns")
        return self._group_logs(gks, since or 0, now, ttl, entries)

    def _group_logs(
        self, gks: list[GroupKeys], since_ns: int, now_ns: int | None, ttl_ms: int | None, most: int
    ) -> Plan[list[GroupLog]]:
        now = yield from self.scope.now(now_ns)
        ttls = yield from self._settings.ttls_for(gks, ttl_ms)
        skipped: list[Skipped] = []  # consumers whose stored values cannot be read
        actives = yield from self.active(gks, now, ttls, None, skipped)
        queues = list(dict.fromkeys(gk.queue for gk in gks))
        logs = [self.keys.queue_events(q) for q in queues]
        reads = yield [Command("XREVRANGE", (log, "+", "-", "COUNT", most)) for log in logs]
        read = [list(entries) for entries in reads]
        asked = [log for log, entries in zip(logs, read, strict=True) if entries]
        infos = (yield Partial(Command("XINFO STREAM", (log,)) for log in asked)) if asked else []
        infos_of = iter(infos)
        events: dict[str, list[PresenceEvent]] = {}
        reach: dict[str, int | None] = {}
        gone: dict[tuple[str, str], dict[str, Departed]] = {}  # newest first, as read
        for queue, log, entries in zip(queues, logs, read, strict=True):
            aside: list[tuple[str, str]] = []  # entries another program wrote
            found = [
                item
                for entry_id, fields in entries
                for item in logged_events(self.keys, queue, entry_id, fields, aside)
            ]
            skipped += foreign_entries(log, queue, aside)
            for _, fields in entries:
                for d in logged_departures(self.keys, queue, fields):
                    known = gone.setdefault((queue, d.group), {})
                    if d.consumer in known:
                        continue
                    try:
                        meta = decode_meta(self.keys.group(queue, d.group).meta, d.consumer, d.meta)
                    except PresenceDataError:  # another program's: not shown
                        continue
                    known[d.consumer] = Departed(d.consumer, d.kind, d.at_ns, meta)
            events[queue] = sorted_events(found)
            info = next(infos_of) if entries else None
            added, length = _log_counts(info)
            trimmed = added > length or len(entries) >= most
            oldest = min((e.at_ns for e in events[queue]), default=None)
            if not trimmed or oldest is None or oldest <= since_ns:
                reach[queue] = None
            else:
                reach[queue] = oldest
        mine = [[e for e in events[gk.queue] if e.group == gk.group] for gk in gks]
        line = self.limits.consumers
        windows = [
            (gk, kind, ttl, *window(kind, since_ns, now, ttl))
            for gk, ttl in zip(gks, ttls, strict=True)
            for kind in (EventKind.STALE, EventKind.EXPIRED)
        ]
        names = yield [
            Command("ZRANGEBYSCORE", (gk.hb, low // 1_000, high // 1_000, "LIMIT", 0, line))
            for gk, _, _, low, high in windows
        ]
        touched = [
            list(dict.fromkeys([e.consumer for e in own] + [_text(n) for n in crossing]))
            for own, crossing in zip(mine, names[0::2], strict=True)
        ]
        asks = [(i, part) for i, all_ in enumerate(touched) for part in _chunks(all_, line)]
        values = (
            (yield [Command("HMGET", (gks[i].data, *part)) for i, part in asks]) if asks else []
        )
        beats: list[dict[str, int | None]] = [{} for _ in gks]
        stored: list[dict[str, object]] = [{} for _ in gks]
        for (i, part), got in zip(asks, values, strict=True):
            for name, value in zip(part, got, strict=True):
                try:
                    hb = None if value is None else stored_heartbeat_ns(gks[i], name, value)
                except PresenceDataError as error:
                    gk = gks[i]
                    skipped.append(Skipped(gk.data, str(error), gk.queue, gk.group, name))
                    continue  # its heartbeat unknown: its timeline is its events alone
                beats[i][name] = hb
                if value is not None:
                    stored[i][name] = value
        out = []
        for i, gk in enumerate(gks):
            active = actives[i]
            assert active is not None  # read without `aside`: a group it cannot read raises
            crossings = []
            for j in (2 * i, 2 * i + 1):
                _, kind, ttl, low, high = windows[j]
                for name in map(_text, names[j]):
                    value = stored[i].get(name)
                    event = None if value is None else group_event(kind, gk, name, value, ttl)
                    if event is not None and low < heartbeat_of(event) <= high:
                        crossings.append(event)
            out.append(
                GroupLog(
                    gk.queue,
                    gk.group,
                    now,
                    since_ns,
                    ttls[i],
                    active,
                    tuple(mine[i]),
                    beats[i],
                    tuple(sorted(crossings, key=attrgetter("at_ns"))),
                    reach[gk.queue],
                    capped=any(len(names[j]) >= line for j in (2 * i, 2 * i + 1)),
                    departures=tuple(gone.get((gk.queue, gk.group), {}).values()),
                )
            )
        _report(skipped)
        return out

    def _count_one(self, gk: GroupKeys, now_ns: int | None, ttl_ms: int | None) -> Plan[int]:
        now = yield from self.scope.now(now_ns)
        ttls = yield from self._settings.ttls_for([gk], ttl_ms)
        skipped: list[Skipped] = []
        (found,) = yield from self.active([gk], now, ttls, None, skipped)
        _report(skipped)
        return found or 0

    def active(
        self,
        groups: list[GroupKeys],
        now_ns: int,
        ttls: list[int],
        aside: list[Skipped] | None,
        skipped: list[Skipped],
    ) -> Plan[list[int | None]]:
        """Active consumers of each group under its TTL (`above` its active horizon)."""
        horizons = [PresenceState.horizons_ns(now_ns, ttl)[0] for ttl in ttls]
        return (yield from self.above(groups, horizons, aside, skipped))

    def above(
        self,
        groups: list[GroupKeys],
        horizons: list[int],
        aside: list[Skipped] | None,
        skipped: list[Skipped],
    ) -> Plan[list[int | None]]:
        """Consumers of each group whose last beat is after its horizon (ns): ``ZCOUNT`` of
        the scores above the horizon's microsecond, plus those on it whose nanosecond rest is
        above the horizon's (read from their stored values, `Limits.consumers` at a time).
        With `aside`, a group with a key of another type counts None and is set aside there
        instead of failing; a consumer on the horizon whose stored value this package cannot
        decode is not counted, and set aside in `skipped`."""
        pairs = [gk for gk in groups for _ in (0, 1)]
        replies = yield from self._index.sound(pairs, self.above_asks(groups, horizons), aside)
        return (yield from self.above_rest(groups, horizons, replies, skipped))

    def above_asks(self, groups: list[GroupKeys], horizons: list[int]) -> list[Request]:
        """The first requests of `above`: two per group (``ZCOUNT``, then the ties)."""
        most = self.limits.consumers
        return [
            request
            for gk, edge in zip(groups, (horizon // 1_000 for horizon in horizons), strict=True)
            for request in (
                Command("ZCOUNT", (gk.hb, f"({edge}", "+inf")),
                Command("ZRANGEBYSCORE", (gk.hb, edge, edge, "LIMIT", 0, most)),
            )
        ]

    def above_rest(
        self,
        groups: list[GroupKeys],
        horizons: list[int],
        replies: list[Any],
        skipped: list[Skipped],
    ) -> Plan[list[int | None]]:
        """`above` from the replies to its first requests (None for a group set aside; a
        consumer on the horizon whose stored value cannot be decoded set aside in
        `skipped`, uncounted)."""
        edges = [horizon // 1_000 for horizon in horizons]
        most = self.limits.consumers
        counts: list[int | None] = [
            None if n is None or t is None else int(n)
            for n, t in zip(replies[0::2], replies[1::2], strict=True)
        ]
        ties = {
            i: (0, list(names))
            for i, names in enumerate(replies[1::2])
            if names and counts[i] is not None
        }
        while ties:  # consumers on the horizon's microsecond: rare, and read a page at a time
            order = list(ties)
            batch: list[Request] = []
            for i in order:
                offset, names = ties[i]
                batch.append(Command("HMGET", (groups[i].data, *names)))
                if len(names) == most:
                    page = (groups[i].hb, edges[i], edges[i], "LIMIT", offset + most, most)
                    batch.append(Command("ZRANGEBYSCORE", page))
            answers = iter((yield batch))
            going_on: dict[int, tuple[int, list[Any]]] = {}
            for i in order:
                offset, names = ties[i]
                for name, value in zip(names, next(answers), strict=True):
                    if value is None or counts[i] is None:
                        continue
                    try:
                        beat = stored_heartbeat_ns(groups[i], name, value)
                    except PresenceDataError as error:
                        gk = groups[i]
                        skipped.append(
                            Skipped(gk.data, str(error), gk.queue, gk.group, _text(name))
                        )
                        continue
                    if beat > horizons[i]:
                        counts[i] = (counts[i] or 0) + 1
                if len(names) == most:
                    more = list(next(answers))
                    if more:
                        going_on[i] = (offset + most, more)
            ties = going_on
        return counts

    def size(self) -> Plan[int]:
        """How many consumers are tracked, in every state (groups this package cannot
        decode set aside)."""
        total = 0
        skipped: list[Skipped] = []
        after: Any = None
        while True:
            groups, after = yield from self._index.listed(None, None, after, skipped)
            if groups:
                asks = [Command("ZCARD", (gk.hb,)) for gk in groups]
                cards = yield from self._index.sound(groups, asks, skipped)
                total += sum(int(n) for n in cards if n is not None)
            if after is None:
                _report(skipped)
                return total

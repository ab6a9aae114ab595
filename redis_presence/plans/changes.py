"""The event plans: `changes` across the queues' event logs (derived events for what
expired), the rows a log entry names, and the cursor a follower starts from.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..errors import PresenceError, PresenceResyncRequired
from ..events import (
    DEFAULT_CHANGES_LIMIT,
    EVENT_LOG_TTL_MS,
    LOG_LAG_MS,
    Changes,
    EventCursor,
    EventKind,
    FollowSnapshot,
    Ordered,
    Window,
    check_changes_limit,
    check_cursor_clock,
    check_cursor_filter,
    check_epoch,
    foreign_entries,
    group_event,
    logged_events,
    order,
    sorted_events,
    stream_id,
    window,
)
from ..keys import GroupKeys
from ..model import NS_PER_MS, ConsumerPresence, Skipped
from ..replies import server_now_ns, sound_columns
from ..validation import check_consumer_key, check_filter, check_name, check_now_ns
from .caches import SettingsCache
from .core import Job, Scope, _report, _text, heartbeat_of
from .index import IndexPlans
from .reads import ReadPlans
from .requests import Command, Partial, Plan, Request
from .settings import SettingsPlans


def _last_generated(info: Any) -> str | None:
    """The id of the last entry ever added to a log (its ``XINFO STREAM``), if any."""
    if not isinstance(info, dict):
        return None
    fields = {_text(k): v for k, v in info.items()}
    last = fields.get("last-generated-id")
    if last is None:
        return None
    text = _text(last)
    return None if text == "0-0" else text


def _trimmed_past(info: Any, start: str) -> bool:
    """Whether a log (its ``XINFO STREAM``) lost entries this reader has not read: it was
    trimmed, and its first entry is past where the reader goes on."""
    if not isinstance(info, dict):
        return False
    fields = {_text(k): v for k, v in info.items()}
    added, length = int(fields.get("entries-added", 0)), int(fields.get("length", 0))
    first = fields.get("first-entry")
    if added <= length or not first:
        return False
    return stream_id(first[0]) > stream_id(start.lstrip("("))


class ChangePlans(Job):
    """The event plans: `changes` across the queues' event logs (derived events for what
    expired), the rows a log entry names, and the cursor a follower starts from. Built from
    its `Scope`, its planner's `SettingsCache` (the protocol version read with the clock),
    and the jobs whose steps it takes (`SettingsPlans`, `IndexPlans`, `ReadPlans`' snapshot)."""

    __slots__ = ("_cache", "_index", "_reads", "_settings")

    def __init__(
        self,
        scope: Scope,
        cache: SettingsCache,
        settings: SettingsPlans,
        index: IndexPlans,
        reads: ReadPlans,
    ) -> None:
        super().__init__(scope)
        self._cache = cache
        self._settings = settings
        self._index = index
        self._reads = reads

    def changes(
        self,
        cursor: str | None = None,
        *,
        now_ns: int | None = None,
        queue: str | None = None,
        group: str | None = None,
        limit: int = DEFAULT_CHANGES_LIMIT,
    ) -> Plan[Changes]:
        """The events after `cursor` up to `now_ns` (the server clock when None), in
        `events.order`, at most about `limit` of them (a log entry is never split), and the
        cursor to go on from (`Changes`: ``events, cursor = ...``; its ``more`` says the
        window is not done, so the caller should ask again at once); `cursor` None starts now
        (no events). Time-driven events (stale, expired) use each group's shared TTL. Raises
        `PresenceResyncRequired` when the log was trimmed past the cursor or the data it was
        read from was lost (another epoch, or a log no longer holds the entry the cursor
        read last there); a cursor that is not one `changes` returned for this filter, or
        whose instants are ahead of the server clock, is a `ValueError`."""
        now = check_now_ns(now_ns)
        queue, group = check_filter("queue", queue), check_filter("group", group)
        most = check_changes_limit(limit)
        since = None if cursor is None else EventCursor.decode(cursor)
        if since is not None:
            check_cursor_filter(since, self.keys, queue, group)
        return self._changes(since, now, queue, group, most)

    def check_cursor(
        self,
        cursor: str,
        *,
        now_ns: int | None = None,
        queue: str | None = None,
        group: str | None = None,
    ) -> Plan[None]:
        """The checks `changes` makes of `cursor` before it reads anything (one ``TIME``): a
        `ValueError` naming `cursor` unless `changes` could go on from it with this filter
        (what a service checks before it opens a stream from a client's cursor). Whether
        the data it was read from is still there is `changes`' to tell (a resync)."""
        now = check_now_ns(now_ns)
        queue, group = check_filter("queue", queue), check_filter("group", group)
        since = EventCursor.decode(cursor)
        check_cursor_filter(since, self.keys, queue, group)
        return self._check_clock(since, now)

    def _check_clock(self, since: EventCursor, now_ns: int | None) -> Plan[None]:
        (clock,) = yield [Command("TIME", node_key=self.keys.events)]
        check_cursor_clock(since, server_now_ns(*clock) // NS_PER_MS, now_ns)

    def vanished_groups(
        self, groups: Iterable[tuple[str, str]], *, indexed: bool = True
    ) -> Plan[dict[tuple[str, str], str]]:
        """Which of these `(queue, group)` are gone: ``"keys"`` when the group has no
        heartbeats (its keys are gone), ``"index"`` (with `indexed`) when the index of
        groups does not list it. One ``ZCARD`` (and a ``ZRANGEBYLEX`` of its one member)
        per group, commands of the reader's role, at most `Limits.groups` groups, in one
        round trip: what `follow` checks of the groups it holds (`events.HeldGroups`)."""
        asked = [self.keys.group(check_name("queue", q), check_name("group", g)) for q, g in groups]
        if len(asked) > self.limits.groups:
            raise ValueError(f"groups: at most {self.limits.groups} at once, got {len(asked)}")
        return self._vanished(asked, indexed)

    def _vanished(self, asked: list[GroupKeys], indexed: bool) -> Plan[dict[tuple[str, str], str]]:
        if not asked:
            return {}
        requests: list[Request] = [Command("ZCARD", (gk.hb,)) for gk in asked]
        if indexed:
            requests += [
                Command("ZRANGEBYLEX", (self.keys.groups, f"[{gk.member}", f"[{gk.member}"))
                for gk in asked
            ]
        replies = yield requests
        gone: dict[tuple[str, str], str] = {}
        for i, gk in enumerate(asked):
            if not int(replies[i]):
                gone[(gk.queue, gk.group)] = "keys"
            elif indexed and not replies[len(asked) + i]:
                gone[(gk.queue, gk.group)] = "index"
        return gone

    def rows_of(
        self, keys: Iterable[tuple[str, str, str]]
    ) -> Plan[tuple[int, list[ConsumerPresence]]]:
        """The server clock and the current rows, at it, of the named `(queue, group,
        consumer)` that are still tracked, under each group's shared TTL (what a live view
        re-reads of the rows it shows: events carry no beat of an active consumer). One
        ``HMGET`` per group and `Limits.consumers` names, in one round trip. A group whose
        shared TTL, or a consumer whose stored value, this package cannot read is set aside
        (`PresenceDataWarning`), as a snapshot does."""
        by_group: dict[tuple[str, str], list[str]] = {}
        for queue, group, consumer in keys:
            checked = check_consumer_key(queue, group, consumer)
            by_group.setdefault(checked[:2], []).append(checked[2])
        return self._rows_of(by_group)

    def _rows_of(
        self, by_group: dict[tuple[str, str], list[str]]
    ) -> Plan[tuple[int, list[ConsumerPresence]]]:
        (clock,) = yield [Command("TIME", node_key=self.keys.groups)]
        now = server_now_ns(*clock)
        if not by_group:
            return now, []
        skipped: list[Skipped] = []
        named = {self.keys.group(*name): names for name, names in by_group.items()}
        groups, ttls = self._settings.keep(
            list(named), (yield from self._settings.settled_ttls(list(named))), skipped
        )
        most = self.limits.consumers
        asked = [
            (gk, named[gk][start : start + most])
            for gk in groups
            for start in range(0, len(named[gk]), most)
        ]
        replies = yield [Command("HMGET", (gk.data, *names)) for gk, names in asked]
        tables: dict[GroupKeys, dict[Any, Any]] = {}
        for (gk, names), values in zip(asked, replies, strict=True):
            table = tables.setdefault(gk, {})
            for name, value in zip(names, values, strict=True):
                if value is not None:  # a field spelled as the reply is (bytes or str)
                    table[name.encode() if isinstance(value, bytes) else name] = value
        out: list[ConsumerPresence] = []
        for gk, ttl in zip(groups, ttls, strict=True):
            columns, bad = sound_columns(gk, tables.get(gk, {}))
            skipped += (Skipped(gk.data, str(e), gk.queue, gk.group, c) for c, e in bad)
            out += ConsumerPresence.columns(gk.queue, gk.group, *columns, now_ns=now, ttl_ms=ttl)
        _report(skipped)
        return now, out

    def snapshot_cursor(
        self, *, queue: str | None = None, group: str | None = None
    ) -> Plan[FollowSnapshot]:
        """A snapshot (under the shared TTL) and the cursor its events go on from, at one
        instant: what `follow` yields first."""
        queue, group = check_filter("queue", queue), check_filter("group", group)
        return self._snapshot_cursor(queue, group)

    def _snapshot_cursor(self, queue: str | None, group: str | None) -> Plan[FollowSnapshot]:
        _, cursor = yield from self._changes(None, None, queue, group, DEFAULT_CHANGES_LIMIT)
        now = EventCursor.decode(cursor).now_ns
        rows = yield from self._reads.collect(
            self._reads.iter_snapshot(now, None, queue=queue, group=group)
        )
        return FollowSnapshot(rows, cursor, now)

    def _changes(
        self,
        since: EventCursor | None,
        now_ns: int | None,
        queue: str | None,
        group: str | None,
        limit: int,
    ) -> Plan[Changes]:
        # The epoch marker lives in the slot of the event index: TIME and GET go to one node.
        # The protocol version with them, when due: another version's logs are not read.
        clock, marker, *version = yield [
            Command("TIME", node_key=self.keys.events),
            Command("GET", (self.keys.epoch,)),
            *self._cache.protocol_asks(),
        ]
        self._cache.protocol_took(version)
        epoch = None if marker is None else _text(marker)
        server_ns = server_now_ns(*clock)
        server_ms = server_ns // NS_PER_MS
        now = server_ns if now_ns is None else now_ns
        if since is None:
            ends = yield from self._log_ends(server_ms, queue)
            return Changes(
                [],
                EventCursor(now, server_ms, ends, epoch, self.keys.prefix, queue, group).encode(),
            )
        check_epoch(since, epoch)
        check_cursor_clock(since, server_ms, now_ns)
        if server_ms - since.server_ms > EVENT_LOG_TTL_MS - LOG_LAG_MS:
            raise PresenceResyncRequired(
                "this cursor is older than the event logs last: take a fresh snapshot() and a "
                "fresh cursor (changes(None))"
            )
        at = since.window or Window(max(now, since.now_ns), server_ms, {}, ("", ""), None)
        events: list[Ordered] = []
        recent = dict(at.recent)
        step: Window | None = at
        if at.log is not None:
            # Entries another program wrote: set aside, one warning a log (never a crash).
            foreign: dict[tuple[str, str], list[tuple[str, str]]] = {}
            step = yield from self._logged(since, at, recent, events, queue, group, limit, foreign)
            _report([s for (q, log), why in foreign.items() for s in foreign_entries(log, q, why)])
        if step is not None and step.derived is not None and at.now_ns > since.now_ns:
            step = yield from self._crossed(since.now_ns, step, events, queue, group, limit)
        else:
            step = step if step is not None and step.log is not None else None
        if step is not None:
            middle = EventCursor(
                since.now_ns,
                since.server_ms,
                since.positions,
                epoch,
                self.keys.prefix,
                queue,
                group,
            )
            cursor = middle._replace(window=step._replace(recent=recent))
            return Changes(sorted_events(events), cursor.encode(), True)
        # Places still within the lag that this window did not move keep their value.
        for log_queue, kept in since.positions.items():
            if log_queue not in recent and stream_id(kept)[0] >= at.server_ms - LOG_LAG_MS:
                recent[log_queue] = kept
        after = EventCursor(at.now_ns, at.server_ms, recent, epoch, self.keys.prefix, queue, group)
        return Changes(sorted_events(events), after.encode())

    def _logged(
        self,
        since: EventCursor,
        at: Window,
        recent: dict[str, str],
        events: list[Ordered],
        queue: str | None,
        group: str | None,
        limit: int,
        foreign: dict[tuple[str, str], list[tuple[str, str]]],
    ) -> Plan[Window | None]:
        """The logged events after the cursor's place in each log, up to the window's
        millisecond, a log at a time in the order of their queues, into `events` until it
        holds `limit`; the places within the lag go into `recent`, and what a log holds
        that a client does not write into `foreign` (by queue and log: `logged_events`).
        Returns where the window stands then: in a log (not done), at the derived events
        (the logs are done), or None (the logs are done and the window needs no derived
        events).

        A log is read from its place inclusive: the entry there (the last this reader read)
        must still be its first answer, else what the reader saw is gone (trimmed, or lost
        in a failover to a replica that missed it, or deleted) and it must resync. The logs
        it holds places in are read even when the event index no longer lists them."""
        assert at.log is not None
        oldest = since.server_ms - LOG_LAG_MS
        listed = yield from self._recent_logs(oldest, queue)
        placed = {self.keys.queue_events(q) for q in since.positions}
        logs = sorted((self.keys.queue_of_events(log), log) for log in set(listed) | placed)
        reached, after = at.log
        logs = [(q, log) for q, log in logs if q >= reached]
        most = min(self.limits.consumers, limit)
        while logs:
            batch = logs[: self.limits.groups]
            places = [
                after if q == reached and after else since.positions.get(q, "") for q, _ in batch
            ]
            counts = [most + 1 if place else most for place in places]
            replies = yield [
                Command(
                    "XRANGE", (log, place or f"{max(oldest, 0)}-0", str(at.server_ms), "COUNT", n)
                )
                for (_, log), place, n in zip(batch, places, counts, strict=True)
            ]
            lost = [
                (log, place)
                for (_, log), place, entries in zip(batch, places, replies, strict=True)
                if place and (not entries or stream_id(entries[0][0]) != stream_id(place))
            ]
            if lost:
                yield from self._resync_lost(lost)
            fresh = [
                (log, f"{max(oldest, 0)}-0")
                for (_, log), place, entries in zip(batch, places, replies, strict=True)
                if entries and not place
            ]
            if fresh:  # was a log this reader holds no place in trimmed past where it goes on?
                infos = yield [Command("XINFO STREAM", (log,)) for log, _ in fresh]
                for (log, start), info in zip(fresh, infos, strict=True):
                    if _trimmed_past(info, start):
                        raise PresenceResyncRequired(
                            f"the event log {log} was trimmed past this cursor: take a fresh "
                            "snapshot() and a fresh cursor (changes(None))"
                        )
            for (log_queue, log), place, n, entries in zip(
                batch, places, counts, replies, strict=True
            ):
                last = place
                aside = foreign.setdefault((log_queue, log), [])
                for entry_id, fields in entries[1:] if place else entries:
                    last = _text(entry_id)
                    for item in logged_events(self.keys, log_queue, entry_id, fields, aside):
                        if group is None or item[1].group == group:
                            events.append(item)
                    if stream_id(last)[0] >= at.server_ms - LOG_LAG_MS:
                        recent[log_queue] = last
                    if len(events) >= limit:
                        return at._replace(log=(log_queue, last))
                if len(entries) == n:  # more of this log: go on from its last entry
                    reached, after = log_queue, last
                    break
            else:
                reached, after = "", ""
                done = {q for q, _ in batch}
                logs = [(q, log) for q, log in logs if q not in done]
                continue
            logs = [(q, log) for q, log in logs if q >= reached]
        return at._replace(log=None, derived=("", 0, 0, 0))

    def _resync_lost(self, lost: list[tuple[str, str]]) -> Plan[None]:
        """`PresenceResyncRequired` for the logs that no longer hold the entry a reader read
        last (`(log, place)`), saying whether each was trimmed past it or lost it."""
        infos = yield Partial(Command("XINFO STREAM", (log,)) for log, _ in lost)
        log, place = lost[0]
        info = infos[0]
        if not isinstance(info, PresenceError) and _trimmed_past(info, place):
            raise PresenceResyncRequired(
                f"the event log {log} was trimmed past this cursor: take a fresh snapshot() "
                "and a fresh cursor (changes(None))"
            )
        if isinstance(info, PresenceError) and "no such key" not in str(info).lower():
            raise info
        where = "is gone" if isinstance(info, PresenceError) else f"no longer holds {place}"
        raise PresenceResyncRequired(
            f"Redis lost events this cursor read: the event log {log} {where}, the last entry "
            "read there (a failover to a replica that missed the last writes, or keys deleted "
            "by hand): take a fresh snapshot() and a fresh cursor (changes(None))"
        )

    def _recent_logs(self, oldest_ms: int, queue: str | None) -> Plan[list[str]]:
        """The event logs with an event since `oldest_ms` (one queue's, when given)."""
        if queue is not None:
            return [self.keys.queue_events(queue)]
        logs: list[str] = []
        offset, page = 0, self.limits.groups
        while True:
            (found,) = yield [
                Command(
                    "ZRANGEBYSCORE", (self.keys.events, oldest_ms, "+inf", "LIMIT", offset, page)
                )
            ]
            logs += [_text(log) for log in found]
            if len(found) < page:
                return logs
            offset += page

    def _log_ends(self, server_ms: int, queue: str | None) -> Plan[dict[str, str]]:
        """Where a new cursor goes on in each recently written log: after its last entry, so
        that what the log dropped before does not count against the cursor."""
        logs = yield from self._recent_logs(server_ms - LOG_LAG_MS, queue)
        if not logs:
            return {}
        # XINFO STREAM, not XREVRANGE: the reader's ACL role has it already (for the trim
        # check), and its last-generated-id is the place after the last entry.
        infos = yield Partial(Command("XINFO STREAM", (log,)) for log in logs)
        ends = {}
        for log, info in zip(logs, infos, strict=True):
            if isinstance(info, PresenceError):
                if "no such key" in str(info).lower():
                    continue  # the log went (expired) since it was listed: nothing to skip
                raise info
            last = _last_generated(info)
            if last is not None:
                ends[self.keys.queue_of_events(log)] = last
        return ends

    def _crossed(
        self,
        since_ns: int,
        at: Window,
        events: list[Ordered],
        queue: str | None,
        group: str | None,
        limit: int,
    ) -> Plan[Window | None]:
        """The stale and expired events of ``(since_ns, at.now_ns]``, derived from each
        group's sorted set (a consumer whose last beat, shifted by the horizon, lies in the
        window), a group at a time in the order of the index, into `events` until it holds
        `limit`. Returns where the window stands then, or None when it is done."""
        assert at.derived is not None
        member, kind_at, score_at, skip_at = at.derived
        most = min(self.limits.consumers, limit)
        kinds = (EventKind.STALE, EventKind.EXPIRED)
        skipped: list[Skipped] = []
        while True:
            groups, going_on = yield from self._index.listed(
                queue, group, None, skipped, start=member or None
            )
            # A group whose shared TTL cannot be read: set aside (its data error, when it is
            # the one group the changes are read of).
            aside = None if queue is not None and group is not None else skipped
            groups, ttls = yield from self._settings.sound_ttls(groups, None, aside)
            # (group, kind number, ttl, low, high, first score, how many at it to skip), in
            # the order events are given: a round reads them all at once, and the first
            # that has more than a page (or the limit) is where the next round goes on.
            reads = []
            for gk, ttl in zip(groups, ttls, strict=True):
                for number, kind in enumerate(kinds):
                    here = gk.member == member
                    if here and number < kind_at:
                        continue
                    low, high = window(kind, since_ns, at.now_ns, ttl)
                    resumed = here and number == kind_at and skip_at > 0
                    first, skip = (score_at, skip_at) if resumed else (low // 1_000, 0)
                    reads.append((gk, number, ttl, low, high, first, skip))
            found = yield [
                Command(
                    "ZRANGEBYSCORE",
                    (gk.hb, first, high // 1_000, "WITHSCORES", "LIMIT", skip, most),
                )
                for gk, _, _, _, high, first, skip in reads
            ]
            pairs = [[(_text(c), int(float(s))) for c, s in part] for part in found]
            values = yield [
                Command("HMGET", (read[0].data, *(c for c, _ in part)))
                for read, part in zip(reads, pairs, strict=True)
                if part
            ]
            stored = iter(values)
            for read, part in zip(reads, pairs, strict=True):
                if not part:
                    continue
                gk, number, ttl, low, high, first, skip = read
                score, ties = first, skip
                for (consumer, at_score), value in zip(part, next(stored), strict=True):
                    score, ties = (score, ties + 1) if at_score == score else (at_score, 1)
                    if value is None:
                        continue
                    event = group_event(kinds[number], gk, consumer, value, ttl)
                    if event is not None and low < heartbeat_of(event) <= high:
                        events.append(order(event))
                        if len(events) >= limit:
                            _report(skipped)
                            return at._replace(derived=(gk.member, number, score, ties))
                if len(part) == most:  # more of this one: the next round goes on from it
                    member, kind_at, score_at, skip_at = gk.member, number, score, ties
                    break
            else:
                if going_on is None:
                    _report(skipped)
                    return None
                # `start` is inclusive: the next page begins after this page's last group
                after_last = going_on + (b"\x00" if isinstance(going_on, bytes) else "\x00")
                member, kind_at, score_at, skip_at = after_last, 0, 0, 0

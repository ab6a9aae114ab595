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
    Cursor,
    EventKind,
    FollowSnapshot,
    Ordered,
    Window,
    check_changes_limit,
    check_cursor_filter,
    check_epoch,
    group_event,
    logged_events,
    order,
    sorted_events,
    stream_id,
    window,
)
from ..keys import GroupKeys
from ..model import NS_PER_MS, ConsumerPresence, Skipped
from ..replies import server_now_ns, stored_columns
from ..validation import check_consumer_key, check_filter, check_now_ns
from .core import _report, _text, heartbeat_of
from .reads import ReadPlans
from .requests import Command, Partial, Plan


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


class ChangePlans(ReadPlans):
    """The event plans: `changes` across the queues' event logs (derived events for what"""

    __slots__ = ()

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
        read from was lost (another epoch); a cursor that is not one `changes` returned for
        this filter is a `ValueError`."""
        now = check_now_ns(now_ns)
        queue, group = check_filter("queue", queue), check_filter("group", group)
        most = check_changes_limit(limit)
        since = None if cursor is None else Cursor.decode(cursor)
        if since is not None:
            check_cursor_filter(since, self.keys.prefix, queue, group)
        return self._changes(since, now, queue, group, most)

    def rows_of(
        self, keys: Iterable[tuple[str, str, str]]
    ) -> Plan[tuple[int, list[ConsumerPresence]]]:
        """The server clock and the current rows, at it, of the named `(queue, group,
        consumer)` that are still tracked, under each group's shared TTL (what a live view
        re-reads of the rows it shows: events carry no beat of an active consumer). One
        ``HMGET`` per group and `Limits.consumers` names, in one round trip."""
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
        groups = [self.keys.group(*name) for name in by_group]
        ttls = yield from self._shared_ttls(groups)
        most = self.limits.consumers
        asked = [
            (gk, names[start : start + most])
            for gk, names in zip(groups, by_group.values(), strict=True)
            for start in range(0, len(names), most)
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
            columns = stored_columns(gk, tables.get(gk, {}))
            out += ConsumerPresence.columns(gk.queue, gk.group, *columns, now_ns=now, ttl_ms=ttl)
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
        now = Cursor.decode(cursor).now_ns
        rows = yield from self._collect(self.iter_snapshot(now, None, queue=queue, group=group))
        return FollowSnapshot(rows, cursor, now)

    def _changes(
        self,
        since: Cursor | None,
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
            *self._protocol_asks(),
        ]
        self._protocol_took(version)
        epoch = None if marker is None else _text(marker)
        server_ns = server_now_ns(*clock)
        server_ms = server_ns // NS_PER_MS
        now = server_ns if now_ns is None else now_ns
        if since is None:
            ends = yield from self._log_ends(server_ms, queue)
            return Changes(
                [], Cursor(now, server_ms, ends, epoch, self.keys.prefix, queue, group).encode()
            )
        check_epoch(since, epoch)
        if since.server_ms > server_ms + LOG_LAG_MS:
            raise ValueError(
                f"cursor is not one that changes() returned: its position ({since.server_ms} ms) "
                f"is ahead of the server clock ({server_ms} ms)"
            )
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
            step = yield from self._logged(since, at, recent, events, queue, group, limit)
        if step is not None and step.derived is not None and at.now_ns > since.now_ns:
            step = yield from self._crossed(since.now_ns, step, events, queue, group, limit)
        else:
            step = step if step is not None and step.log is not None else None
        if step is not None:
            middle = Cursor(
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
        after = Cursor(at.now_ns, at.server_ms, recent, epoch, self.keys.prefix, queue, group)
        return Changes(sorted_events(events), after.encode())

    def _logged(
        self,
        since: Cursor,
        at: Window,
        recent: dict[str, str],
        events: list[Ordered],
        queue: str | None,
        group: str | None,
        limit: int,
    ) -> Plan[Window | None]:
        """The logged events after the cursor's place in each log, up to the window's
        millisecond, a log at a time in the order of their queues, into `events` until it
        holds `limit`; the places within the lag go into `recent`. Returns where the window
        stands then: in a log (not done), at the derived events (the logs are done), or None
        (the logs are done and the window needs no derived events)."""
        assert at.log is not None
        oldest = since.server_ms - LOG_LAG_MS
        listed = yield from self._recent_logs(oldest, queue)
        logs = sorted((self.keys.queue_of_events(log), log) for log in set(listed))
        reached, after = at.log
        logs = [(q, log) for q, log in logs if q >= reached]
        most = min(self.limits.consumers, limit)
        while logs:
            batch = logs[: self.limits.groups]
            starts = [
                f"({after}" if q == reached and after else self._log_start(log, since, oldest)
                for q, log in batch
            ]
            replies = yield [
                Command("XRANGE", (log, start, str(at.server_ms), "COUNT", most))
                for (_, log), start in zip(batch, starts, strict=True)
            ]
            fresh = [
                (log, start)
                for (_, log), start, entries in zip(batch, starts, replies, strict=True)
                if entries
            ]
            if fresh:  # was the log trimmed past where this reader goes on?
                infos = yield [Command("XINFO STREAM", (log,)) for log, _ in fresh]
                for (log, start), info in zip(fresh, infos, strict=True):
                    if _trimmed_past(info, start):
                        raise PresenceResyncRequired(
                            f"the event log {log} was trimmed past this cursor: take a fresh "
                            "snapshot() and a fresh cursor (changes(None))"
                        )
            for (log_queue, _), entries in zip(batch, replies, strict=True):
                last = ""
                for entry_id, fields in entries:
                    last = _text(entry_id)
                    for item in logged_events(self.keys, log_queue, entry_id, fields):
                        if group is None or item[1].group == group:
                            events.append(item)
                    if stream_id(last)[0] >= at.server_ms - LOG_LAG_MS:
                        recent[log_queue] = last
                    if len(events) >= limit:
                        return at._replace(log=(log_queue, last))
                if len(entries) == most:  # more of this log: go on from its last entry
                    reached, after = log_queue, last
                    break
            else:
                reached, after = "", ""
                done = {q for q, _ in batch}
                logs = [(q, log) for q, log in logs if q not in done]
                continue
            logs = [(q, log) for q, log in logs if q >= reached]
        return at._replace(log=None, derived=("", 0, 0, 0))

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

    def _log_start(self, log: str, since: Cursor, oldest: int) -> str:
        """Where a reader goes on in one log: after the last entry it read, else from the
        oldest millisecond it may not have read."""
        entry = since.positions.get(self.keys.queue_of_events(log))
        return f"({entry}" if entry else f"{max(oldest, 0)}-0"

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
            groups, going_on = yield from self._listed(
                queue, group, None, skipped, start=member or None
            )
            ttls = yield from self._ttls_for(groups, None)
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

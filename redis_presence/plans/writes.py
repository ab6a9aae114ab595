"""The plans that write: heartbeats (single, batched, delayed), drain requests,
deregistering, metadata, and pruning of expired consumers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import groupby
from typing import Any

from ..beats import DRAIN, NO_DRAIN, BeatReply, Written
from ..errors import PresenceBatchError, PresenceDataError, PresenceError
from ..events import EVENT_LOG_TTL_MS
from ..keys import INDEX_MARK_MS, GroupKeys, encode_meta
from ..model import DEFAULT_RETENTION_TTLS, NS_PER_MS, Skipped
from ..scripts import script
from ..validation import (
    Beat,
    CheckedBeat,
    ConsumerKey,
    DelayedBeat,
    check_beats,
    check_capacity,
    check_consumer_key,
    check_delayed_beats,
    check_draining,
    check_filter,
    check_lease_count,
    check_meta,
    check_now_ns,
    check_optional_ttl_ms,
    check_retention_ms,
)
from .caches import BeatCache, BeatCall, SettingsCache
from .core import Job, Scope, Spoilt, _now_arg, _queue, _refusals, _report, _text
from .index import FleetIndexes, IndexPlans
from .requests import Command, Partial, Plan, Request, ScriptCall, Single
from .settings import SettingsPlans

_DRAINING_ARG = {None: "", False: "0", True: "1"}
"""How the scripts take a beat's `draining`: '' keeps the stored flag."""


def _beat_reply(reply: Any) -> BeatReply:
    """A standalone ``heartbeat.lua``'s reply: 1 when its consumer has a drain request."""
    return DRAIN if reply else NO_DRAIN


class WritePlans(Job):
    """The plans that write: heartbeats (single, batched, delayed), deregistering, metadata,
    and pruning of expired consumers. Built from its `Scope`, its planner's caches (the
    shared settings, which a beat needs to tell a recovery, and the single-beat calls it
    keeps ready), and the jobs whose steps it takes (`SettingsPlans`, `IndexPlans`)."""

    __slots__ = (
        "_beat_script",
        "_beats",
        "_cache",
        "_clock",
        "_index",
        "_kept",
        "_plain",
        "_read_only",
        "_settings",
        "_tokens",
    )

    def __init__(
        self,
        scope: Scope,
        cache: SettingsCache,
        beats: BeatCache,
        settings: SettingsPlans,
        index: IndexPlans,
    ) -> None:
        super().__init__(scope)
        self._cache = cache
        self._beats = beats
        self._settings = settings
        self._index = index
        self._beat_script = script("heartbeat")
        # What the hot path of a heartbeat reads, at hand (each set once).
        self._clock = scope.clock
        self._read_only = scope.read_only
        self._kept = beats.get
        self._tokens = scope.tokens
        # A plain beat's capacity, draining and token ('' keeps both), one tuple while the
        # token stays (a fork draws a new one): the `Single` tail an executor packs once.
        self._plain = ("", "", self._tokens[0])

    def heartbeat(
        self,
        queue: str,
        group: str,
        consumer: str,
        lease_count: int = 0,
        now_ns: int | None = None,
        *,
        progressed: bool = False,
        capacity: int | None = None,
        draining: bool | None = None,
    ) -> Plan[BeatReply]:
        """Record or refresh one consumer: one call of ``heartbeat.lua`` (a `Single` plan on a
        standalone server; on a cluster, followed by the index ``ZADD`` of a new group). The
        script tells a recovery with the group's shared TTL, which the planner reads first
        when it has not read it for TTL_CACHE_MS. With `progressed`, the beat also records
        progress at its instant (one call of ``heartbeat_many.lua`` instead). `capacity`
        (None: keep the stored one) and `draining` (None: keep the stored flag) are stored
        with it (in protocol mode 2); the reply says whether a drain was requested."""
        if self._read_only:
            self.scope.writable("heartbeat")
        queue, group, consumer = check_consumer_key(queue, group, consumer)
        lease = check_lease_count(lease_count)
        if capacity is None:
            cap: int | str = ""
        else:
            cap = check_capacity(capacity)  # type: ignore[assignment]
        drain = "" if draining is None else _DRAINING_ARG[check_draining(draining)]
        if progressed is not False:
            if progressed is not True:
                raise TypeError(f"progressed must be a bool, got {type(progressed).__name__}")
            beat = (queue, group, consumer, lease, 0, 0, capacity, draining)
            return self._progressed(beat, check_now_ns(now_ns))
        now = "" if now_ns is None else str(check_now_ns(now_ns))
        cached = self._kept((queue, group))
        plain: tuple[Any, ...]
        if cap == "" and drain == "":
            plain = self._plain
            if plain[2] is not self._tokens[0]:
                plain = self._plain = ("", "", self._tokens[0])
        else:
            plain = (cap, drain, self._tokens[0])
        if cached is None or self._clock() > cached[2]:
            return self._beat_after_ttl(queue, group, (now, consumer, lease, *plain))
        head, tail, _ = cached
        if self.clustered:
            call = ScriptCall(self._beat_script, (*head, now, consumer, lease, *plain, *tail))
            return self._beat_on_cluster(call, queue, group)
        return Single(self._beat_script, head, (now, consumer, lease), _beat_reply, plain)

    def _progressed(self, beat: DelayedBeat, now_ns: int | None) -> Plan[BeatReply]:
        """A single beat that records progress; a refusal raises as a plain beat's would."""
        try:
            written = yield from self._heartbeat([beat], now_ns)
        except PresenceBatchError as error:
            raise next(iter(error.failed.values())) from None
        return DRAIN if written.drain_requested else NO_DRAIN

    def _beat_after_ttl(self, queue: str, group: str, rest: tuple[Any, ...]) -> Plan[BeatReply]:
        """A heartbeat whose group's shared TTL must be read first (a new group, or one whose
        TTL was read more than TTL_CACHE_MS ago); `rest` is the beat's ARGV from ``now_ns``
        to the instance token."""
        gk = self.keys.group(queue, group)
        (ttl,) = yield from self._settings.shared_ttls([gk])
        head, tail, _ = self._beat_call(queue, group, ttl)
        call = ScriptCall(self._beat_script, (*head, *rest, *tail))
        if self.clustered:
            answer = yield from self._beat_on_cluster(call, queue, group)
        else:
            (reply,) = yield [call]
            answer = _beat_reply(reply)
        yield from self._index.claim()
        return answer

    def _beat_on_cluster(self, call: ScriptCall, queue: str, group: str) -> Plan[BeatReply]:
        (reply,) = yield [call]
        gk = self.keys.group(queue, group)
        listing = [gk] if int(reply[0]) else []  # step 1 of the index protocol: no mark
        yield from self._index.list_on_cluster(listing, [(gk.events, int(reply[1]))])
        return _beat_reply(int(reply[2]) if len(reply) > 2 else 0)

    def _beat_call(self, queue: str, group: str, ttl: int) -> BeatCall:
        """What every ``heartbeat.lua`` call of one group shares (`BeatCall`: the command up
        to the beat, what follows it (on a cluster, the mark's lifetime and the prefix's
        mode, read with the TTL), until when its TTL may be trusted), kept ready."""
        gk = self.keys.group(queue, group)
        keys = self.scope.write_keys([gk])
        tail = (INDEX_MARK_MS, self._cache.mode) if self.clustered else ()
        head = (
            *self._beat_script.command,
            len(keys),
            *keys,
            ttl,
            self.scope.events_kept,
            EVENT_LOG_TTL_MS,
            self.scope.guard,
        )
        return self._beats.keep(queue, group, (head, tail, self._cache.trusted_until(gk)))

    def heartbeat_many(self, beats: Iterable[Beat], now_ns: int | None = None) -> Plan[Written]:
        """Write many ``(queue, group, consumer, lease_count)`` beats (or `BeatSpec`s, with a
        capacity and draining), each atomically; returns how many (`Written`, which names
        the consumers with a drain request). One script call per queue on a cluster, one in
        all else, and one more per `Limits.beats` beats (MAX_BEATS_PER_CALL)."""
        self.scope.writable("heartbeat_many")
        checked = check_beats(beats)
        now = check_now_ns(now_ns)
        return self._heartbeat(checked, now)

    def heartbeat_delayed(self, beats: Sequence[DelayedBeat]) -> Plan[Written]:
        """Write beats that happened earlier, as a reporter collects them: each is stamped
        ``server_now - delay_us``; returns how many."""
        self.scope.writable("heartbeat")
        return self._heartbeat(check_delayed_beats(beats), None)

    def _heartbeat(
        self, beats: Sequence[CheckedBeat | DelayedBeat], now_ns: int | None
    ) -> Plan[Written]:
        """Checked beats (a 4-tuple is one without delay) in calls of ``heartbeat_many.lua``:
        at most `Limits.beats` a call, one queue a call on a cluster, all in one pipeline.
        This is the reporter's path, so it is written for speed: groups are found once each
        by name."""
        if not beats:
            return Written(0)
        now = _now_arg(now_ns)
        group_of: dict[tuple[str, str], GroupKeys] = {}
        for beat in beats:
            name = (beat[0], beat[1])
            if name not in group_of:
                group_of[name] = self.keys.group(*name)
        every = list(group_of.values())
        # A group whose shared TTL cannot be read is refused (its beats unwritten), and
        # every other group written: bad data costs only what it spoils.
        ttl_of: dict[tuple[str, str], int] = {}
        failed: dict[tuple[str, str], PresenceError] = {}
        settled = yield from self._settings.settled_ttls(every)
        for name, ttl in zip(group_of, settled, strict=True):
            if isinstance(ttl, Spoilt):
                failed[name] = ttl.error()
            else:
                ttl_of[name] = ttl
        unwritten: list[ConsumerKey] = []
        total = len(beats)
        if failed:
            unwritten += ((b[0], b[1], b[2]) for b in beats if (b[0], b[1]) in failed)
            beats = [beat for beat in beats if (beat[0], beat[1]) not in failed]
        calls: list[Request] = []
        called: list[tuple[list[tuple[str, str]], Sequence[CheckedBeat | DelayedBeat]]] = []
        per_queue = (
            [list(part) for _, part in groupby(sorted(beats, key=_queue), key=_queue)]
            if self.clustered
            else [beats]
        )
        most = self.limits.beats
        head = (
            now,
            INDEX_MARK_MS,
            self.scope.events_kept,
            EVENT_LOG_TTL_MS,
            self.scope.guard,
            self._tokens[0],
            self._cache.mode if self.clustered else "",  # read with the TTLs
        )
        for part in per_queue:
            for start in range(0, len(part), most):
                batch = part[start : start + most]
                numbers: dict[tuple[str, str], int] = {}
                tail: list[Any] = []
                for beat in batch:
                    name = (beat[0], beat[1])
                    number = numbers.get(name)
                    if number is None:
                        number = numbers[name] = len(numbers) + 1
                    size = len(beat)
                    if size == 4:
                        tail += (number, beat[2], beat[3], 0, "", "", "")
                        continue
                    delay = beat[4]  # type: ignore[misc]
                    progress = beat[5] if size > 5 else ""  # type: ignore[misc]
                    if size == 8:
                        capacity = beat[6]  # type: ignore[misc]
                        tail += (
                            number,
                            beat[2],
                            beat[3],
                            delay,
                            "" if progress is None else progress,
                            "" if capacity is None else capacity,
                            _DRAINING_ARG[beat[7]],  # type: ignore[misc]
                        )
                    else:
                        tail += (number, beat[2], beat[3], delay, progress, "", "")
                names = list(numbers)
                keys = self.scope.write_keys([group_of[name] for name in names])
                args = (*head, *(ttl_of[name] for name in names), *tail)
                calls.append(self.scope.call("heartbeat_many", keys, args))
                called.append((names, batch))
        # Each call on its own: one refused call (or group) must not hide what the others wrote.
        replies = (yield Partial(calls) if len(calls) > 1 else calls) if calls else []
        unlisted: list[GroupKeys] = []
        logged: list[tuple[str, int]] = []
        drains: list[tuple[str, str, str]] = []
        for (names, batch), reply in zip(called, replies, strict=True):
            if isinstance(reply, PresenceError):
                for name in names:
                    failed.setdefault(name, reply)
                unwritten += ((beat[0], beat[1], beat[2]) for beat in batch)
                continue
            flat = reply[2] if len(reply) > 2 else ()
            drains += (
                (*names[int(flat[i]) - 1], _text(flat[i + 1])) for i in range(0, len(flat) - 1, 2)
            )
            if len(reply) > 3:
                refused = _refusals(reply[3:])
                whole = {names[r.group - 1] for r in refused if r.consumer is None}
                spoilt = {(*names[r.group - 1], r.consumer) for r in refused if r.consumer}
                for r in refused:
                    failed.setdefault(names[r.group - 1], r.error)
                unwritten += (
                    (beat[0], beat[1], beat[2])
                    for beat in batch
                    if (beat[0], beat[1]) in whole or (beat[0], beat[1], beat[2]) in spoilt
                )
            if self.clustered:
                unlisted += (group_of[names[int(number) - 1]] for number in reply[0])
                logged.append((group_of[names[0]].events, int(reply[1])))
        if self.clustered:
            yield from self._index.list_on_cluster(unlisted, logged)
        if len(unwritten) < total:
            yield from self._index.claim()
        if (
            len(unwritten) == total
            and replies
            and all(isinstance(r, PresenceError) for r in replies)
        ):
            raise replies[0]  # every call was refused whole (out of memory, say)
        if failed:
            raise PresenceBatchError(failed, total - len(unwritten), unwritten)
        return Written(total, drains)

    def request_drain(
        self, queue: str, group: str, consumer: str, now_ns: int | None = None
    ) -> Plan[bool]:
        """Ask one consumer to drain (its next beats answer ``drain_requested`` until one of
        them says it is draining) and log it (``drain_requested``), at `now_ns` (None: the
        server clock); returns whether it is tracked (an untracked one: nothing written).
        Refused (`PresenceProtocolError`) on a prefix in protocol mode 1."""
        self.scope.writable("request_drain")
        queue, group, consumer = check_consumer_key(queue, group, consumer)
        now = _now_arg(check_now_ns(now_ns))
        return self._request_drain(self.keys.group(queue, group), consumer, now)

    def _request_drain(self, gk: GroupKeys, consumer: str, now: str) -> Plan[bool]:
        args: list[str | int] = [consumer, now, self.scope.events_kept, EVENT_LOG_TTL_MS]
        if self.clustered:  # else the script reads the version and its mode
            yield from self._cache.protocol_checked()
            args.append(self._cache.mode)
        (reply,) = yield [self.scope.call("drain", self.scope.write_keys([gk]), args)]
        if self.clustered:
            yield from self._index.list_on_cluster([], [(gk.events, int(reply[1]))])
        return int(reply[0]) == 1

    def deregister(
        self, queue: str, group: str, consumer: str, now_ns: int | None = None
    ) -> Plan[bool]:
        """Forget one consumer (graceful shutdown) and log that it left, at `now_ns` (None:
        the server clock); returns whether it was tracked."""
        self.scope.writable("deregister")
        queue, group, consumer = check_consumer_key(queue, group, consumer)
        now = _now_arg(check_now_ns(now_ns))
        return self._deregister(self.keys.group(queue, group), consumer, now)

    def _deregister(self, gk: GroupKeys, consumer: str, now: str) -> Plan[bool]:
        args: list[str | int] = [consumer, now, self.scope.events_kept, EVENT_LOG_TTL_MS]
        if self.clustered:  # else the script checks the version
            yield from self._cache.protocol_checked()
        (reply,) = yield [self.scope.call("deregister", self.scope.write_keys([gk]), args)]
        existed, emptied = int(reply[0]), int(reply[1])
        if self.clustered:
            yield from self._index.list_on_cluster([], [(gk.events, int(reply[2]))])
        if emptied:
            yield from self._index.unlist([gk])
        return existed == 1

    def describe(self, queue: str, group: str, consumer: str, meta: dict[str, str]) -> Plan[bool]:
        """Store the consumer's metadata (`check_meta`; an empty mapping removes it), written
        only when it changed; returns whether the consumer is tracked (an untracked one's
        metadata is not stored: it lives and dies with its consumer)."""
        self.scope.writable("describe")
        queue, group, consumer = check_consumer_key(queue, group, consumer)
        checked = check_meta(meta)
        value = encode_meta(checked) if checked else ""
        return self._describe_one((queue, group, consumer, value))

    def _describe_one(self, item: tuple[str, str, str, str]) -> Plan[bool]:
        (tracked,) = yield from self._describe([item])
        return tracked

    def describe_many(
        self, descriptions: Iterable[tuple[str, str, str, dict[str, str]]]
    ) -> Plan[list[bool]]:
        """`describe` for many ``(queue, group, consumer, meta)``: one script call (one per
        queue on a cluster, one more per `Limits.beats`); returns whether each is tracked."""
        self.scope.writable("describe")
        items = []
        for index, (queue, group, consumer, meta) in enumerate(descriptions):
            try:
                key = check_consumer_key(queue, group, consumer)
                checked = check_meta(meta)
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"descriptions[{index}]: {exc}") from None
            items.append((*key, encode_meta(checked) if checked else ""))
        return self._describe(items)

    def _describe(self, items: Sequence[tuple[str, str, str, str]]) -> Plan[list[bool]]:
        if not items:
            return []
        order = list(range(len(items)))
        parts = [order]
        if self.clustered:  # one slot a call: one call per queue
            order.sort(key=lambda i: items[i][0])
            parts = [list(part) for _, part in groupby(order, key=lambda i: items[i][0])]
        calls: list[Request] = []
        called: list[list[int]] = []
        for part in parts:
            for start in range(0, len(part), self.limits.beats):
                chunk = part[start : start + self.limits.beats]
                numbers: dict[GroupKeys, int] = {}
                args: list[str | int] = []
                for i in chunk:
                    queue, group, consumer, value = items[i]
                    number = numbers.setdefault(self.keys.group(queue, group), len(numbers) + 1)
                    args += (number, consumer, value)
                keys = self.scope.write_keys(list(numbers))
                calls.append(self.scope.call("describe", keys, args))
                called.append(chunk)
        if self.clustered:  # else the script checks the version
            yield from self._cache.protocol_checked()
        replies = yield calls
        tracked = [False] * len(items)
        for chunk, reply in zip(called, replies, strict=True):
            for i, code in zip(chunk, reply, strict=True):
                tracked[i] = int(code) != 0
        return tracked

    def prune_expired(
        self,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        queue: str | None = None,
        group: str | None = None,
        retention_ms: int | None = 0,
    ) -> Plan[int]:
        """Remove exactly the consumers a snapshot at the same `now_ns`/`ttl_ms` calls
        expired for longer than `retention_ms` (0: every expired one; None:
        DEFAULT_RETENTION_TTLS times each group's TTL), of one queue, or one group, when
        given, and log them as pruned; returns how many. `ttl_ms` None is each group's
        shared TTL. Each call of ``prune.lua`` visits at most `Limits.prune_consumers`
        consumers of `Limits.prune_groups` groups, and the next call resumes where it
        stopped."""
        self.scope.writable("prune_expired")
        ttl = check_optional_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        retention = check_retention_ms(retention_ms)
        return self._prune(
            now, ttl, check_filter("queue", queue), check_filter("group", group), retention
        )

    def _prune(
        self,
        now_ns: int | None,
        ttl_ms: int | None,
        queue: str | None,
        group: str | None,
        retention_ms: int | None,
    ) -> Plan[int]:
        now = str((yield from self.scope.now(now_ns)))
        now_us = int(now) // 1_000

        def keep(ttl: int) -> int:  # a group's retention, in ms
            return DEFAULT_RETENTION_TTLS * ttl if retention_ms is None else retention_ms

        def horizon_us(ttl: int) -> int:  # prune.lua's: at or below it, a beat can go
            return now_us - (2 * ttl + keep(ttl) + 1) * 1_000

        removed = 0
        failed: dict[tuple[str, str], PresenceError] = {}
        left: list[ConsumerKey] = []  # expired, but left in place for a spoilt value
        after: Any = None
        aside: list[Skipped] = []
        # A whole-fleet prune on a standalone server of a prefix at version 2 visits only the
        # groups whose P:oldest (a lower bound of their oldest beat) is at or below their
        # horizon (docs/performance.md, issue 33 items 3 and 4); else (a cluster, a prefix in
        # mode 1 or not claimed yet, whose version-1 writers never keep P:oldest) every group.
        fleet = FleetIndexes(False, False, False)
        if queue is None and group is None:
            fleet = yield from self._index.fleet_indexes()
        # One TTL for all (`ttl_ms` given): one horizon, so the candidates are a range of
        # P:oldest, read whole first (while it holds every group). Each group's own TTL: the
        # least any group may have (the prefix's, or the lowest of P:ttls) gives the latest
        # horizon, so its range holds every group due under its own TTL; of those, the ones
        # whose P:oldest is at or below their own horizon are visited (`_due`, the
        # candidates' TTLs: one MGET). Else (P:oldest incomplete, the prefix's TTL spoilt)
        # every group, each kept when its P:oldest is at or below its own horizon (a group
        # missing from it is visited).
        picked: list[GroupKeys] | None = None
        least = ttl_ms
        if fleet.oldest_complete and ttl_ms is None:
            least = yield from self._settings.least_ttl(fleet.least_own_ttl_ms)
        if fleet.oldest_complete and ttl_ms is not None:
            picked = yield from self._index.scored_at_most(
                self.keys.oldest, horizon_us(ttl_ms), aside
            )
        elif fleet.oldest_complete and least is not None:
            found = yield from self._index.scores_at_most(
                self.keys.oldest, horizon_us(least), aside
            )
            picked = yield from self._settings.due_by_own_ttl(
                self._index, self.keys.oldest, horizon_us, aside, found
            )
        elif fleet.kept and ttl_ms is None:
            picked = yield from self._settings.due_by_own_ttl(
                self._index, self.keys.oldest, horizon_us, aside
            )
        while True:
            if picked is not None:
                groups, picked = picked[: self.limits.groups], picked[self.limits.groups :]
                last = not picked
            else:
                groups, after = yield from self._index.listed(queue, group, after, aside)
                last = after is None
            # A group whose shared TTL cannot be read is left in place, and named (as a group
            # with a key of another type is), and every other group pruned.
            spoilt: list[Skipped] = []
            groups, ttls = yield from self._settings.sound_ttls(
                groups, ttl_ms, spoilt, together=True
            )
            for item in spoilt:
                failed.setdefault(
                    (item.queue or "", item.group or ""), PresenceDataError(item.reason)
                )
            ttl_of = dict(zip(groups, ttls, strict=True))
            removed += yield from self._prune_groups(groups, ttl_of, now, keep, failed, left)
            if last:
                if queue is None:
                    # The event index is scored by the server's clock (as the logs expire),
                    # not by the instants of the events: a caller's now_ns a day ahead must
                    # not forget the logs that hold this very prune's events.
                    server_ns = int(now) if now_ns is None else (yield from self.scope.now(None))
                    yield from self._forget_logs(server_ns // NS_PER_MS - EVENT_LOG_TTL_MS)
                _report(aside)
                if failed:
                    raise PresenceBatchError(failed, removed, left)
                return removed

    def _prune_groups(
        self,
        groups: list[GroupKeys],
        ttl_of: dict[GroupKeys, int],
        now: str,
        keep: Callable[[int], int],
        failed: dict[tuple[str, str], PresenceError],
        left: list[ConsumerKey],
    ) -> Plan[int]:
        """``prune.lua`` on `groups` (at most `Limits.prune_groups` a call, per queue on a
        cluster), each call going on from where the budget of the last ran out; returns how
        many consumers went, and adds what was refused to `failed` and `left`."""
        budget = self.limits.prune_consumers
        removed = 0
        # Per queue on a cluster (one slot a call): each part goes on from where the
        # budget of its last call ran out (a group, and an offset among its ties).
        # At most `Limits.prune_groups` groups a call.
        most = self.limits.prune_groups
        parts = [
            (part[start : start + most], 0, 0)
            for part in self._index.per_queue(groups)
            for start in range(0, len(part), most)
        ]
        emptied: list[GroupKeys] = []
        logged: list[tuple[str, int]] = []
        while parts:
            replies = yield [
                self.scope.call(
                    "prune",
                    self.scope.write_keys(part),
                    [
                        now,
                        budget,
                        below,
                        ties,
                        self.scope.events_kept,
                        EVENT_LOG_TTL_MS,
                        *(ttl_of[gk] for gk in part),
                        *(keep(ttl_of[gk]) for gk in part),
                    ],
                )
                for part, below, ties in parts
            ]
            going_on = []
            for (part, _, _), reply in zip(parts, replies, strict=True):
                removed += int(reply[0])
                stop = int(reply[1])
                logged.append((part[0].events, int(reply[4])))
                emptied += (part[int(number) - 1] for number in reply[5])
                for r in _refusals(reply[6:]):
                    gk = part[r.group - 1]
                    failed.setdefault((gk.queue, gk.group), r.error)
                    if r.consumer is not None:
                        left.append((gk.queue, gk.group, r.consumer))
                if stop:
                    going_on.append((part[stop - 1 :], int(reply[2]), int(reply[3])))
            parts = going_on
        if self.clustered:
            yield from self._index.list_on_cluster([], logged)
        if emptied:
            yield from self._index.unlist(emptied)
        return removed

    def _forget_logs(self, before_ms: int) -> Plan[None]:
        """Take out of the event index, a page at a time, the logs without an event since
        `before_ms` (they have expired, or are about to)."""
        while True:
            (old,) = yield [
                Command(
                    "ZRANGEBYSCORE",
                    (self.keys.events, "-inf", f"({before_ms}", "LIMIT", 0, self.limits.groups),
                )
            ]
            if not old:
                return
            yield [Command("ZREM", (self.keys.events, *old))]

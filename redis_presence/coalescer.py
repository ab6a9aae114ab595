"""The I/O-free core both reporters share: the beats pending per consumer, what one flush
takes and sends (a plan on public plans), and when to try again (backoff and outage logging).

`Coalescer` holds no thread or task of its own (its lock only guards its state against the
caller's beats); `redis_presence.reporter` drives it from a thread or an asyncio task.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from redis.backoff import EqualJitterBackoff

from ._base import RegistryBase
from .errors import PresenceBatchError, PresenceError
from .model import NS_PER_MS, NS_PER_US
from .plans import Plan
from .validation import (
    MAX_DELAY_MS,
    ConsumerKey,
    DelayedBeat,
    check_capacity,
    check_consumer_key,
    check_draining,
    check_lease_count,
)

logger = logging.getLogger("redis_presence.reporter")
"""The reporters' logger (one name for both modules: what operators filter on)."""

_MAX_DELAY_US = MAX_DELAY_MS * 1_000

MAX_REPORT_INTERVAL_MS = 3_600_000
"""Longest accepted interval (one hour)."""

RETRY_MIN_MS = 100
"""The first retry after a failed flush waits up to this long; each further failure doubles
it, up to the interval. Each wait is drawn between half and all of that bound (equal
jitter), so that the reporters of a fleet do not retry in step after a Redis restart."""

_MAX_DOUBLINGS = 32
"""Failures past this many no longer double the bound (it is the interval long before)."""


def check_interval_ms(value: object, default: int | None = None) -> int:
    """A reporter's ``interval_ms``: an int in [1, MAX_REPORT_INTERVAL_MS]; with `default`,
    None is that (what an integration's settings take)."""
    if value is None and default is not None:
        return default
    if not isinstance(value, int) or isinstance(value, bool):
        kind = "an int" if default is None else "an int or None"
        raise TypeError(f"interval_ms must be {kind}, got {type(value).__name__}")
    if not 0 < value <= MAX_REPORT_INTERVAL_MS:
        raise ValueError(f"interval_ms must be in [1, {MAX_REPORT_INTERVAL_MS}], got {value}")
    return value


Pending = tuple[int, int, "int | None", "int | None", "bool | None"]
"""A consumer's pending beat: (lease_count, monotonic ns of the beat, of its last progress or
None, capacity or None (keep), draining or None (keep)); a later beat's None keeps an
earlier pending beat's progress, capacity and draining (coalesced)."""


@dataclass
class Taken:
    """What one flush sends: deregistrations first, then the latest beats."""

    beats: dict[ConsumerKey, Pending]
    """consumer -> its pending beat (`Pending`)"""
    deregs: dict[ConsumerKey, None]
    describe: dict[ConsumerKey, int] = field(default_factory=dict)
    """The consumers whose metadata is to be written after the beats, -> its version."""


@dataclass
class Flushed:
    """What one flush wrote: how many beats, and the groups Redis refused (left pending)."""

    sent: int
    refused: dict[tuple[str, str], PresenceError]
    unwritten: set[ConsumerKey] = field(default_factory=set)
    """The beats and deregistrations Redis refused, to send again."""
    described: set[ConsumerKey] = field(default_factory=set)
    """The consumers whose metadata this flush wrote (or found unchanged)."""
    drains: frozenset[ConsumerKey] = frozenset()
    """The consumers whose beat's reply said a drain was requested."""


@dataclass
class Outcome:
    """The result of one flush attempt, and how long to wait before the next one."""

    wait_s: float
    sent: int = 0
    error: Exception | None = field(default=None)

    def result(self) -> int:
        """How many beats were written; raises the error of a failed attempt."""
        if self.error is not None:
            raise self.error
        return self.sent

    def log_at_close(self) -> None:
        if self.error is not None:
            logger.warning("presence reporter could not write at close: %s", self.error)


class Coalescer:
    """The I/O-free part of both reporters: pending beats, backoff and outage logging.

    Memory: at most one pending beat and one pending deregistration per distinct consumer
    (plus, with ``track=True``, the set of consumers reported so far).
    """

    def __init__(
        self,
        interval_ms: int,
        *,
        track: bool,
        clock: Callable[[], int],
        meta: dict[str, str] | None = None,
    ) -> None:
        self.interval_ns = check_interval_ms(interval_ms) * NS_PER_MS
        self.clock = clock
        self.closed = False
        self._lock = threading.Lock()
        self._beats: dict[ConsumerKey, Pending] = {}
        self.meta: dict[str, str] = {} if meta is None else meta
        """The metadata every consumer of this reporter is described with (empty: none)."""
        self.meta_version = 0
        """Bumped at each change of `meta`: a consumer is described again when the version
        it was last described with is older."""
        self._described: dict[ConsumerKey, int] = {}
        self._deregs: dict[ConsumerKey, None] = {}
        self._reported: set[ConsumerKey] | None = set() if track else None
        self._failures = 0
        self._backoff = EqualJitterBackoff(cap=self.interval_ns / 1e9, base=RETRY_MIN_MS / 2_000)
        """redis-py's equal jitter: the n-th retry waits between half and all of
        ``min(interval, RETRY_MIN_MS * 2**(n - 1))``."""
        self._outage_since_ns: int | None = None
        self.refused: dict[tuple[str, str], str] = {}
        """The groups the last flush could not write although Redis answered, and why."""

    # -- the caller's side ------------------------------------------------------------

    def beat(
        self,
        queue: str,
        group: str,
        consumer: str,
        lease_count: int,
        progressed: bool = False,
        capacity: int | None = None,
        draining: bool | None = None,
    ) -> None:
        key = check_consumer_key(queue, group, consumer)
        lease = check_lease_count(lease_count)
        if type(progressed) is not bool:
            raise TypeError(f"progressed must be a bool, got {type(progressed).__name__}")
        if capacity is not None:
            capacity = check_capacity(capacity)
        if draining is not None:
            draining = check_draining(draining)
        now = self.clock()
        with self._lock:
            if not self.closed:
                old = self._beats.get(key)  # what a pending beat said is kept (coalesced)
                if old is None:
                    progress_at = now if progressed else None
                else:
                    progress_at = now if progressed else old[2]
                    if capacity is None:
                        capacity = old[3]
                    if draining is None:
                        draining = old[4]
                self._beats[key] = (lease, now, progress_at, capacity, draining)

    def set_meta(self, meta: dict[str, str]) -> None:
        with self._lock:
            if meta != self.meta:
                self.meta = meta
                self.meta_version += 1

    def deregister(self, queue: str, group: str, consumer: str) -> None:
        key = check_consumer_key(queue, group, consumer)
        with self._lock:
            self._beats.pop(key, None)
            self._described.pop(key, None)
            self._deregs[key] = None
            if self._reported is not None:
                self._reported.discard(key)

    def pending(self) -> int:
        with self._lock:
            return len(self._beats)

    def fresh(self) -> Coalescer:
        """A new coalescer with the same settings and nothing pending (a forked child's)."""
        interval_ms = self.interval_ns // NS_PER_MS
        return Coalescer(
            interval_ms, track=self._reported is not None, clock=self.clock, meta=self.meta
        )

    # -- the flusher's side -----------------------------------------------------------

    def begin(self, *, closing: bool = False) -> tuple[int, Taken | None]:
        """Start an attempt: its monotonic start, and everything to send now (or None).
        When closing with ``track``, every consumer this reporter reported or holds
        becomes a deregistration instead."""
        started = self.clock()
        with self._lock:
            if closing:
                self.closed = True
                if self._reported is not None:
                    self._deregs.update(dict.fromkeys(self._reported))
                    self._deregs.update(dict.fromkeys(self._beats))
                    self._reported.clear()
                    self._beats.clear()
            if not self._beats and not self._deregs:
                return started, None
            version = self.meta_version
            describe = {
                key: version
                for key in self._beats
                if self._described.get(key, -1) != version and (self.meta or key in self._described)
            }
            taken = Taken(self._beats, self._deregs, describe)
            self._beats, self._deregs = {}, {}
            return started, taken

    def plan(self, registry: RegistryBase, taken: Taken) -> Plan[Flushed]:
        """Send the taken deregistrations, then the beats with their age measured just
        before they are sent. A group Redis refuses (a foreign or corrupt key, say) costs
        only its own writes: the others are written, and the result names it."""
        refused: dict[tuple[str, str], PresenceError] = {}
        unwritten: set[ConsumerKey] = set()
        for key in taken.deregs:
            try:
                yield from registry.plans.deregister(*key)
            except PresenceError as error:  # Redis answered: this consumer only
                refused.setdefault((key[0], key[1]), error)
                unwritten.add(key)
        drains: frozenset[ConsumerKey] = frozenset()
        try:
            written = yield from registry.plans.heartbeat_delayed(self.delayed(taken))
            sent, drains = int(written), written.drain_requested
        except PresenceBatchError as error:
            sent = error.completed
            for group, why in error.failed.items():
                refused.setdefault(group, why)
            unwritten.update(error.refused)
        described: set[ConsumerKey] = set()
        meta = self.meta
        # Only the consumers whose metadata is new or changed, in one call (one per queue).
        due = [key for key in taken.describe if key not in unwritten]
        if due:
            try:
                yield from registry.plans.describe_many([(*key, meta) for key in due])
            except PresenceError as error:
                for key in due:
                    refused.setdefault((key[0], key[1]), error)
            else:
                described.update(due)
        return Flushed(sent, refused, unwritten, described, drains)

    def delayed(self, taken: Taken) -> list[DelayedBeat]:
        """The taken beats with their age, in µs, on the monotonic clock; beats older than
        MAX_DELAY_MS are dropped (their consumer is long expired anyway)."""
        now = self.clock()
        beats: list[DelayedBeat] = []
        for (queue, group, consumer), pending in taken.beats.items():
            lease, at_ns, progress_ns, capacity, draining = pending
            delay_us = max(0, now - at_ns) // NS_PER_US
            if delay_us <= _MAX_DELAY_US:
                if capacity is not None or draining is not None:
                    back = (
                        None
                        if progress_ns is None
                        else min(max(0, now - progress_ns) // NS_PER_US, _MAX_DELAY_US)
                    )
                    beats.append(
                        (queue, group, consumer, lease, delay_us, back, capacity, draining)
                    )
                elif progress_ns is None:
                    beats.append((queue, group, consumer, lease, delay_us))
                else:
                    back_us = min(max(0, now - progress_ns) // NS_PER_US, _MAX_DELAY_US)
                    beats.append((queue, group, consumer, lease, delay_us, back_us))
        return beats

    def idle(self, started_ns: int) -> Outcome:
        """Nothing was pending: wait one interval (an outage, if any, is not over yet)."""
        return self._next(started_ns, sent=0)

    def succeeded(self, taken: Taken, flushed: Flushed, started_ns: int) -> Outcome:
        """Redis answered: what it refused, group by group, stays pending (newer beats and
        deregistrations win) and is named once in a warning; the rest is done."""
        refused, sent, unwritten = flushed.refused, flushed.sent, flushed.unwritten
        with self._lock:
            if unwritten:
                for key, value in taken.beats.items():
                    if key in unwritten and key not in self._beats and key not in self._deregs:
                        self._beats[key] = value
                again = {key: None for key in taken.deregs if key in unwritten}
                self._deregs = {**again, **self._deregs}
            if self._reported is not None:
                self._reported.update(key for key in taken.beats if key not in unwritten)
            for key in flushed.described:
                if key not in self._deregs:
                    self._described[key] = taken.describe[key]
        self._report_refused(refused)
        if self._outage_since_ns is not None:
            down_s = (self.clock() - self._outage_since_ns) / 1e9
            logger.info(
                "presence reporter reached Redis again after %.1f s (%d failed attempts); "
                "wrote %d delayed beats",
                down_s,
                self._failures,
                sent,
            )
            self._outage_since_ns = None
            self._failures = 0
        outcome = self._next(started_ns, sent=sent)
        if refused:
            outcome.error = PresenceBatchError(dict(refused), sent, sorted(unwritten))
        return outcome

    def _report_refused(self, refused: dict[tuple[str, str], PresenceError]) -> None:
        """Warn once for each group Redis starts refusing (or refuses for a new reason), and
        say when it takes a group's writes again."""
        for group, error in refused.items():
            if str(error) != self.refused.get(group):
                logger.warning(
                    "presence reporter cannot write queue %r group %r (%s: %s); writing "
                    "every other group, keeping its latest beats and retrying each interval",
                    group[0],
                    group[1],
                    type(error).__name__,
                    error,
                )
        for group in self.refused.keys() - refused.keys():
            logger.info("presence reporter writes queue %r group %r again", *group)
        self.refused = {group: str(error) for group, error in refused.items()}

    def _next(self, started_ns: int, *, sent: int) -> Outcome:
        """The next regular flush: one interval after this one started."""
        elapsed = self.clock() - started_ns
        return Outcome(wait_s=max(0, self.interval_ns - elapsed) / 1e9, sent=sent)

    def failed(self, taken: Taken, error: Exception) -> Outcome:
        """Put the taken beats back (newer beats and deregistrations win), back off, and log
        the first failure of an outage."""
        with self._lock:
            for key, value in taken.beats.items():
                if key not in self._beats and key not in self._deregs:
                    self._beats[key] = value
            self._deregs = {**taken.deregs, **self._deregs}
            held = len(self._beats)
            # An outage may outlast the consumers (pruned, their metadata with them): describe
            # every consumer again once Redis answers.
            self._described.clear()
        self._failures += 1
        if self._outage_since_ns is None:
            self._outage_since_ns = self.clock()
            logger.warning(
                "presence reporter cannot write to Redis (%s: %s); keeping the latest beat "
                "of %d consumers and retrying",
                type(error).__name__,
                error,
                held,
                exc_info=not isinstance(error, PresenceError),
            )
        else:
            logger.debug("presence reporter retry %d failed: %s", self._failures, error)
        wait_s = self._backoff.compute(min(self._failures, _MAX_DOUBLINGS))
        return Outcome(wait_s=wait_s, error=error)

    @property
    def interval_s(self) -> float:
        return self.interval_ns / 1e9


class CrossedFork(Coalescer):
    """The coalescer of an `AsyncPresenceReporter` in a forked child: every use raises."""

    def __init__(self, core: Coalescer, message: str) -> None:
        super().__init__(core.interval_ns // NS_PER_MS, track=False, clock=core.clock)
        self.closed = True
        self.message = message

    def beat(
        self,
        queue: str,
        group: str,
        consumer: str,
        lease_count: int,
        progressed: bool = False,
        capacity: int | None = None,
        draining: bool | None = None,
    ) -> None:
        raise RuntimeError(self.message)

    def deregister(self, queue: str, group: str, consumer: str) -> None:
        raise RuntimeError(self.message)

    def begin(self, *, closing: bool = False) -> tuple[int, Taken | None]:
        raise RuntimeError(self.message)

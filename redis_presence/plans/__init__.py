"""I/O-free plans of every operation: what to send to Redis, and what the replies mean.

A plan (`Plan`) is a generator: it yields a batch of requests (`ScriptCall`, `Command`),
receives their replies in order, and returns the operation's result. The
`Planner`'s public methods check their arguments at once (`TypeError` / `ValueError`, or
`PresenceReadOnlyError` for a write through a read-only planner) and return the plan, so a
bad call sends nothing. Nothing here imports a driver or does I/O:
`RedisPresenceRegistry.execute` and `AsyncRedisPresenceRegistry.execute` run any plan, and
a test can step one batch at a time.

Every request a plan sends does bounded work, whatever the fleet's size (`Limits`): the
index is read a page of groups at a time, a group's consumers at most
``Limits.consumers`` at a time, and a prune call visits at most ``Limits.prune_groups``
groups and ``Limits.prune_consumers`` consumers, with a cursor carried from call to call.
The index of groups (``P:groups``), and on a Redis Cluster the protocol that keeps it
without losing a live group, is written down with its proof in ``docs/protocol.md``,
section 14.

One module per job, and `Planner` is a thin facade over them:

- `requests`: the request types and the plan protocol (`ScriptCall`, `Command`, `Partial`,
  `Single`, `alongside`, `RowStream`);
- `limits`: the bounds of every request (`Limits`);
- `core`: what every job shares and never changes (`Scope`), and the `Job` base;
- `caches`: the state plans share, each piece with one owner and a stated rule for threads
  and tasks: what a planner read of the shared settings (`SettingsCache`), and the single-beat
  calls it keeps ready (`BeatCache`);
- the jobs, each a class built from its `Scope`, the caches and the other jobs it takes
  steps of, so each can be built and run alone: `index` (the index of groups, the cluster
  index protocol, the migration), `settings` (the shared TTL and progress budget),
  `writes`, `reads`, `declared` (declared groups and `groups`), `changes` (the events).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..events import DEFAULT_EVENTS_KEPT
from ..keys import Keyspace
from ..model import DEFAULT_MAX_FUTURE_MS
from .caches import BeatCache, SettingsCache
from .changes import ChangePlans
from .core import Scope, TtlSource
from .declared import DeclaredPlans
from .groups import GroupPlans
from .index import IndexPlans
from .limits import (
    MAX_BEATS_PER_CALL,
    MAX_CACHED_GROUPS,
    MAX_CONSUMERS_PER_CALL,
    MAX_GROUPS_PER_CALL,
    MAX_PRUNE_CONSUMERS_PER_CALL,
    MAX_PRUNE_GROUPS_PER_CALL,
    MAX_ROWS_PER_ROUND_TRIP,
    TTL_CACHE_MS,
    Limits,
)
from .reads import ReadPlans
from .requests import (
    Command,
    Partial,
    Plan,
    Request,
    RowStream,
    ScriptCall,
    Single,
    alongside,
)
from .settings import SettingsPlans
from .writes import WritePlans

__all__ = [
    "MAX_BEATS_PER_CALL",
    "MAX_CACHED_GROUPS",
    "MAX_CONSUMERS_PER_CALL",
    "MAX_GROUPS_PER_CALL",
    "MAX_PRUNE_CONSUMERS_PER_CALL",
    "MAX_PRUNE_GROUPS_PER_CALL",
    "MAX_ROWS_PER_ROUND_TRIP",
    "TTL_CACHE_MS",
    "Command",
    "Limits",
    "Partial",
    "Plan",
    "Planner",
    "Request",
    "RowStream",
    "ScriptCall",
    "Single",
    "TtlSource",
    "alongside",
]


class Planner:
    """Plans every operation for one key prefix, on a standalone server or a cluster.

    `read_only` refuses writes (`PresenceReadOnlyError`, before anything is planned); reads
    need no script at all. `limits` bounds the work of every request; `events_kept` is
    about how many entries each queue's event log keeps; `max_future_ms` is the clock guard
    (a beat whose explicit ``now_ns`` is further ahead of the server clock is refused with
    `PresenceClockError`; None: no guard); `clock` (monotonic nanoseconds) times how long a
    shared TTL read from Redis is trusted; `instance` is the instance token its beats
    carry (None: this process's, `redis_presence.beats.process_instance`).

    A thin facade over its parts, each with one job: its `scope` (what never changes), the
    two caches its plans share (`settings_cache`, `beat_cache`), and a job object per module
    (`index_plans`, `settings_plans`, `write_plans`, `read_plans`, `declared_plans`,
    `group_plans`, `change_plans`). Each public plan is its job's own method (its signature
    and docstring written there once), bound here when the planner is built.
    """

    def __init__(
        self,
        prefix: str = "presence",
        *,
        clustered: bool = False,
        read_only: bool = False,
        limits: Limits = Limits(),  # noqa: B008 (an immutable tuple)
        events_kept: int = DEFAULT_EVENTS_KEPT,
        max_future_ms: int | None = DEFAULT_MAX_FUTURE_MS,
        clock: Callable[[], int] = time.monotonic_ns,
        instance: str | None = None,
    ) -> None:
        scope = self.scope = Scope(
            prefix,
            clustered=clustered,
            read_only=read_only,
            limits=limits,
            events_kept=events_kept,
            max_future_ms=max_future_ms,
            clock=clock,
            instance=instance,
        )
        cache = self.settings_cache = SettingsCache(scope.keys, clock)
        beats = self.beat_cache = BeatCache()
        index = self.index_plans = IndexPlans(scope, cache)
        settings = self.settings_plans = SettingsPlans(scope, cache, beats)
        writes = self.write_plans = WritePlans(scope, cache, beats, settings, index)
        reads = self.read_plans = ReadPlans(scope, cache, settings, index)
        declared = self.declared_plans = DeclaredPlans(scope, cache)
        summary = self.group_plans = GroupPlans(scope, cache, declared, settings, index, reads)
        changes = self.change_plans = ChangePlans(scope, cache, settings, index, reads)
        # The public plans, each its job's own method.
        self.heartbeat = writes.heartbeat
        self.heartbeat_many = writes.heartbeat_many
        self.heartbeat_delayed = writes.heartbeat_delayed
        self.request_drain = writes.request_drain
        self.deregister = writes.deregister
        self.describe = writes.describe
        self.describe_many = writes.describe_many
        self.prune_expired = writes.prune_expired
        self.clock_ns = reads.clock_ns
        self.epoch = reads.epoch
        self.index_sizes = reads.index_sizes
        self.snapshot = reads.snapshot
        self.iter_snapshot = reads.iter_snapshot
        self.count_active_by_group = reads.count_active_by_group
        self.count_active = reads.count_active
        self.consumer = reads.consumer
        self.consumer_meta = reads.consumer_meta
        self.group_logs = reads.group_logs
        self.size = reads.size
        self.set_ttl = settings.set_ttl
        self.set_stuck_after = settings.set_stuck_after
        self.ttl = settings.ttl
        self.stuck_after = settings.stuck_after
        self.ttl_in_use = settings.ttl_in_use
        self.stuck_after_in_use = settings.stuck_after_in_use
        self.ttl_sources = settings.ttl_sources
        self.expect = declared.expect
        self.unexpect = declared.unexpect
        self.expected = declared.expected
        self.min_active = declared.min_active
        self.groups = summary.groups
        self.group = summary.group
        self.group_page = summary.group_page
        self.group_names = summary.group_names
        self.group_order = summary.group_order
        self.changes = changes.changes
        self.check_cursor = changes.check_cursor
        self.vanished_groups = changes.vanished_groups
        self.rows_of = changes.rows_of
        self.snapshot_cursor = changes.snapshot_cursor
        self.migrate = index.migrate

    @property
    def keys(self) -> Keyspace:
        """The key layout of this planner's prefix."""
        return self.scope.keys

    @property
    def prefix(self) -> str:
        """The key prefix; planners with different prefixes never touch each other's keys."""
        return self.scope.keys.prefix

    @property
    def clustered(self) -> bool:
        """Whether it plans for a Redis Cluster (per-queue scripts, the index protocol)."""
        return self.scope.clustered

    @property
    def read_only(self) -> bool:
        """Whether it refuses writes."""
        return self.scope.read_only

    @property
    def limits(self) -> Limits:
        """How much work one request may do."""
        return self.scope.limits

    @property
    def events_kept(self) -> int:
        """About how many entries each queue's event log keeps."""
        return self.scope.events_kept

    @property
    def max_future_ms(self) -> int | None:
        """The clock guard (None: none)."""
        return self.scope.max_future_ms

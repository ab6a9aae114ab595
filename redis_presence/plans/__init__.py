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
without losing a live group, is written down with its proof in ``docs/index-protocol.md``.

One module per job, and `Planner` composes them:

- `requests`: the request types and the plan protocol (`ScriptCall`, `Command`, `Partial`,
  `Single`, `alongside`, `RowStream`);
- `limits`: the bounds of every request (`Limits`);
- `core`: the planner's state and the steps every job shares;
- `index`: the index of groups and the cluster index protocol, and the migration;
- `settings`: the shared TTL and progress budget;
- `writes`, `reads`, `declared` (declared groups and `groups`), `changes` (the events).
"""

from __future__ import annotations

from .changes import ChangePlans
from .core import TtlSource
from .declared import DeclaredPlans
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
from .requests import (
    Command,
    Packing,
    Partial,
    Plan,
    Request,
    RowStream,
    ScriptCall,
    Single,
    alongside,
)
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
    "Packing",
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


class Planner(WritePlans, DeclaredPlans, ChangePlans):
    """Plans every operation for one key prefix, on a standalone server or a cluster.

    `read_only` refuses writes (`PresenceReadOnlyError`, before anything is planned); reads
    need no script at all. `wire` is how the client writes commands (the executor's
    `Packing`; the planner knows no wire format): the single-beat call encodes with it,
    once per group, what it keeps ready; with `packed` (and `wire`), a single beat also
    carries its whole command as the client writes it (`Single.packed`), and so does every
    call of a batched heartbeat (`ScriptCall.packed`). `limits` bounds the work of every request;
    `events_kept` is about how many entries each queue's event log keeps; `max_future_ms`
    is the clock guard (a beat whose explicit ``now_ns`` is further ahead of the server
    clock is refused with `PresenceClockError`; None: no guard); `clock` (monotonic
    nanoseconds) times how long a shared TTL read from Redis is trusted.
    """

    __slots__ = ()

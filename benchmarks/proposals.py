"""Prototypes of proposed changes to the package, measured next to the shipped code.

Nothing here is used by the package. Each function is the smallest honest version of a
change proposed in docs/performance.md, so the benchmark can show what the change would
buy on the same server in the same run. When the package adopts one, delete it here.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import redis

from redis_presence import ConsumerPresence, PresenceState

INDEX_MARK_MS = 60_000


_FIELDS = ConsumerPresence.__slots__
_SETTERS = tuple(getattr(ConsumerPresence, name).__set__ for name in _FIELDS)


def fast_snapshot(
    client: redis.Redis, prefix: str, now_ns: int, ttl_ms: int
) -> list[ConsumerPresence]:
    """`snapshot()` as one MULTI/EXEC of plain HGETALLs, decoded without per-row calls.

    MULTI/EXEC is as atomic as the Lua script on one node, and Redis sends the hashes
    straight to the client instead of converting every field to a Lua string and back.
    Rows are the same frozen `ConsumerPresence`, filled through its slot descriptors; the
    rule is applied inline with the three states bound to locals.
    """
    members: list[bytes] = sorted(client.smembers(f"{prefix}:index"))  # type: ignore[arg-type]
    groups = []
    pipe = client.pipeline(transaction=True)
    for member in members:
        q, _, g = member.decode().partition(":")
        groups.append((unquote(q), unquote(g)))
        pipe.hgetall(f"{prefix}:{{{q}}}:{g}:c")
    replies: list[dict[Any, Any]] = pipe.execute()
    order = sorted(range(len(groups)), key=groups.__getitem__)
    active, stale, expired = PresenceState.ACTIVE, PresenceState.STALE, PresenceState.EXPIRED
    twice = 2 * ttl_ms
    new = object.__new__
    cls = ConsumerPresence
    s_q, s_g, s_c, s_reg, s_hb, s_age, s_lease, s_state = _SETTERS
    rows: list[ConsumerPresence] = []
    append = rows.append
    for i in order:
        queue, group = groups[i]
        for consumer, stored in sorted(replies[i].items()):
            registered, heartbeat, lease = stored.split()
            hb = int(heartbeat)
            age = (now_ns - hb) // 1_000_000 if now_ns > hb else 0
            row = new(cls)
            s_q(row, queue)
            s_g(row, group)
            s_c(row, consumer.decode())
            s_reg(row, int(registered))
            s_hb(row, hb)
            s_age(row, age)
            s_lease(row, int(lease))
            s_state(row, active if age <= ttl_ms else stale if age <= twice else expired)
            append(row)
    return rows

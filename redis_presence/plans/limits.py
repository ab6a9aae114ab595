"""How much work one request may do: the bounds every plan keeps (`Limits`)."""

from __future__ import annotations

from typing import NamedTuple

MAX_BEATS_PER_CALL = 250
"""Most beats in one heartbeat script call (``heartbeat_many.lua`` spends about 5 us of
server time a beat, so a full call holds the server about 1.5 ms); a larger batch is split,
one more call per 250 beats, all sent in one pipeline."""

MAX_CACHED_GROUPS = 4_096
"""Most groups whose single-beat call a planner keeps ready (it starts over when full)."""

MAX_GROUPS_PER_CALL = 100
"""Most groups one command touches (an index page: one ``ZRANGEBYLEX ... LIMIT``)."""

MAX_CONSUMERS_PER_CALL = 500
"""Most consumers one read command visits: a group read in one ``HGETALL``, one ``HSCAN``
step (about 0.5 ms of server time for 500 fields of a hash table), a page of ties in
counts, an ``XRANGE`` page of events."""

MAX_PRUNE_GROUPS_PER_CALL = 100
"""Most groups one ``prune.lua`` call visits: an index page (MAX_GROUPS_PER_CALL) in one
call. A group with nothing to remove costs the script one command (the read of its oldest
beat, ``ZRANGEBYSCORE -inf +inf LIMIT 0 1``, about 2 us with the Lua around it); one with
consumers to remove about a dozen (the range reads, ``HMGET``s, two ``TYPE``s,
``ZREM``/``HDEL``, its pruned event, unlisting it when emptied), about 50 us, and the script
writes at most 10 of those a call (its MAX_WRITTEN; the call stops after the tenth and the
caller sends the rest again). So a call holds the server at most about 0.2 + 0.5 ms besides
its consumers. It was 10 groups a call, each visited with seven type checks and range reads
whether or not anything was removed (about 8.5 commands a group: issue 33 item 3)."""

MAX_PRUNE_CONSUMERS_PER_CALL = 100
"""Most consumers one ``prune.lua`` call visits (its budget; the next call resumes where it
ran out). Removing one costs the script about 6 us (its range read and stored value, the
``ZREM``/``HDEL``, its field of the pruned event): with the groups' own cost, a full call
holds the server about 1 ms. The prune bounds were lowered from 20 groups and 150
consumers, whose worst calls measured 1.9 to 2.3 ms, over the 2 ms that no command may
exceed; ``tests/test_bounded.py`` reports the longest call and the p99 in each CI run
(p99 0.9 ms before, 0.52 ms after)."""

TTL_CACHE_MS = 5_000
"""How long a planner trusts a shared TTL (or progress budget) it read (`Planner.set_ttl`): a
TTL another process stores reaches this one's heartbeats (which need it to tell a recovery)
and reads (their states, and the TTL a reader shows, `Planner.ttl_in_use`) within this. It
was 10 s while the web service kept a cache of its own refreshed every 5 s (what docs/web.md
promises); that cache is this one since, so this one refreshes every 5 s."""

MAX_ROWS_PER_ROUND_TRIP = 10_000
"""Most consumers a read asks for in one round trip (one pipeline): what a streaming read
holds in memory, besides the groups of more than MAX_CONSUMERS_PER_CALL it is reading."""


class Limits(NamedTuple):
    """How much work one request may do (the README's "Never stall Redis"). Tests shrink them
    to make every path cross its page boundaries."""

    groups: int = MAX_GROUPS_PER_CALL
    consumers: int = MAX_CONSUMERS_PER_CALL
    rows: int = MAX_ROWS_PER_ROUND_TRIP
    beats: int = MAX_BEATS_PER_CALL
    prune_groups: int = MAX_PRUNE_GROUPS_PER_CALL
    prune_consumers: int = MAX_PRUNE_CONSUMERS_PER_CALL

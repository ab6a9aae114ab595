"""Races: heartbeats, prunes, deregisters and reads from threads and processes at once.

Every call passes an explicit ``now_ns``, and every reader looks at the single instant ``X``,
so "the same instant" is well defined while the store churns underneath:

- *live* consumers (in the stable groups) are beaten again and again with timestamps that are
  active at ``X`` and with new lease counts: the number of active consumers per stable group
  at ``X`` never changes, whatever else happens;
- *churn* consumers (expired at ``X``) are beaten, deregistered and pruned all the time, and
  *stale* ones (stale at ``X``) are beaten: neither may change the active counts;
- in the *ephemeral* group, which prunes and deregisters empty again and again, each writer
  beats a fresh active consumer, must find it in a snapshot at once (no heartbeat lost to a
  racing removal), and must then deregister it itself (no prune removed it).

Checked: no lost update (every live consumer ends with its writer's last lease and timestamp
and its first registration), no resurrection (no deregistered consumer comes back), no live
consumer pruned, and at every read the counts equal the active rows of the snapshot.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context

import pytest
from backends import without_logs
from servers import RedisServer

from redis_presence import PresenceState, RedisPresenceRegistry

MS = 1_000_000
X = 1_796_000_000_123_456_000  # the one instant every reader and pruner looks at
TTL = 30_000
LIVE_AT = X - 10_000 * MS  # first registration of every live consumer
STALE_AT = X - 45_000 * MS
EXPIRED_AT = X - 100_000 * MS
STABLE = [("orders", "billing"), ("orders", "audit"), ("mail", "send")]
EPHEMERAL = ("jobs", "ephemeral")
LIVE_PER_GROUP = 2
THREAD_WRITERS = [0, 1]
PROCESS_WRITERS = [2, 3]
WRITERS = THREAD_WRITERS + PROCESS_WRITERS
RACE_SECONDS = 2.5
MAX_ITERATIONS = 20_000

pytestmark = pytest.mark.timeout(90)


def live_consumers(writer: int) -> list[tuple[str, str, str]]:
    return [(q, g, f"live-{writer}-{j}") for q, g in STABLE for j in range(LIVE_PER_GROUP)]


EXPECTED_ACTIVE = {group: len(WRITERS) * LIVE_PER_GROUP for group in STABLE}


@dataclass
class Outcome:
    """What one worker did and saw (picklable, returned from processes)."""

    name: str
    last: dict[tuple[str, str, str], tuple[int, int]] = field(default_factory=dict)
    ghosts: list[tuple[str, str, str]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    beats: int = 0
    pruned: int = 0
    reads: int = 0


def check_read(registry: RedisPresenceRegistry, outcome: Outcome) -> None:
    """Counts at X equal the active rows of the snapshot at X; the stable groups keep theirs."""
    counts = registry.count_active_by_group(now_ns=X, ttl_ms=TTL)
    rows = registry.snapshot(now_ns=X, ttl_ms=TTL)
    counts_after = registry.count_active_by_group(now_ns=X, ttl_ms=TTL)
    outcome.reads += 1
    active: dict[tuple[str, str], int] = {}
    for row in rows:
        if row.state is PresenceState.ACTIVE:
            active[(row.queue, row.group)] = active.get((row.queue, row.group), 0) + 1
    for group, expected in EXPECTED_ACTIVE.items():
        seen = (counts.get(group), active.get(group), counts_after.get(group))
        if seen != (expected, expected, expected):
            outcome.violations.append(f"{outcome.name}: {group} counts/snapshot/counts {seen}")
    if rows != sorted(rows, key=lambda r: r.key):
        outcome.violations.append(f"{outcome.name}: snapshot out of order")


def work(url: str, writer: int | None, role: str, seconds: float) -> Outcome:
    """One worker: a writer (with some prunes and reads mixed in), a pruner or a reader."""
    outcome = Outcome(f"{role}-{writer}")
    registry = RedisPresenceRegistry.from_url(url)
    deadline = time.monotonic() + seconds
    try:
        n = 0
        while time.monotonic() < deadline and n < MAX_ITERATIONS:
            n += 1
            if role == "pruner":
                outcome.pruned += registry.prune_expired(now_ns=X, ttl_ms=TTL)
            elif role == "reader":
                check_read(registry, outcome)
            else:
                assert writer is not None
                write_step(registry, writer, n, outcome)
                if role == "writer+" and n % 4 == 0:
                    outcome.pruned += registry.prune_expired(now_ns=X, ttl_ms=TTL)
                    check_read(registry, outcome)
    except Exception as exc:  # reported, never swallowed: the test fails on it
        outcome.violations.append(f"{outcome.name} crashed: {exc!r}")
    finally:
        registry.close()
    return outcome


def write_step(registry: RedisPresenceRegistry, w: int, n: int, outcome: Outcome) -> None:
    q, g = STABLE[n % len(STABLE)]
    # Live: new timestamp (still active at X) and lease; alone or in a batch.
    stamp, lease = LIVE_AT + n * 1_000 + w, n
    mine = [c for c in live_consumers(w) if c[:2] == (q, g)]
    if n % 2:
        registry.heartbeat(*mine[0], lease, now_ns=stamp)
        touched = mine[:1]
    else:
        registry.heartbeat_many([(*c, lease) for c in mine], now_ns=stamp)
        touched = mine
    for consumer in touched:
        outcome.last[consumer] = (stamp, lease)
    # Churn (expired at X) and stale consumers: never counted as active at X.
    registry.heartbeat(q, g, f"churn-{w}-{n % 5}", n, now_ns=EXPIRED_AT - n)
    if n % 3 == 0:
        registry.deregister(q, g, f"churn-{w}-{(n + 2) % 5}")
    registry.heartbeat(q, g, f"stale-{w}-{n % 3}", n, now_ns=STALE_AT)
    # Ephemeral: a fresh consumer joins a group that others keep emptying.
    fresh = (*EPHEMERAL, f"fresh-{w}-{n}")
    registry.heartbeat(*EPHEMERAL, f"dead-{w}-{n % 4}", now_ns=EXPIRED_AT)
    registry.heartbeat(*fresh, 1, now_ns=X - 1_000 * MS)
    outcome.beats += 5 + len(touched)
    if n % 2 == 0:
        found = [r.key for r in registry.snapshot(now_ns=X, ttl_ms=TTL) if r.key == fresh]
        if not found:
            outcome.violations.append(f"{outcome.name}: heartbeat of {fresh} lost")
    if not registry.deregister(*fresh):
        outcome.violations.append(f"{outcome.name}: live {fresh} was removed by someone else")
    outcome.ghosts.append(fresh)


def test_concurrent_threads_and_processes_keep_every_invariant(
    redis_server: RedisServer, redis_url: str
) -> None:
    with redis_server.client() as client:
        setup = RedisPresenceRegistry(client)
        for w in WRITERS:
            setup.heartbeat_many([(*c, 0) for c in live_consumers(w)], now_ns=LIVE_AT)
        initial = Outcome("setup")
        check_read(setup, initial)
        assert initial.violations == []

        spawn = get_context("spawn")
        with (
            ProcessPoolExecutor(len(PROCESS_WRITERS), mp_context=spawn) as processes,
            ThreadPoolExecutor(len(THREAD_WRITERS) + 2) as threads,
        ):
            # Processes start slowly (spawn imports everything): give them their own clock.
            futures: list[Future[Outcome]] = [
                processes.submit(work, redis_url, w, "writer+", RACE_SECONDS)
                for w in PROCESS_WRITERS
            ]
            futures += [
                threads.submit(work, redis_url, w, "writer", RACE_SECONDS) for w in THREAD_WRITERS
            ]
            futures.append(threads.submit(work, redis_url, None, "pruner", RACE_SECONDS))
            futures.append(threads.submit(work, redis_url, None, "reader", RACE_SECONDS))
            outcomes = [f.result(timeout=60) for f in futures]

        violations = [v for o in outcomes for v in o.violations]
        assert violations == [], "\n".join(violations[:20])
        writers = [o for o in outcomes if o.name.startswith("writer")]
        assert all(o.beats > 0 for o in writers), [(o.name, o.beats) for o in outcomes]
        assert sum(o.reads for o in outcomes) > 10
        assert sum(o.pruned for o in outcomes) > 0

        rows = {r.key: r for r in setup.snapshot(now_ns=X, ttl_ms=TTL)}
        # No lost update: every live consumer carries its writer's last beat.
        for outcome in writers:
            for key, (stamp, lease) in outcome.last.items():
                row = rows[key]
                assert (row.last_heartbeat_ns, row.lease_count) == (stamp, lease), key
                assert row.registered_at_ns == LIVE_AT, key
        # No resurrection: no deregistered consumer is back.
        ghosts = {g for o in outcomes for g in o.ghosts}
        assert len(ghosts) == sum(len(o.ghosts) for o in outcomes) > 0
        assert not ghosts & set(rows)
        # Once pruned at X, only live and stale consumers remain, and the ephemeral group has
        # left every index.
        setup.prune_expired(now_ns=X, ttl_ms=TTL)
        final = setup.snapshot(now_ns=X, ttl_ms=TTL)
        assert {r.state for r in final} == {PresenceState.ACTIVE, PresenceState.STALE}
        assert not [r for r in final if r.key[:2] == EPHEMERAL]
        assert not without_logs(client.keys("presence:{jobs}*"))
        assert setup.count_active_by_group(now_ns=X, ttl_ms=TTL) == EXPECTED_ACTIVE
        assert len(setup) == len(final)
        total_beats = sum(o.beats for o in outcomes)
        print(
            f"\nraces: {total_beats} beats, {sum(o.pruned for o in outcomes)} pruned, "
            f"{len(ghosts)} deregistered, {sum(o.reads for o in outcomes)} checked reads, "
            f"0 violations"
        )

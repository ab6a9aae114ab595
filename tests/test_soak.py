"""Soak: broker processes keep beating through repeated SIGKILLs and restarts of Redis (AOF).

Several broker processes (spawned, like real ones) beat their consumers every
`BEAT_INTERVAL_S` through the package's API and absorb every `PresenceError` by retrying.
Meanwhile the test kills Redis with SIGKILL `CYCLES` times and starts it again on the same
AOF files. Afterwards: no broker crashed, every consumer whose broker kept beating is active
(none expired) with the registration it had before the first crash, and the one consumer
each broker deregistered on the way is gone. The numbers are printed at the end of every
run, under "run numbers" (see conftest), and recorded as test properties (JUnit XML).
"""

from __future__ import annotations

import time
from multiprocessing import get_context
from typing import Any

import pytest
import redis
from conftest import RUN_SUMMARY
from redis.backoff import NoBackoff
from redis.retry import Retry
from servers import MakeRedisServer, RedisServer
from waiting import wait_until

from redis_presence import PresenceError, PresenceState, RedisPresenceRegistry

SOAK_SECONDS = 13.0
CYCLES = 4
DOWN_S = 0.4
BROKERS = 3
CONSUMERS = 12
BEAT_INTERVAL_S = 0.05
CHECK_TTL_MS = 2_000  # stricter than any real TTL: expired means "not beaten for 4 s"
WAIT_S = 20.0
MS = 1_000_000

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]


def consumers_of(broker: int) -> list[tuple[str, str, str]]:
    """Broker b's consumers; the last one is retired (deregistered) half-way."""
    queues = ["orders", "mail", "jobs"]
    return [
        (queues[(broker + i) % 3], f"group-{i % 2}", f"b{broker}-c{i}") for i in range(CONSUMERS)
    ]


def run_broker(
    url: str,
    broker: int,
    stop: Any,
    retire_at: float,
    may_retire: Any,
    beats: Any,
    errors: Any,
    retired: Any,
) -> None:
    """A broker process: beat every consumer each interval; never die of a Redis failure."""
    registry = RedisPresenceRegistry.from_url(
        url, retry=Retry(NoBackoff(), 0), socket_connect_timeout=1, socket_timeout=1
    )
    mine = consumers_of(broker)
    keep, retiring = mine[:-1], mine[-1]
    rounds = 0
    while not stop.is_set():
        rounds += 1
        try:
            # Half-way, and never before the test saw every consumer registered (a loaded
            # machine can start the brokers late).
            if retired.value == 0 and may_retire.is_set() and time.monotonic() >= retire_at:
                registry.deregister(*retiring)  # True, or False if a lost reply hid it
                retired.value = 1
            live = keep if retired.value else mine
            beats.value += registry.heartbeat_many([(*c, rounds % 7) for c in live])
            if rounds % 10 == 0:
                registry.count_active_by_group()  # brokers read too
        except PresenceError:
            errors.value += 1
            stop.wait(BEAT_INTERVAL_S / 2)
            continue
        stop.wait(BEAT_INTERVAL_S)
    registry.close()


def fsynced_since(client: redis.Redis, since_ns: int) -> bool:
    """The AOF is written and synced, and a second has passed on the server's clock."""
    seconds, micros = client.time()
    info = client.info("persistence")
    return (
        (int(seconds) * 1_000_000 + int(micros)) * 1_000 > since_ns + 1_000 * MS
        and info["aof_last_write_status"] == "ok"
        and int(info.get("aof_pending_bio_fsync", 0)) == 0
    )


def observer(server: RedisServer) -> RedisPresenceRegistry:
    client = server.client(retry=Retry(NoBackoff(), 0), socket_timeout=5)
    return RedisPresenceRegistry(client)


def test_brokers_survive_repeated_crashes_and_nothing_is_lost(
    make_redis_server: MakeRedisServer, record_property: Any
) -> None:
    server = make_redis_server(appendonly=True)
    ctx = get_context("spawn")
    stop = ctx.Event()
    may_retire = ctx.Event()
    beats = [ctx.Value("q", 0) for _ in range(BROKERS)]
    errors = [ctx.Value("q", 0) for _ in range(BROKERS)]
    retired = [ctx.Value("b", 0) for _ in range(BROKERS)]
    started = time.monotonic()
    retire_at = started + SOAK_SECONDS / 2
    processes = [
        ctx.Process(
            target=run_broker,
            args=(server.url, b, stop, retire_at, may_retire, beats[b], errors[b], retired[b]),
            name=f"broker-{b}",
        )
        for b in range(BROKERS)
    ]
    for process in processes:
        process.start()
    faults = 0
    try:
        # Every consumer registered, and that registration safely on disk, before any crash.
        wait_until(
            lambda: all(v.value >= 2 * CONSUMERS for v in beats),
            timeout_s=WAIT_S,
            what="every broker to beat",
        )
        watcher = observer(server)
        registered = {r.key: r.registered_at_ns for r in watcher.snapshot()}
        assert set(registered) == {c for b in range(BROKERS) for c in consumers_of(b)}
        may_retire.set()
        wait_until(
            lambda: fsynced_since(watcher.client, max(registered.values())),
            timeout_s=WAIT_S,
            what="the AOF",
        )
        watcher.client.close()

        for cycle in range(1, CYCLES + 1):
            kill_at = started + cycle * SOAK_SECONDS / (CYCLES + 1)
            time.sleep(max(0.0, kill_at - time.monotonic()))  # the schedule, not a wait
            seen = [v.value for v in errors]
            server.kill()
            faults += 1

            def noticed(seen: list[int] = seen) -> bool:
                return all(v.value > s for v, s in zip(errors, seen, strict=True))

            wait_until(noticed, timeout_s=WAIT_S, what="every broker to notice the crash")
            time.sleep(DOWN_S)  # stay down a while: brokers keep failing and retrying
            server.restart()
            acked = [v.value for v in beats]

            def recovered(acked: list[int] = acked) -> bool:
                return all(v.value >= a + 2 * CONSUMERS for v, a in zip(beats, acked, strict=True))

            wait_until(
                recovered, timeout_s=WAIT_S, what=f"every broker to recover after crash {cycle}"
            )
        assert all(p.is_alive() for p in processes), "a broker died"
        assert all(r.value for r in retired), "a broker never retired its last consumer"

        # After recovery, while the brokers keep beating: nobody who kept beating is expired.
        watcher = observer(server)
        rows = {r.key: r for r in watcher.snapshot(ttl_ms=CHECK_TTL_MS)}
        counts = watcher.count_active_by_group(ttl_ms=CHECK_TTL_MS)
        watcher.client.close()
    finally:
        stop.set()
        for process in processes:
            process.join(WAIT_S)
            if process.is_alive():
                process.kill()
                process.join()
    elapsed = time.monotonic() - started

    crashed = [p.name for p in processes if p.exitcode != 0]
    kept = [c for b in range(BROKERS) for c in consumers_of(b)[:-1]]
    retired_keys = [consumers_of(b)[-1] for b in range(BROKERS)]
    expired = [c for c in kept if c not in rows or rows[c].state is not PresenceState.ACTIVE]
    lost_registration = [c for c in kept if c in rows and rows[c].registered_at_ns != registered[c]]
    resurrected = [c for c in retired_keys if c in rows]
    numbers = {
        "soak_seconds": round(elapsed, 1),
        "broker_processes": BROKERS,
        "faults_survived": faults,
        "beats_sent": sum(v.value for v in beats),
        "errors_absorbed": sum(v.value for v in errors),
        "brokers_crashed": len(crashed),
        "consumers_checked": len(kept) + len(retired_keys),
        "expired_after_recovery": len(expired),
        "registrations_lost": len(lost_registration),
        "deregistered_but_back": len(resurrected),
    }
    for name, value in numbers.items():
        record_property(name, value)
    nothing_lost = not (expired or lost_registration or resurrected or crashed)
    summary = ", ".join(f"{k}={v}" for k, v in numbers.items())
    summary += f"; nothing lost: {'yes' if nothing_lost else 'NO'}"
    print(f"\nsoak: {summary}")
    record_property(RUN_SUMMARY, summary)  # conftest prints it at the end of every run

    assert crashed == []
    assert faults == CYCLES >= 3
    assert expired == []
    assert lost_registration == []
    assert resurrected == []
    assert set(rows) == set(kept)
    expected_counts: dict[tuple[str, str], int] = {}
    for queue, group, _ in kept:
        expected_counts[(queue, group)] = expected_counts.get((queue, group), 0) + 1
    assert counts == expected_counts
    assert numbers["errors_absorbed"] >= CYCLES * BROKERS

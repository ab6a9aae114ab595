"""The coalescing reporter: writes per flush counted on the server, delay stamping, outage
and recovery against a server the test kills and restarts, bounded memory, clean close.

Time is controlled through the reporter's `clock` where the test is about ages; where a
background flush must happen, the test polls with a deadline.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
from clusters import RedisClusterProcesses
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry
from servers import MakeRedisServer, RedisServer, free_port
from waiting import wait_until, wait_until_async

from redis_presence import (
    DEFAULT_PRESENCE_TTL_MS,
    DEFAULT_REPORT_INTERVAL_MS,
    AsyncPresenceReporter,
    AsyncRedisPresenceRegistry,
    PresenceConnectionError,
    PresenceReporter,
    RedisPresenceRegistry,
)
from redis_presence.coalescer import RETRY_MIN_MS, Coalescer, Flushed
from redis_presence.plans import MAX_BEATS_PER_CALL

MS = 1_000_000
SECOND = 1_000 * MS
LONG_MS = 3_600_000  # an interval that never elapses during a test: flushes are explicit
LOGGER = "redis_presence.reporter"

pytestmark = pytest.mark.timeout(60)


class FakeClock:
    """Monotonic nanoseconds that move only when the test says so."""

    def __init__(self) -> None:
        self.now = 10**12

    def __call__(self) -> int:
        return self.now

    def advance(self, ns: int) -> None:
        self.now += ns


def server_now_ns(client: Any) -> int:
    seconds, micros = client.time()
    return (int(seconds) * 1_000_000 + int(micros)) * 1_000


def calls(client: Any, command: str) -> int:
    stats = client.info("commandstats").get(f"cmdstat_{command}")
    return int(stats["calls"]) if stats else 0


def fast_failing(server: RedisServer) -> redis.Redis:
    """A client that fails at once when the server is down (no retries inside redis-py)."""
    return server.client(socket_timeout=2, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))


@pytest.fixture
def registry(redis_client: redis.Redis) -> RedisPresenceRegistry:
    return RedisPresenceRegistry(redis_client)


@pytest.fixture
def reporter(registry: RedisPresenceRegistry) -> Iterator[PresenceReporter]:
    with PresenceReporter(registry, LONG_MS) as reporter:
        yield reporter


# --- defaults and arguments ---------------------------------------------------------------


def test_default_interval_is_a_sixth_of_the_default_ttl() -> None:
    assert DEFAULT_REPORT_INTERVAL_MS == 5_000
    assert DEFAULT_REPORT_INTERVAL_MS * 5 <= DEFAULT_PRESENCE_TTL_MS


@pytest.mark.parametrize(
    ("args", "error", "argument"),
    [
        (("", "g", "c", 0), ValueError, "queue"),
        (("q", None, "c", 0), TypeError, "group"),
        (("q", "g", "x" * 513, 0), ValueError, "consumer"),
        (("q", "g", "\ud800", 0), ValueError, "consumer"),
        (("q", "g", "c", -1), ValueError, "lease_count"),
        (("q", "g", "c", 2**32), ValueError, "lease_count"),
        (("q", "g", "c", True), TypeError, "lease_count"),
        (("q", "g", "c", 1.0), TypeError, "lease_count"),
    ],
)
def test_bad_beats_raise_at_the_call_and_are_not_kept(
    reporter: PresenceReporter, args: tuple[Any, ...], error: type[Exception], argument: str
) -> None:
    with pytest.raises(error, match=argument):
        reporter.beat(*args)
    assert reporter.pending == 0


def test_odd_but_valid_names_take_the_slow_path_and_pass(reporter: PresenceReporter) -> None:
    reporter.beat("queue é", "{g}", "c" * 512, 2**32 - 1)
    reporter.beat("q", "g", "é" * 256)
    assert reporter.pending == 2


@pytest.mark.parametrize(("interval", "error"), [(0, ValueError), (1.5, TypeError)])
def test_bad_interval_is_refused(
    registry: RedisPresenceRegistry, interval: Any, error: type[Exception]
) -> None:
    with pytest.raises(error, match="interval_ms"):
        PresenceReporter(registry, interval)


def test_beat_is_cheap(reporter: PresenceReporter) -> None:
    start = time.perf_counter()
    for i in range(100_000):
        reporter.beat("orders", "billing", f"w{i % 10}", i)
    per_beat_us = (time.perf_counter() - start) / 100_000 * 1e6
    assert per_beat_us < 20  # about 1 µs here; generous for slow CI machines
    assert reporter.pending == 10


# --- coalescing, counted on the server -----------------------------------------------------


def test_ten_thousand_beats_for_ten_consumers_are_ten_writes_in_one_call(
    reporter: PresenceReporter, registry: RedisPresenceRegistry, redis_client: redis.Redis
) -> None:
    reporter.beat("warm", "up", "c")
    reporter.flush()  # loads the script
    redis_client.config_resetstat()
    for i in range(10_000):
        reporter.beat("orders" if i % 2 else "mail", "g", f"w{i % 10}", i)
    assert reporter.flush() == 10
    # The beats in one call (a function), and the new consumers' metadata (the reporter's
    # default: host, pid, version) in one more (a script): only with a consumer's first flush.
    assert calls(redis_client, "fcall") == 1
    assert calls(redis_client, "evalsha") == 1
    assert calls(redis_client, "hset") == 20
    # Ten beats, the groups listed once, the two groups' `joined` entries listed in the
    # index of event logs (ten new consumers: one log entry per group), and each group in the
    # fleet indexes (P:newest, P:oldest: once per group and call).
    assert calls(redis_client, "zadd") == 17
    assert calls(redis_client, "xadd") == 2
    rows = {row.consumer: row.lease_count for row in registry.snapshot() if row.queue != "warm"}
    assert rows == {f"w{n}": 9_990 + n for n in range(10)}  # the latest beat of each
    redis_client.config_resetstat()
    assert reporter.flush() == 0  # nothing new: nothing written
    assert calls(redis_client, "fcall") == 0


def test_a_large_flush_is_split_into_calls_of_at_most_max_beats_per_call(
    reporter: PresenceReporter, registry: RedisPresenceRegistry, redis_client: redis.Redis
) -> None:
    reporter.beat("warm", "up", "c")
    reporter.flush()
    redis_client.config_resetstat()
    beats = 2 * MAX_BEATS_PER_CALL + MAX_BEATS_PER_CALL // 2
    for i in range(beats):
        reporter.beat(f"q{i % 7}", f"g{i % 3}", f"w{i}")
    assert reporter.flush() == beats
    # Three calls of beats, and as many of the new consumers' metadata (split alike).
    assert calls(redis_client, "fcall") == 3
    assert calls(redis_client, "evalsha") == 3
    assert calls(redis_client, "hset") == beats + beats
    assert len(registry) == beats + 1


def test_coalescing_on_a_cluster_is_one_call_per_queue(
    cluster_client: Any, redis_cluster: RedisClusterProcesses
) -> None:
    nodes = [node.client() for node in redis_cluster.nodes]
    try:
        registry = RedisPresenceRegistry(cluster_client)
        with PresenceReporter(registry, LONG_MS, default_meta=False) as reporter:
            reporter.beat("orders", "g", "warm")
            reporter.beat("mail", "g", "warm")
            reporter.flush()
            for client in nodes:
                client.config_resetstat()
            for i in range(10_000):
                reporter.beat("orders" if i % 2 else "mail", "g", f"w{i % 10}", i)
            assert reporter.flush() == 10
        assert sum(calls(c, "fcall") for c in nodes) == 2
        assert sum(calls(c, "hset") for c in nodes) == 10
    finally:
        for client in nodes:
            client.close()


def test_a_background_flush_happens_within_one_interval(registry: RedisPresenceRegistry) -> None:
    with PresenceReporter(registry, 200) as reporter:
        reporter.beat("q", "g", "c", 3)
        started = time.monotonic()
        wait_until(lambda: len(registry) == 1, timeout_s=5, what="the background flush")
        took = time.monotonic() - started
        assert reporter.pending == 0
    assert took < 2  # one 200 ms interval, with room for a loaded machine


# --- beats are stamped when they were made ---------------------------------------------------


def test_a_beat_is_stamped_with_its_own_time_not_the_flush_time(
    registry: RedisPresenceRegistry, redis_client: redis.Redis
) -> None:
    clock = FakeClock()
    with PresenceReporter(registry, LONG_MS, clock=clock) as reporter:
        reporter.beat("q", "g", "early", 1)
        clock.advance(7 * SECOND + 250 * MS)
        reporter.beat("q", "g", "late", 2)
        clock.advance(3 * SECOND)
        before = server_now_ns(redis_client)
        reporter.flush()
        after = server_now_ns(redis_client)
    rows = {row.consumer: row for row in registry.snapshot()}
    early, late = rows["early"], rows["late"]
    assert before - 10_250 * MS <= early.last_heartbeat_ns <= after - 10_250 * MS
    assert before - 3 * SECOND <= late.last_heartbeat_ns <= after - 3 * SECOND
    assert early.registered_at_ns == early.last_heartbeat_ns
    assert early.last_seen_age_ms >= 10_250


def test_a_consumer_that_stops_beating_is_not_written_again_and_goes_stale(
    registry: RedisPresenceRegistry, redis_client: redis.Redis
) -> None:
    clock = FakeClock()
    with PresenceReporter(registry, LONG_MS, clock=clock) as reporter:
        reporter.beat("q", "g", "quiet")
        reporter.flush()
        (first,) = registry.snapshot()
        redis_client.config_resetstat()
        clock.advance(40 * SECOND)
        assert reporter.flush() == 0
        assert calls(redis_client, "fcall") == 0
    (row,) = registry.snapshot(now_ns=first.last_heartbeat_ns + 31 * SECOND)
    assert row.last_heartbeat_ns == first.last_heartbeat_ns
    assert row.state.value == "stale"


# --- outage and recovery against a real server ----------------------------------------------


def test_outage_keeps_beats_logs_once_and_catches_up_within_an_interval(
    make_redis_server: MakeRedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    interval_ms = 500
    server = make_redis_server()
    client = fast_failing(server)
    reader = fast_failing(server)
    registry = RedisPresenceRegistry(client)
    reading = RedisPresenceRegistry(reader)
    consumers = [f"w{i}" for i in range(20)]
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    stop = threading.Event()
    try:
        with PresenceReporter(registry, interval_ms) as reporter:
            broker = threading.Thread(target=read_loop, args=(reporter, consumers, stop))
            broker.start()
            wait_until(lambda: tracked(reading) == 20, timeout_s=5, what="the first flush")

            server.kill()
            wait_until(lambda: retries(caplog) >= 4, timeout_s=10, what="four failed attempts")
            outage_beat_ns = time.time_ns()
            reporter.beat("q", "g", "during-outage", 9)
            wait_until(
                lambda: retries(caplog) >= 5, timeout_s=10, what="a failed attempt after that beat"
            )
            assert reporter.pending == len(consumers) + 1

            server.restart()
            restarted = time.monotonic()
            wait_until(lambda: tracked(reading) == 21, timeout_s=10, what="the catch-up flush")
            catch_up_s = time.monotonic() - restarted
            stop.set()
            broker.join()
        rows = {row.consumer: row for row in reading.snapshot()}
    finally:
        stop.set()
        client.close()
        reader.close()
    print(f"catch-up after restart: {catch_up_s * 1000:.0f} ms (interval {interval_ms} ms)")
    assert time.monotonic() - restarted >= catch_up_s
    assert catch_up_s < interval_ms / 1000 + 1.0  # one interval, plus a loaded machine
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    infos = [r for r in caplog.records if r.levelno == logging.INFO]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "cannot write to Redis" in warnings[0].getMessage()
    assert len(infos) == 1
    assert "reached Redis again" in infos[0].getMessage()
    during = rows["during-outage"]
    # Written about a second after it was made, stamped when it was made (same host clock).
    assert abs(during.last_heartbeat_ns - outage_beat_ns) < 100 * MS
    assert during.lease_count == 9


def tracked(registry: RedisPresenceRegistry) -> int:
    """How many consumers the registry tracks; -1 while it cannot be reached."""
    try:
        return len(registry)
    except PresenceConnectionError:
        return -1


def read_loop(reporter: PresenceReporter, consumers: list[str], stop: threading.Event) -> None:
    """A broker's read path: beats as fast as it reads, never blocked by Redis."""
    lease = 0
    while not stop.is_set():
        for consumer in consumers:
            reporter.beat("q", "g", consumer, lease % 5)
        lease += 1
        time.sleep(0.001)


def retries(caplog: pytest.LogCaptureFixture) -> int:
    return sum(
        1
        for r in caplog.records
        if r.name == LOGGER
        and r.levelno in (logging.WARNING, logging.DEBUG)
        and ("retry" in r.getMessage() or "cannot write" in r.getMessage())
    )


def test_backoff_doubles_from_the_minimum_up_to_the_interval_with_equal_jitter() -> None:
    clock = FakeClock()
    core = Coalescer(1_000, track=False, clock=clock)
    core.beat("q", "g", "c", 0)
    bounds = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    for bound in bounds:
        _, taken = core.begin()
        assert taken is not None
        wait = core.failed(taken, PresenceConnectionError("down")).wait_s
        assert bound / 2 <= wait <= bound  # equal jitter: half the bound, then up to all of it
    assert RETRY_MIN_MS == 100
    started, taken = core.begin()
    assert taken is not None
    clock.advance(30 * MS)
    assert core.succeeded(taken, Flushed(1, {}), started).wait_s == pytest.approx(0.97)
    core.beat("q", "g", "c", 0)
    _, taken = core.begin()
    assert taken is not None
    assert 0.05 <= core.failed(taken, PresenceConnectionError("down")).wait_s <= 0.1  # reset


def test_a_fleet_of_reporters_does_not_retry_in_step() -> None:
    """After a Redis restart every reporter of a fleet fails at once: their retries are
    spread over the bound, not sent together (before: each waited exactly 0.1, 0.2, ...)."""
    first_waits: list[float] = []
    long_waits: list[float] = []
    for _ in range(200):
        core = Coalescer(5_000, track=False, clock=FakeClock())
        core.beat("q", "g", "c", 0)
        for failure in range(1, 41):  # past the doublings: the bound is the interval
            _, taken = core.begin()
            assert taken is not None
            wait = core.failed(taken, PresenceConnectionError("down")).wait_s
            if failure == 1:
                first_waits.append(wait)
        long_waits.append(wait)
    for waits, bound in ((first_waits, 0.1), (long_waits, 5.0)):
        assert all(bound / 2 <= wait <= bound for wait in waits)
        # 200 draws in [bound/2, bound]: both halves of the range are used, no value twice
        assert len(set(waits)) == len(waits)
        assert min(waits) < bound * 0.6
        assert max(waits) > bound * 0.9


def test_restored_beats_never_override_newer_ones_or_deregistrations() -> None:
    clock = FakeClock()
    core = Coalescer(1_000, track=False, clock=clock)
    core.beat("q", "g", "newer", 1)
    core.beat("q", "g", "gone", 1)
    core.beat("q", "g", "kept", 1)
    _, taken = core.begin()
    assert taken is not None
    clock.advance(5 * MS)
    core.beat("q", "g", "newer", 2)
    core.deregister("q", "g", "gone")
    core.failed(taken, PresenceConnectionError("down"))
    _, again = core.begin()
    assert again is not None
    assert again.beats == {
        ("q", "g", "newer"): (2, clock.now, None, None, None),
        ("q", "g", "kept"): (1, clock.now - 5 * MS, None, None, None),
    }
    assert list(again.deregs) == [("q", "g", "gone")]


# --- memory ------------------------------------------------------------------------------


def test_memory_is_bounded_by_distinct_consumers_during_an_outage() -> None:
    client = redis.Redis(port=free_port(), socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))
    registry = RedisPresenceRegistry(client)
    with PresenceReporter(registry, LONG_MS) as reporter:

        def beat_many(n: int) -> None:
            for i in range(n):
                reporter.beat("q", "g", f"w{i % 100}", i)

        beat_many(20_000)
        with pytest.raises(PresenceConnectionError):
            reporter.flush()
        tracemalloc.start()
        try:
            baseline = tracemalloc.get_traced_memory()[0]
            beat_many(100_000)
            grown = tracemalloc.get_traced_memory()[0] - baseline
        finally:
            tracemalloc.stop()
        for _ in range(3):
            with pytest.raises(PresenceConnectionError):
                reporter.flush()
        assert reporter.pending == 100
        assert grown < 64 * 1024, f"{grown} bytes for 100,000 beats of 100 known consumers"
    client.close()


# --- close ----------------------------------------------------------------------------------


def test_close_flushes_stops_the_thread_and_is_idempotent(registry: RedisPresenceRegistry) -> None:
    reporter = PresenceReporter(registry, LONG_MS)
    reporter.beat("q", "g", "c", 4)
    reporter.close()
    assert reporter._thread is not None
    assert not reporter._thread.is_alive()
    assert [(row.consumer, row.lease_count) for row in registry.snapshot()] == [("c", 4)]
    reporter.close()
    reporter.beat("q", "g", "late")  # dropped: the reporter is closed
    assert reporter.pending == 0
    assert len(registry) == 1
    assert not [t for t in threading.enumerate() if t.name == "redis-presence-reporter"]


def test_close_when_redis_is_down_logs_and_returns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client = redis.Redis(port=free_port(), socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))
    reporter = PresenceReporter(RedisPresenceRegistry(client), LONG_MS)
    reporter.beat("q", "g", "c")
    start = time.monotonic()
    reporter.close()
    assert time.monotonic() - start < 5
    assert any("could not write at close" in r.getMessage() for r in caplog.records)
    client.close()


def test_deregister_on_close_forgets_every_reported_consumer(
    registry: RedisPresenceRegistry,
) -> None:
    other = PresenceReporter(registry, LONG_MS)
    other.beat("q", "g", "someone-else")
    other.close()
    with PresenceReporter(registry, LONG_MS, deregister_on_close=True) as reporter:
        reporter.beat("q", "g", "a")
        reporter.beat("r", "g", "b")
        reporter.flush()
        reporter.beat("q", "g", "a")
        reporter.beat("q", "g", "never-flushed")
        assert len(registry) == 3
    assert [row.consumer for row in registry.snapshot()] == ["someone-else"]


def test_deregister_drops_the_pending_beat_and_a_later_beat_registers_again(
    reporter: PresenceReporter, registry: RedisPresenceRegistry
) -> None:
    reporter.beat("q", "g", "a")
    reporter.beat("q", "g", "b")
    reporter.flush()
    reporter.beat("q", "g", "a", 5)
    reporter.deregister("q", "g", "a")
    reporter.deregister("q", "g", "b")
    reporter.beat("q", "g", "b", 7)
    assert reporter.pending == 1
    reporter.flush()
    rows = registry.snapshot()
    assert [(row.consumer, row.lease_count) for row in rows] == [("b", 7)]
    assert rows[0].registered_at_ns == rows[0].last_heartbeat_ns  # registered anew


def test_concurrent_beats_lose_no_last_beat(
    registry: RedisPresenceRegistry, reporter: PresenceReporter
) -> None:
    def broker(index: int) -> None:
        for lease in range(5_000):
            reporter.beat("q", "g", f"w{index}", lease)
            if lease % 1_000 == 0:
                reporter.flush()

    threads = [threading.Thread(target=broker, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    reporter.flush()
    assert {row.consumer: row.lease_count for row in registry.snapshot()} == {
        f"w{i}": 4_999 for i in range(4)
    }


# --- asyncio ----------------------------------------------------------------------------------


def test_async_reporter_coalesces_flushes_in_background_and_closes(
    redis_server: RedisServer, redis_client: redis.Redis
) -> None:
    clock = FakeClock()

    async def main() -> None:
        client = redis.asyncio.Redis(host=redis_server.host, port=redis_server.port)
        registry = AsyncRedisPresenceRegistry(client)
        try:
            # No metadata: this counts the beats' calls (metadata has its own tests).
            async with AsyncPresenceReporter(
                registry, LONG_MS, clock=clock, default_meta=False
            ) as reporter:
                reporter.beat("warm", "up", "c")
                await reporter.flush()
                redis_client.config_resetstat()
                for i in range(10_000):
                    reporter.beat("q", "g", f"w{i % 10}", i)
                clock.advance(2 * SECOND)
                before = server_now_ns(redis_client)
                assert await reporter.flush() == 10
                assert calls(redis_client, "fcall") == 1
                row = (await registry.snapshot())[0]
                assert row.last_heartbeat_ns <= before + 50 * MS - 2 * SECOND
            async with AsyncPresenceReporter(registry, 100) as background:
                background.beat("bg", "g", "c")

                async def flushed() -> bool:
                    return await registry.size() == 12

                await wait_until_async(flushed, timeout_s=5, what="the background flush")
                assert await registry.size() == 12
                assert background.pending == 0
            closing = AsyncPresenceReporter(registry, LONG_MS, deregister_on_close=True)
            closing.beat("bye", "g", "c")
            await closing.flush()
            assert await registry.size() == 13
            await closing.aclose()
            await closing.aclose()
            assert closing._task.done()
            assert await registry.size() == 12
        finally:
            await client.aclose()

    asyncio.run(main())


def test_async_reporter_survives_a_dead_server_and_never_raises_into_beat(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(
            port=free_port(), socket_connect_timeout=1, retry=AsyncRetry(NoBackoff(), 0)
        )
        registry = AsyncRedisPresenceRegistry(client)
        reporter = AsyncPresenceReporter(registry, 50)
        try:
            for _ in range(50):
                reporter.beat("q", "g", "c")
                await asyncio.sleep(0.01)
            assert reporter.pending == 1
            with pytest.raises(PresenceConnectionError):
                await reporter.flush()
        finally:
            await reporter.aclose()
            await client.aclose()

    caplog.set_level(logging.DEBUG, logger=LOGGER)
    asyncio.run(main())
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert sum("cannot write to Redis" in r.getMessage() for r in warnings) == 1
    assert any("could not write at close" in r.getMessage() for r in warnings)

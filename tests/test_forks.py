"""Reporters across a real ``os.fork()`` (issue 16, item 5).

A `PresenceReporter` keeps working in a forked child: its own thread writes the child's
beats, without the parent's pending beats, and closing it never touches the parent's
consumers. An `AsyncPresenceReporter` raises `RuntimeError` at its first use in the child.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.asyncio
from conftest import RUN_COUNTS
from servers import RedisServer
from waiting import wait_until

from redis_presence import (
    AsyncPresenceReporter,
    AsyncRedisPresenceRegistry,
    PresenceReporter,
    RedisPresenceRegistry,
)

WAIT_S = 10.0

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork"),
]


def fork_child(body: Callable[[int], None]) -> tuple[int, int]:
    """Fork; the child runs `body(write_fd)` and exits with 0, or 1 if it raised (its error
    written to the pipe). Returns the child's pid and the read end of the pipe."""
    read_fd, write_fd = os.pipe()
    with warnings.catch_warnings():  # Python 3.12+ warns of a fork with threads running
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 0
        try:
            signal.signal(signal.SIGALRM, signal.SIG_DFL)  # not pytest-timeout's handler
            signal.alarm(int(WAIT_S * 2))  # a child that hangs dies, and the parent fails
            os.close(read_fd)
            body(write_fd)
        except BaseException as exc:
            os.write(write_fd, f"child failed: {exc!r}\n".encode())
            code = 1
        finally:
            os._exit(code)
    os.close(write_fd)
    return pid, read_fd


def reap(pid: int, read_fd: int) -> str:
    """Wait for the child; returns what it wrote; fails the test if it failed."""
    with os.fdopen(read_fd) as pipe:
        said = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, said
    return said


def flushers() -> int:
    """How many flusher threads of a `PresenceReporter` run in this process."""
    return sum(t.name == "redis-presence-reporter" for t in threading.enumerate())


def consumers(client: redis.Redis) -> set[str]:
    return {row.consumer for row in RedisPresenceRegistry(client).snapshot()}


def test_a_reporter_keeps_working_in_a_forked_child(
    redis_client: redis.Redis, redis_server: RedisServer
) -> None:
    parent_client = redis_server.client(socket_timeout=5)
    reporter = PresenceReporter(
        RedisPresenceRegistry(parent_client), interval_ms=50, deregister_on_close=True
    )
    try:
        reporter.beat("orders", "billing", "parent-written", 1)
        wait_until(
            lambda: "parent-written" in consumers(redis_client),
            timeout_s=WAIT_S,
            what="the parent's first write",
        )
        reporter.beat("orders", "billing", "parent-pending", 2)  # pending at the fork
        go_on_r, go_on_w = os.pipe()

        def child(out: int) -> None:
            os.close(go_on_w)
            assert reporter.pending == 0  # the parent's pending beats stay the parent's
            assert flushers() == 0  # a child that never beats never starts one
            reporter.beat("orders", "billing", "child", 3)  # written by the child's thread
            beating = threading.Thread(target=reporter.beat, args=("orders", "billing", "child"))
            beating.start()
            beating.join()
            assert flushers() == 1  # started by the first beat, once
            os.write(out, b"beat\n")
            os.read(go_on_r, 1)  # the parent has seen it (or gave up)
            reporter.close()  # deregisters what the child reported: only "child"

        pid, read_fd = fork_child(child)
        os.close(go_on_r)
        try:
            wait_until(
                lambda: "child" in consumers(redis_client),
                timeout_s=WAIT_S,
                what="the child's thread to write its beat",
            )
        finally:
            os.write(go_on_w, b"x")
            os.close(go_on_w)
        reap(pid, read_fd)
        assert "child" not in consumers(redis_client)  # the child's close deregistered it
        # The parent is untouched: its thread still runs, its pending beat gets written,
        # and the child's close did not deregister the parent's consumers.
        wait_until(
            lambda: "parent-pending" in consumers(redis_client),
            timeout_s=WAIT_S,
            what="the parent's pending beat",
        )
        assert "parent-written" in consumers(redis_client)
        reporter.beat("orders", "billing", "parent-later", 4)
        wait_until(
            lambda: "parent-later" in consumers(redis_client),
            timeout_s=WAIT_S,
            what="the parent's later beat",
        )
    finally:
        reporter.close()
        parent_client.close()
    assert consumers(redis_client) == set()  # the parent's close deregistered its own
    RUN_COUNTS["forks: reporters that crossed a real os.fork()"] += 1


def test_a_reporter_forked_while_flushing_does_not_deadlock(
    redis_client: redis.Redis, redis_server: RedisServer
) -> None:
    """A fork while the parent's flusher holds its locks: the child gets new ones."""
    parent_client = redis_server.client(socket_timeout=5)
    reporter = PresenceReporter(RedisPresenceRegistry(parent_client), interval_ms=3_600_000)
    try:

        def child(out: int) -> None:
            reporter.beat("orders", "billing", "child", 1)
            assert reporter.flush() == 1
            reporter.close()

        with reporter._flush_lock, reporter._core._lock:  # as the parent's thread, mid-flush
            pid, read_fd = fork_child(child)
        reap(pid, read_fd)
        assert consumers(redis_client) == {"child"}
    finally:
        reporter.close()
        parent_client.close()
    RUN_COUNTS["forks: reporters that crossed a real os.fork()"] += 1


def test_an_async_reporter_raises_in_a_forked_child(redis_server: RedisServer) -> None:
    async def scenario() -> str:
        client = redis.asyncio.Redis(host=redis_server.host, port=redis_server.port)
        registry = AsyncRedisPresenceRegistry(client)
        reporter = AsyncPresenceReporter(registry, interval_ms=3_600_000)
        reporter.beat("orders", "billing", "parent", 1)

        def child(out: int) -> None:
            uses: list[Callable[[], None]] = [
                lambda: reporter.beat("orders", "billing", "child", 1),
                lambda: reporter.deregister("orders", "billing", "parent"),
            ]
            for use in uses:
                try:
                    use()
                except RuntimeError as exc:
                    os.write(out, f"{exc}\n".encode())
                else:
                    raise AssertionError("no error in the child")

        pid, read_fd = fork_child(child)
        said = reap(pid, read_fd)
        assert await reporter.flush() == 1  # the parent's reporter still works
        await reporter.aclose()
        await client.aclose()
        return said

    said = asyncio.run(scenario()).splitlines()
    assert len(said) == 2
    assert said[0] == said[1]
    assert said[0].startswith("this AsyncPresenceReporter was created in process ")
    assert "create a new registry and AsyncPresenceReporter in the child's event loop" in said[0]
    RUN_COUNTS["forks: reporters that crossed a real os.fork()"] += 1


def test_a_closed_reporter_stays_closed_in_the_child(redis_client: redis.Redis) -> None:
    reporter = PresenceReporter(RedisPresenceRegistry(redis_client), interval_ms=50)
    reporter.close()

    def child(out: Any) -> None:
        reporter.beat("orders", "billing", "late", 1)  # dropped, as after close in the parent
        assert reporter.pending == 0

    reap(*fork_child(child))
    assert consumers(redis_client) == set()

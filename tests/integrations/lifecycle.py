"""What every integration's test checks of its real workers, written once.

A framework's test module starts its workers (`conftest.workers`, from the module's
``worker_specs``) and reads their rows its own way (keyed by queue or by consumer: a
``rows()`` callable); the life cycle they must show is the same for every framework and is
checked here:

- `wait_active`: the rows appear, exactly the expected ones, every one active;
- `wait_refreshed`: an idle worker keeps beating (every row gets a newer heartbeat);
- `HeldTasks`: the test apps' ``hold`` task runs until the test releases it, so a running
  task is a lease for as long as the test wants (`wait_progress`: its end is progress);
- `check_killed`: after a SIGKILL the rows stay, go stale exactly one TTL after the last
  beat and expired two TTLs after (`check_dies_on_time`), and nothing writes them again;
- `check_drains`: a warm shutdown waits for the running task, keeping the rows, then the
  worker exits 0 and its rows are gone;
- `wait_one_ttl`: one TTL passes on the presence server's clock.

Everything is read through `Presence` (a real registry on the presence database) and
waited for with `waiting.wait_until` deadlines; `now_ns` is explicit where a state is
judged at an instant.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Mapping
from typing import TypeVar

import redis
from waiting import wait_until

from integrations.workers import WorkerProcess
from redis_presence import ConsumerPresence, RedisPresenceRegistry

K = TypeVar("K")

ROWS_TIMEOUT_S = 60.0
"""How long a worker may take to start and write its first rows (a loaded 2-core machine)."""


class Presence:
    """What the tests read: the rows under one prefix, through a real registry."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.client = client
        self.registry = RedisPresenceRegistry(client, prefix=prefix)

    def rows(
        self, *, consumer: str | None = None, ttl_ms: int = 30_000, now_ns: int | None = None
    ) -> list[ConsumerPresence]:
        rows = self.registry.snapshot(now_ns=now_ns, ttl_ms=ttl_ms)
        return [row for row in rows if consumer is None or row.consumer == consumer]

    def row(self, queue: str, consumer: str, **kwargs: int) -> ConsumerPresence | None:
        found = [r for r in self.rows(consumer=consumer, **kwargs) if r.queue == queue]
        return found[0] if found else None

    def server_now_ns(self) -> int:
        seconds, micros = self.client.time()
        return (int(seconds) * 1_000_000 + int(micros)) * 1_000


class HeldTasks:
    """The test apps' ``hold`` task, under the test's control: given a token, it pushes
    ``rp:started:<token>`` to the broker's database, then blocks until the test pushes
    ``rp:release:<token>`` (each app in ``apps/`` defines it so)."""

    def __init__(self, control: redis.Redis) -> None:
        self.control = control

    @staticmethod
    def token() -> str:
        """A new task's token (unique: a task of one test never releases another's)."""
        return uuid.uuid4().hex

    def wait_started(self, token: str, timeout_s: float = 20.0) -> None:
        """Wait until the task of `token` runs in a worker."""
        if self.control.blpop([f"rp:started:{token}"], timeout=timeout_s) is None:
            raise AssertionError(f"the held task {token} did not start within {timeout_s:g} s")

    def release(self, token: str) -> None:
        """Let the task of `token` end."""
        self.control.rpush(f"rp:release:{token}", 1)


def wait_active(
    rows: Callable[[], Mapping[K, ConsumerPresence]],
    expected: Collection[K] | int,
    *,
    worker: WorkerProcess,
    what: str,
    timeout_s: float = ROWS_TIMEOUT_S,
) -> dict[K, ConsumerPresence]:
    """Wait until `rows()` holds exactly the `expected` keys (or that many rows), every one
    active, while `worker` lives; return them."""

    def ready() -> dict[K, ConsumerPresence] | None:
        found = dict(rows())
        if isinstance(expected, int):
            complete = len(found) == expected
        else:
            complete = set(found) == set(expected)
        active = all(row.state.value == "active" for row in found.values())
        return found if complete and active else None

    return wait_until(ready, timeout_s=timeout_s, what=what, alive=worker.check_alive, seen=rows)


def wait_refreshed(
    rows: Callable[[], Mapping[K, ConsumerPresence]],
    *,
    what: str = "an idle worker's rows to be refreshed",
    timeout_s: float = 10.0,
) -> None:
    """Wait until every row `rows()` holds now has a newer heartbeat: an idle worker beats."""
    first = {key: row.last_heartbeat_ns for key, row in rows().items()}
    assert first, "no rows to see refreshed"

    def refreshed() -> bool:
        now = rows()
        return all(key in now and now[key].last_heartbeat_ns > beat for key, beat in first.items())

    wait_until(refreshed, timeout_s=timeout_s, what=what, seen=rows)


def wait_progress(
    row: Callable[[], ConsumerPresence | None],
    since_ns: int,
    *,
    lease_count: int | None = None,
    what: str = "the finished task as progress",
    timeout_s: float = 20.0,
) -> ConsumerPresence:
    """Wait until `row()` shows progress after `since_ns` (on the server's clock), and,
    when `lease_count` is given, that many leases; return the row."""

    def progressed() -> ConsumerPresence | None:
        found = row()
        if found is None or (found.last_progress_ns or 0) <= since_ns:
            return None
        return found if lease_count is None or found.lease_count == lease_count else None

    return wait_until(progressed, timeout_s=timeout_s, what=what, seen=row)


def wait_one_ttl(presence: Presence, ttl_ms: int) -> None:
    """Wait until one TTL has passed on the presence server's clock (so a row that was
    not beaten meanwhile would be stale now)."""
    start_ns = presence.server_now_ns()
    wait_until(
        lambda: presence.server_now_ns() - start_ns > ttl_ms * 1_000_000,
        timeout_s=ttl_ms / 1000 + 10,
        what="one TTL to pass",
    )


def check_dies_on_time(
    presence: Presence,
    consumer: str,
    queues: set[str],
    *,
    killed_at_ns: int,
    interval_ms: int,
    ttl_ms: int,
) -> None:
    """After a SIGKILL at `killed_at_ns` (server clock): the consumer's rows stay, it had
    beaten until it died, it turns stale exactly one TTL after its last beat and expired
    exactly two TTLs after (checked to the millisecond with `now_ns`), and on the server's
    own clock it reaches stale, then expired, and nothing writes its rows any more."""
    rows = presence.rows(consumer=consumer, ttl_ms=ttl_ms)
    assert {row.queue for row in rows} == queues, rows
    # A beat is at most one interval old when it is flushed, and flushes come once per
    # interval; a loaded 2-core machine gets a second of slack on top.
    budget_ns = (2 * interval_ms + 1_000) * 1_000_000
    for row in rows:
        assert killed_at_ns - row.last_heartbeat_ns <= budget_ns, (row, killed_at_ns)
        hb = row.last_heartbeat_ns

        def state_at(ms: int, hb: int = hb, queue: str = row.queue) -> str:
            found = presence.row(queue, consumer, ttl_ms=ttl_ms, now_ns=hb + ms * 1_000_000)
            assert found is not None
            return found.state.value

        assert state_at(ttl_ms) == "active"
        assert state_at(ttl_ms + 1) == "stale"
        assert state_at(2 * ttl_ms) == "stale"
        assert state_at(2 * ttl_ms + 1) == "expired"

    def all_in(state: str) -> bool:
        now = presence.rows(consumer=consumer, ttl_ms=ttl_ms)
        return bool(now) and all(row.state.value == state for row in now)

    wait_until(
        lambda: all_in("stale") or all_in("expired"),
        timeout_s=3 * ttl_ms / 1000 + 10,
        what=f"{consumer} to go stale",
    )
    wait_until(
        lambda: all_in("expired"), timeout_s=3 * ttl_ms / 1000 + 10, what=f"{consumer} to expire"
    )
    after = {row.queue: row.last_heartbeat_ns for row in presence.rows(consumer=consumer)}
    assert after == {row.queue: row.last_heartbeat_ns for row in rows}


def check_killed(
    presence: Presence,
    kill: Callable[[], None],
    rows: Mapping[str, set[str]],
    *,
    interval_ms: int,
    ttl_ms: int,
) -> None:
    """`kill()` (a SIGKILL: the worker process, not its supervisor), then
    `check_dies_on_time` for each consumer of `rows` (consumer -> its queues)."""
    kill()
    killed_at_ns = presence.server_now_ns()
    for consumer, queues in rows.items():
        check_dies_on_time(
            presence,
            consumer,
            queues,
            killed_at_ns=killed_at_ns,
            interval_ms=interval_ms,
            ttl_ms=ttl_ms,
        )


def event_cursor(presence: Presence) -> str:
    """Where the event log is now (read the events after it with `events_since`)."""
    return presence.registry.changes().cursor


def events_since(presence: Presence, cursor: str, consumer: str) -> dict[str, list[str]]:
    """queue -> the kinds of `consumer`'s events after `cursor`, in their order."""
    kinds: dict[str, list[str]] = {}
    while True:
        page = presence.registry.changes(cursor)
        for event in page.events:
            if event.consumer == consumer:
                kinds.setdefault(event.queue, []).append(event.kind.value)
        cursor = page.cursor
        if not page.more:
            return kinds


def said_draining_then_left(kinds: list[str]) -> bool:
    """Whether a consumer's events say ``draining`` and, after it, ``left``."""
    return "draining" in kinds and "left" in kinds[kinds.index("draining") :]


def check_drains(
    presence: Presence,
    worker: WorkerProcess,
    held: HeldTasks,
    token: str,
    *,
    consumer: str,
    began: str,
    kept: Callable[[], bool],
    stop: Callable[[], None] | None = None,
    gone_within_s: float = 0.0,
) -> None:
    """A warm shutdown while the held task of `token` runs in `worker`: `stop()` (SIGTERM
    to the main process by default) begins it (`began` shows in the log), the rows stay
    (`kept()`) until the task is released, then the worker exits 0 and `consumer` has no
    row (at once, or within `gone_within_s` where the framework deregisters on its way
    out)."""
    (stop or worker.send_sigterm)()
    worker.wait_logged(began, what="the warm shutdown to begin")
    assert kept(), presence.rows(consumer=consumer)
    held.release(token)
    assert worker.wait(30) == 0, worker.log_tail()
    if gone_within_s:
        wait_until(
            lambda: presence.rows(consumer=consumer) == [],
            timeout_s=gone_within_s,
            what=f"the rows of {consumer} to be deregistered",
        )
    assert presence.rows(consumer=consumer) == []

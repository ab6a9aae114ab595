"""Celery: real ``celery worker`` processes on a real redis-server broker.

The workers start at once (start-up dominates the cost): ``reader`` (prefork) serves the
rows and lease tests, ``crash`` is SIGKILLed, ``drain`` gets a warm shutdown, and
``solo``, ``threads`` and ``gevent`` run long tasks in the other pools. Each test uses its
own worker and its own queues, so the tests stay independent.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import redis
from celery import Celery
from celery.worker import state as worker_state
from waiting import TimedOut, wait_until

from integrations.conftest import WorkerSpecs
from integrations.lifecycle import (
    HeldTasks,
    Presence,
    check_drains,
    check_killed,
    event_cursor,
    events_since,
    said_draining_then_left,
    wait_active,
    wait_progress,
    wait_refreshed,
)
from integrations.workers import ROOT, WorkerProcess, python_tool, worker_env
from redis_presence import ConsumerPresence, RedisPresenceRegistry
from redis_presence.integrations import celery as presence_celery
from redis_presence.integrations._common import Settings

pytestmark = [pytest.mark.redis_server, pytest.mark.slow]

PREFIX = "it-celery"
INTERVAL_MS = 200
TTL_MS = 1_000
GROUP = "rp-tests"  # the app's main name
POOLS = {
    "reader": ["-c", "2"],
    "crash": ["-c", "2"],
    "drain": ["-c", "2"],
    "drained": ["-c", "2"],
    "solo": ["--pool", "solo"],
    "threads": ["--pool", "threads", "-c", "3"],
    "gevent": ["--pool", "gevent", "-c", "3"],
}
LONG_TTL_MS = 2_000
"""The TTL the long-task tests judge presence with; their tasks run for more than twice it."""


def consumer(name: str) -> str:
    return f"{name}@it"


def queues(name: str) -> set[str]:
    return {f"{name}-a", f"{name}-b"}


def worker_specs(broker_url: str, presence_url: str) -> WorkerSpecs:
    command = [python_tool("celery"), "-A", "celery_app", "worker", "--loglevel=INFO"]
    env = worker_env(broker_url, presence_url, PREFIX, INTERVAL_MS)
    return {
        name: ([*command, *pool, "-n", consumer(name), "-Q", ",".join(sorted(queues(name)))], env)
        for name, pool in POOLS.items()
    }


@pytest.fixture(scope="module")
def app(broker_url: str) -> Celery:
    """A producer of the test app's tasks (the worker's own app module is not imported here:
    a producer needs only the task names)."""
    return Celery("rp-tests", broker=broker_url)


def rows_of(presence: Presence, name: str) -> dict[str, ConsumerPresence]:
    """queue -> row of worker `name`."""
    return {row.queue: row for row in presence.rows(consumer=consumer(name))}


def wait_rows(presence: Presence, worker: WorkerProcess, name: str) -> None:
    what = f"rows of {consumer(name)}"
    wait_active(lambda: rows_of(presence, name), queues(name), worker=worker, what=what)


def hold(app: Celery, queue: str, **options: object) -> str:
    token = HeldTasks.token()
    app.send_task("celery_app.hold", args=[token], queue=queue, **options)
    return token


def test_a_row_per_consumed_queue_kept_active(
    workers: dict[str, WorkerProcess], presence: Presence
) -> None:
    wait_rows(presence, workers["reader"], "reader")
    rows = presence.rows(consumer=consumer("reader"))
    assert {(row.queue, row.group, row.consumer) for row in rows} == {
        (queue, GROUP, consumer("reader")) for queue in queues("reader")
    }
    assert all(row.lease_count == 0 for row in rows)
    for _ in range(3):  # an idle worker keeps beating: every row refreshed again and again
        wait_refreshed(lambda: rows_of(presence, "reader"))
    assert all(r.state.value == "active" for r in presence.rows(consumer=consumer("reader")))


def test_lease_count_follows_long_tasks(
    workers: dict[str, WorkerProcess], presence: Presence, app: Celery, held: HeldTasks
) -> None:
    wait_rows(presence, workers["reader"], "reader")
    me = consumer("reader")

    def leases() -> dict[str, int]:
        return {row.queue: row.lease_count for row in presence.rows(consumer=me)}

    def progress() -> dict[str, int | None]:
        return {row.queue: row.last_progress_ns for row in presence.rows(consumer=me)}

    running = [hold(app, "reader-a"), hold(app, "reader-a")]
    eta = hold(app, "reader-b", countdown=3)  # held by the worker, waiting for its ETA
    wait_until(lambda: leases() == {"reader-a": 2, "reader-b": 1}, timeout_s=20, what="2 + 1")
    for token in running:
        held.wait_started(token)
    before = progress()
    released_ns = presence.server_now_ns()
    held.release(running[0])
    wait_until(lambda: leases() == {"reader-a": 1, "reader-b": 1}, timeout_s=20, what="1 + 1")
    # The finished task is progress on its own queue's row, not on the other's.
    wait_progress(
        lambda: rows_of(presence, "reader").get("reader-a"), released_ns, what="progress on a"
    )
    assert progress()["reader-b"] == before["reader-b"]
    held.release(running[1])
    wait_until(lambda: leases() == {"reader-a": 0, "reader-b": 1}, timeout_s=20, what="0 + 1")
    # Past its ETA the task runs: still held, then done.
    held.wait_started(eta)
    assert leases() == {"reader-a": 0, "reader-b": 1}
    held.release(eta)
    wait_until(lambda: leases() == {"reader-a": 0, "reader-b": 0}, timeout_s=20, what="0 + 0")


def watch_rows(
    presence: Presence, worker: WorkerProcess, name: str, leases: dict[str, int], seconds: float
) -> tuple[int, list[str]]:
    """Read the rows of worker `name` for `seconds`: every read must find each of its queues
    active under LONG_TTL_MS with the lease count `leases` gives it. Returns the oldest beat
    seen (ms before the read, on the server's clock) and the reads that found otherwise."""
    me = consumer(name)
    expected = {queue: ("active", count) for queue, count in leases.items()}
    started = time.monotonic()
    worst_ns, problems = 0, []
    while time.monotonic() - started < seconds:
        worker.check_alive()
        now = presence.server_now_ns()
        rows = presence.rows(consumer=me, ttl_ms=LONG_TTL_MS, now_ns=now)
        worst_ns = max([worst_ns, *(now - row.last_heartbeat_ns for row in rows)])
        seen = {row.queue: (row.state.value, row.lease_count) for row in rows}
        if seen != expected:
            problems.append(f"+{time.monotonic() - started:.1f} s: {seen}")
        time.sleep(0.05)
    return worst_ns // 1_000_000, problems


def check_long_tasks(
    presence: Presence,
    app: Celery,
    held: HeldTasks,
    worker: WorkerProcess,
    name: str,
    counts: dict[str, int],
) -> None:
    """Run `counts` tasks per queue at once for more than twice LONG_TTL_MS: the worker stays
    active throughout, each row holding its running tasks; each finished task is progress."""
    wait_rows(presence, worker, name)
    me = consumer(name)

    def leases() -> dict[str, int]:
        return {row.queue: row.lease_count for row in presence.rows(consumer=me)}

    def progress() -> dict[str, int | None]:
        return {row.queue: row.last_progress_ns for row in presence.rows(consumer=me)}

    tokens = {queue: [hold(app, queue) for _ in range(n)] for queue, n in counts.items()}
    for token in (token for queue_tokens in tokens.values() for token in queue_tokens):
        held.wait_started(token)
    full = {queue: counts.get(queue, 0) for queue in queues(name)}
    try:  # whether the leases settle; asserted after the reads below, whatever they are
        wait_until(lambda: leases() == full, timeout_s=10, what=f"{full}", alive=worker.check_alive)
        settled = True
    except TimedOut:
        settled = False
    worst_ms, problems = watch_rows(presence, worker, name, full, 2 * LONG_TTL_MS / 1000 + 0.5)
    print(f"{name}: oldest beat seen during the tasks: {worst_ms} ms")
    first_queue = sorted(counts)[0]
    before = progress()
    released_ns = presence.server_now_ns()
    held.release(tokens[first_queue][0])
    assert settled, f"lease counts never reached {full}: {leases()}"
    assert not problems, (
        f"{len(problems)} reads off; oldest beat {worst_ms} ms; first: {problems[:5]}"
    )
    less = {**full, first_queue: full[first_queue] - 1}
    wait_until(lambda: leases() == less, timeout_s=20, what=f"{less}", seen=leases)
    wait_progress(
        lambda: rows_of(presence, name).get(first_queue),
        released_ns,
        what=f"progress on {first_queue}",
    )
    assert all(progress()[q] == before[q] for q in queues(name) - {first_queue})
    for token in (token for queue_tokens in tokens.values() for token in queue_tokens):
        held.release(token)
    idle = dict.fromkeys(queues(name), 0)
    wait_until(lambda: leases() == idle, timeout_s=20, what=f"{idle}", seen=leases)


def test_solo_pool_beats_through_a_task_longer_than_two_ttls(
    workers: dict[str, WorkerProcess], presence: Presence, app: Celery, held: HeldTasks
) -> None:
    """The solo pool runs the task in the worker's own loop, which beats no more until it
    ends: the reporter's thread beats meanwhile, with the running task held."""
    check_long_tasks(presence, app, held, workers["solo"], "solo", {"solo-a": 1})


@pytest.mark.parametrize(
    ("name", "counts"),
    [
        ("reader", {"reader-a": 1, "reader-b": 1}),  # prefork, 2 children
        ("threads", {"threads-a": 2, "threads-b": 1}),
        ("gevent", {"gevent-a": 2, "gevent-b": 1}),
    ],
    ids=["prefork", "threads", "gevent"],
)
def test_the_other_pools_hold_every_running_task(
    workers: dict[str, WorkerProcess],
    presence: Presence,
    app: Celery,
    held: HeldTasks,
    name: str,
    counts: dict[str, int],
) -> None:
    """As many tasks at once as the pool's concurrency, on both queues, each running for
    more than twice the TTL."""
    check_long_tasks(presence, app, held, workers[name], name, counts)


def test_a_failing_beat_from_the_reporters_thread_is_logged_and_the_thread_goes_on(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[int] = []

    def before_flush() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        reporter.beat("q", "g", "c", 1)

    registry = RedisPresenceRegistry.from_url(redis_url, prefix="it-celery-hook")
    reporter = presence_celery._BusyLoopReporter(registry, 20, before_flush)
    try:
        wait_until(
            lambda: len(registry.snapshot()) == 1, timeout_s=10, what="a beat from the second call"
        )
        assert [row.lease_count for row in registry.snapshot()] == [1]
    finally:
        reporter.close()
        registry.close()
    assert "could not beat from the reporter's thread" in caplog.text
    assert "boom" in caplog.text


def test_a_task_whose_postrun_never_came_stops_the_reporters_beats(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A running task the worker no longer holds (its greenlet killed, say) is forgotten at
    the reporter thread's next call: the thread beats no more for it."""
    settings = Settings.checked("redis://127.0.0.1:1/0", "it-celery-unit", None, None)
    parent = SimpleNamespace(app=Celery("unit"), hostname="unit@it")
    step = presence_celery._step_for(settings)(parent)
    beats: list[int] = []
    monkeypatch.setattr(step, "beat", lambda: beats.append(1))
    try:
        monkeypatch.setitem(worker_state.requests, "held", object())
        step._on_task_prerun(task_id="held")
        step._on_task_prerun(task_id="lost")
        step._beat_while_running()
        assert (step._running, beats) == ({"held"}, [1])
        step._on_task_postrun(task_id="held")
        step._on_task_prerun(task_id="lost")
        step._beat_while_running()
        assert (step._running, beats) == (set(), [1])
    finally:
        step.shutdown(parent)


def test_a_queue_cancelled_at_run_time_loses_its_row_and_gets_it_back(
    workers: dict[str, WorkerProcess], presence: Presence, app: Celery
) -> None:
    wait_rows(presence, workers["reader"], "reader")
    me = consumer("reader")

    def queues_of_rows() -> set[str]:
        return {row.queue for row in presence.rows(consumer=me)}

    app.control.cancel_consumer("reader-b", destination=[me], reply=True, timeout=10)
    wait_until(lambda: queues_of_rows() == {"reader-a"}, timeout_s=20, what="reader-b's row to go")
    app.control.add_consumer("reader-b", destination=[me], reply=True, timeout=10)
    wait_until(lambda: queues_of_rows() == queues("reader"), timeout_s=20, what="reader-b again")


def test_sigkill_goes_stale_then_expired_on_time(
    workers: dict[str, WorkerProcess], presence: Presence
) -> None:
    worker = workers["crash"]
    wait_rows(presence, worker, "crash")
    rows = {consumer("crash"): queues("crash")}
    check_killed(presence, worker.kill, rows, interval_ms=INTERVAL_MS, ttl_ms=TTL_MS)


@pytest.mark.parametrize(
    ("name", "size"),
    [("reader", 2), ("solo", 1), ("threads", 3), ("gevent", 3)],
    ids=["prefork", "solo", "threads", "gevent"],
)
def test_each_row_reports_the_pools_size_as_capacity(
    workers: dict[str, WorkerProcess], presence: Presence, name: str, size: int
) -> None:
    wait_rows(presence, workers[name], name)
    rows = rows_of(presence, name)
    assert {queue: row.capacity for queue, row in rows.items()} == dict.fromkeys(queues(name), size)
    assert not any(row.draining for row in rows.values())


def test_warm_shutdown_says_draining_then_deregisters_after_running_tasks(
    workers: dict[str, WorkerProcess], presence: Presence, app: Celery, held: HeldTasks
) -> None:
    worker = workers["drain"]
    wait_rows(presence, worker, "drain")
    token = hold(app, "drain-a")
    held.wait_started(token)
    cursor = event_cursor(presence)

    def draining() -> dict[str, ConsumerPresence] | None:
        rows = rows_of(presence, "drain")
        return rows if rows and all(row.draining for row in rows.values()) else None

    def kept_draining() -> bool:
        # Still finishing its task: its rows stay, saying draining, until the task is done.
        rows = wait_until(draining, timeout_s=10, what="the rows to say draining")
        return set(rows) == queues("drain") and rows["drain-a"].lease_count == 1

    check_drains(
        presence,
        worker,
        held,
        token,
        consumer=consumer("drain"),
        began="Warm shutdown",
        kept=kept_draining,
    )
    kinds = events_since(presence, cursor, consumer("drain"))
    assert set(kinds) == queues("drain"), kinds
    assert all(said_draining_then_left(k) for k in kinds.values()), kinds


def test_a_drain_request_cancels_the_consumer_of_its_queue(
    workers: dict[str, WorkerProcess],
    presence: Presence,
    app: Celery,
    held: HeldTasks,
    control: redis.Redis,
) -> None:
    """`request_drain` on one queue: the worker stops taking that queue's messages (its
    consumer is cancelled), the row says draining while the task it holds runs, then it
    leaves; the worker goes on with its other queue."""
    worker = workers["drained"]
    wait_rows(presence, worker, "drained")
    me = consumer("drained")
    token = hold(app, "drained-a")
    held.wait_started(token)
    cursor = event_cursor(presence)
    assert presence.registry.request_drain("drained-a", GROUP, me)
    worker.wait_logged("Canceling queue drained-a", what="the consumer of drained-a cancelled")
    wait_until(
        lambda: (
            (row := rows_of(presence, "drained").get("drained-a")) is not None
            and row.draining
            and not row.drain_requested
            and row.lease_count == 1
        ),
        timeout_s=20,
        what="drained-a's row to say draining (the request acknowledged)",
        seen=lambda: rows_of(presence, "drained"),
    )
    # A message sent to drained-a now stays in the broker, while drained-b's are taken.
    waiting = hold(app, "drained-a")
    other = hold(app, "drained-b")
    held.wait_started(other)
    held.release(other)
    assert control.llen("drained-a") == 1
    assert not rows_of(presence, "drained")["drained-b"].draining
    held.release(token)
    wait_until(
        lambda: set(rows_of(presence, "drained")) == {"drained-b"},
        timeout_s=20,
        what="drained-a's row to leave once its task is done",
        seen=lambda: rows_of(presence, "drained"),
    )
    assert control.llen("drained-a") == 1
    kinds = events_since(presence, cursor, me)
    assert kinds["drained-a"] == ["drain_requested", "draining", "left"], kinds
    assert "drained-b" not in kinds, kinds
    held.release(waiting)  # (never started: nothing consumes drained-a any more)
    # An idle queue's row says draining too before it leaves (at once: nothing to finish).
    cursor = event_cursor(presence)
    assert presence.registry.request_drain("drained-b", GROUP, me)
    wait_until(
        lambda: rows_of(presence, "drained") == {},
        timeout_s=20,
        what="drained-b's row to leave",
        seen=lambda: rows_of(presence, "drained"),
    )
    kinds = events_since(presence, cursor, me)
    assert kinds == {"drained-b": ["drain_requested", "draining", "left"]}, kinds


def test_install_checks_its_arguments_where_the_app_is_defined(tmp_path: Path) -> None:
    app = Celery("checked")
    with pytest.raises(TypeError, match=r"app must be a celery\.Celery"):
        presence_celery.install(object(), url="redis://h:6379/0")
    with pytest.raises(ValueError, match="interval_ms must be in"):
        presence_celery.install(app, url="redis://h:6379/0", interval_ms=0)
    with pytest.raises(TypeError, match="interval_ms must be an int"):
        presence_celery.install(app, url="redis://h:6379/0", interval_ms=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="prefix"):
        presence_celery.install(app, url="redis://h:6379/0", prefix="a{b")
    with pytest.raises(ValueError, match="group"):
        presence_celery.install(app, url="redis://h:6379/0", group="")
    with pytest.raises(ValueError, match="invalid Redis URL"):
        presence_celery.install(app, url="localhost:6379")
    assert list(app.steps["consumer"]) == []  # nothing was installed by a failed call
    presence_celery.install(app, url="redis://h:6379/0")
    with pytest.raises(ValueError, match="already installed"):
        presence_celery.install(app, url="redis://h:6379/0")


def test_a_cluster_url_is_checked_without_connecting() -> None:
    app = Celery("cluster-checked")
    # Nothing listens on port 1: a client that connected here would fail.
    presence_celery.install(app, url="redis+cluster://127.0.0.1:1")
    with pytest.raises(ValueError, match="invalid Redis URL"):
        presence_celery.install(Celery("x"), url="redis+cluster://")


ROLLING_QUEUE = "rolling"


def check_rolling(presence_url: str) -> tuple[int, str]:
    """``redis-presence check`` of the rolling group (2 active consumers wanted): its exit
    status and its line."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "redis_presence.cli",
            "--url",
            presence_url,
            "--prefix",
            PREFIX,
            "--ttl-ms",
            str(TTL_MS),
            "check",
            "--queue",
            ROLLING_QUEUE,
            "--group",
            GROUP,
            "--min-active",
            "2",
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, (done.stdout + done.stderr).strip()


class CheckLoop:
    """Runs `check_rolling` again and again in a thread until stopped: every answer."""

    def __init__(self, presence_url: str) -> None:
        self.presence_url = presence_url
        self.answers: list[tuple[int, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.answers.append(check_rolling(self.presence_url))

    def __enter__(self) -> CheckLoop:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def test_a_rolling_restart_passes_check_and_a_kill_fails_it(
    broker_url: str,
    presence_url: str,
    presence: Presence,
    app: Celery,
    held: HeldTasks,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Three workers of one queue; each in turn gets a warm shutdown while it runs a task
    (its rows say draining until the task ends, then leave) and a replacement starts.
    ``check`` (2 active wanted) passes throughout; a SIGKILL then fails it (DEGRADED: a
    stale consumer that did not say it was draining)."""
    logs = tmp_path_factory.mktemp("rolling")
    env = worker_env(broker_url, presence_url, PREFIX, INTERVAL_MS)
    command = [python_tool("celery"), "-A", "celery_app", "worker", "--loglevel=INFO"]
    command += ["--pool", "solo"]
    started: list[WorkerProcess] = []

    def start(name: str, *own: str) -> WorkerProcess:
        queues = ",".join([ROLLING_QUEUE, *own])
        argv = [*command, "-n", consumer(name), "-Q", queues]
        worker = WorkerProcess(argv, env=env, log=logs / f"{name}.log").start()
        started.append(worker)
        return worker

    def active() -> set[str]:
        rows = presence.rows(ttl_ms=TTL_MS)
        return {
            row.consumer
            for row in rows
            if row.queue == ROLLING_QUEUE and row.group == GROUP and row.state.value == "active"
        }

    def says_draining(name: str) -> bool:
        row = presence.row(ROLLING_QUEUE, name, ttl_ms=TTL_MS)
        return row is not None and row.draining

    def replaced_by(name: str) -> bool:
        now = active()
        return name in now and len(now) == 3

    try:
        first = {f"rolling-{n}": start(f"rolling-{n}", f"rolling-{n}") for n in (1, 2, 3)}
        wait_until(
            lambda: active() == {consumer(name) for name in first},
            timeout_s=60,
            what="three active workers of the rolling queue",
            seen=active,
        )
        with CheckLoop(presence_url) as loop:
            for name, worker in first.items():
                token = hold(app, name)  # its own queue: this worker runs it
                held.wait_started(token)
                worker.send_sigterm()
                wait_until(
                    functools.partial(says_draining, consumer(name)),
                    timeout_s=20,
                    what=f"{name}'s row to say draining",
                )
                # A planned departure passes (DRAINING once `check` judges the group with
                # its draining consumers, as GroupPresence.judged does; OK until then).
                status, line = check_rolling(presence_url)
                assert status == 0, line
                assert line.split()[0] in {"OK", "DRAINING"}, line
                held.release(token)
                assert worker.wait(30) == 0, worker.log_tail()
                start(f"{name}-new")
                wait_until(
                    functools.partial(replaced_by, consumer(f"{name}-new")),
                    timeout_s=60,
                    what=f"{name}'s replacement",
                    seen=active,
                )
        answers = loop.answers
        assert len(answers) >= 3, answers
        assert all(status == 0 for status, _ in answers), [a for a in answers if a[0]]
        # A crash: the killed worker goes stale, without having said it drains.
        victim = started[-1]
        victim.kill()

        def failing() -> tuple[int, str] | None:
            found = check_rolling(presence_url)
            return found if found[0] != 0 else None

        status, line = wait_until(
            failing,
            timeout_s=30,
            what="check to fail after a SIGKILL",
        )
        assert (status, line.split()[0]) == (10, "DEGRADED"), line
    finally:
        for worker in started:
            worker.stop()

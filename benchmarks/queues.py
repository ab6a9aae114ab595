"""Case 13: RQ, Huey and Taskiq, each framework's own worker loop with and without presence.

One row per framework: task throughput of a real worker process with the integration
against one without it (``rq worker`` with ``PresenceWorker`` against plain ``rq.Worker``,
``huey_consumer`` with ``install()`` and without, ``taskiq worker`` with the
``PresenceMiddleware`` and without), both on this run's redis-server as broker, at the
default beat interval (5,000 ms). Each round runs the two workers of a framework back to
back (in turn first), and the check is the median over rounds of the round's ratio, so
the load of a shared machine, which changes from round to round, hits both sides of each
ratio alike. Target: at most 1.05x (time with / time without).

Wall time on a shared machine mostly measures the other work on it; each round also
records the CPU time the worker spent on it (its process tree: every thread's
``/proc/<pid>/task/<tid>/schedstat``, in ns, plus the CPU of the children it reaped, such
as RQ's work horses), which a loaded machine barely moves. The second check is the
median over rounds of the round's CPU ratio, and the facts give the CPU per task of each
side and their difference (what presence costs a task). The workers run with a bytecode
cache (``PYTHONPYCACHEPREFIX``, a temporary folder), as an installed package does: with
``PYTHONDONTWRITEBYTECODE`` every worker (and every RQ work horse importing the job's
module) would compile its modules from source.

The workers run the test suite's apps (``tests/integrations/apps``), so this case needs a
source checkout and the frameworks (the ``test`` extra); without them it is skipped with
the reason. Every process it starts is stopped at the end, also on errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import redis

from .integrations import (
    APPS,
    BROKER_DB,
    CPU_MEASURED,
    PRESENCE_DB,
    ROOT,
    START_TIMEOUT_S,
    add_cpu_check,
    cpu_ns,
    rss_mb,
    worker_processes,
)
from .server import BenchServer
from .stats import CaseResult, Check, Measure

TARGET = 1.05
FRAMEWORKS = ("rq", "huey", "taskiq")
MODULES = ("rq", "huey", "taskiq", "taskiq_redis")


def case_queues(server: BenchServer, sizes: Any) -> CaseResult:
    """Task throughput of RQ, Huey and Taskiq workers with and without presence."""
    result = CaseResult("queues", "13. RQ, Huey and Taskiq: the worker loop with presence")
    missing = [m for m in MODULES if importlib.util.find_spec(m) is None]
    if missing or not APPS.is_dir():
        result.skipped = f"needs {', '.join(missing) or APPS} (pip install -e '.[test]')"
        return result
    quick = sizes.quick
    # RQ forks a work horse per job (tens of ms each on a loaded machine): fewer jobs.
    tasks = (
        {"rq": 30, "huey": 100, "taskiq": 100} if quick else {"rq": 100, "huey": 300, "taskiq": 300}
    )
    rounds = 3 if quick else 10
    broker_url = f"redis://127.0.0.1:{server.port}/{BROKER_DB}"
    presence_url = f"redis://127.0.0.1:{server.port}/{PRESENCE_DB}"
    control = server.client(db=BROKER_DB)
    producers = _Producers(broker_url)
    rss: dict[str, float] = {}
    try:
        control.flushdb()
        with (
            tempfile.TemporaryDirectory(prefix="bench-pycache-") as pycache,
            _workers(broker_url, presence_url, pycache) as started,
        ):
            for name, proc in started.items():
                _run(control, producers, name, 1, proc)  # up and consuming
                _run(control, producers, name, 1, proc)  # ... with its modules imported
            samples, cpu = _rounds(control, producers, started, tasks=tasks, rounds=rounds)
            rss = {name: rss_mb(proc.pid) for name, proc in started.items()} if CPU_MEASURED else {}
    finally:
        producers.close()
        control.flushdb()
        control.close()
    for name, values in samples.items():
        n = tasks[name.split(",")[0]]
        result.measures.append(Measure(f"{name}: {n} tasks", "ms", values, "round", n))
    for name, values in cpu.items():
        n = tasks[name.split(",")[0]]
        result.measures.append(Measure(f"{name}: {n} tasks, worker CPU", "ms", values, "round", n))
    for framework in FRAMEWORKS:
        n = tasks[framework]
        plain, with_presence = samples[f"{framework}, plain"], samples[f"{framework}, presence"]
        ratios = [b / a for a, b in zip(plain, with_presence, strict=True)]
        result.checks.append(
            Check(
                f"{framework} worker loop: time with / without presence",
                statistics.median(ratios),
                "<=",
                TARGET,
                f"median over rounds of (time for {n} tasks with presence / without, back to back)",
            )
        )
        add_cpu_check(result, f"{framework} worker loop", cpu, framework, n, TARGET)
        result.facts[f"{framework}: ratio of the medians"] = round(
            statistics.median(with_presence) / statistics.median(plain), 3
        )
        result.facts[f"{framework}: worker VmRSS, MB (after the rounds)"] = {
            variant: rss.get(f"{framework}, {variant}", 0.0) for variant in ("plain", "presence")
        }
    result.facts["task rounds"] = {"rounds": rounds, "tasks per round": tasks}
    return result


def _argv(framework: str, variant: str, broker_url: str) -> list[str]:
    tool = Path(sys.executable).with_name
    queue = f"bench-{variant}"
    if framework == "rq":
        worker = (
            ["-w", "redis_presence.integrations.rq.PresenceWorker"] if variant == "presence" else []
        )
        return [str(tool("rq")), "worker", "--url", broker_url, "-q", *worker, queue]
    if framework == "huey":
        return [str(tool("huey_consumer")), "huey_app.huey", "-w", "2", "-q"]
    return [
        str(tool("taskiq")),
        "worker",
        "taskiq_app:broker",
        "--workers",
        "1",
        "--log-level",
        "WARNING",
    ]


def _workers(
    broker_url: str, presence_url: str, pycache: str
) -> contextlib.AbstractContextManager[dict[str, subprocess.Popen[bytes]]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(APPS), str(ROOT)])}
    for name in ("RP_PRESENCE_URL", "REDIS_PRESENCE_URL", "PYTHONDONTWRITEBYTECODE"):
        env.pop(name, None)
    env["PYTHONPYCACHEPREFIX"] = pycache
    env.update(RP_BROKER_URL=broker_url, RP_PREFIX="bench", RP_INTERVAL_MS="5000")
    specs = {}
    for framework in FRAMEWORKS:
        for variant in ("plain", "presence"):
            queue = f"bench-{variant}"
            extra = {"RP_HUEY_NAME": queue, "RP_NAME": queue}
            if variant == "presence":
                extra.update(
                    RP_PRESENCE_URL=presence_url,
                    REDIS_PRESENCE_URL=presence_url,
                    REDIS_PRESENCE_PREFIX="bench",
                )
            specs[f"{framework}, {variant}"] = (
                _argv(framework, variant, broker_url),
                {**env, **extra},
            )
    return worker_processes(specs)


def _run(
    control: redis.Redis,
    producers: _Producers,
    name: str,
    tasks: int,
    proc: subprocess.Popen[bytes],
) -> float:
    """Send `tasks` counting tasks to worker `name`; ms until all of them ran."""
    key = f"bench:done:{uuid.uuid4().hex}"
    started = time.perf_counter()
    producers.send(name, key, tasks)
    deadline = time.monotonic() + START_TIMEOUT_S
    while int(control.get(key) or 0) < tasks:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"benchmark worker {name!r} did not run its tasks")
        time.sleep(0.002)
    return (time.perf_counter() - started) * 1000


def _rounds(
    control: redis.Redis,
    producers: _Producers,
    started: dict[str, subprocess.Popen[bytes]],
    *,
    tasks: dict[str, int],
    rounds: int,
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per round and framework: its two workers back to back, in turn first; the wall ms
    of each worker's round, and the CPU ms its process tree spent on it."""
    samples: dict[str, list[float]] = {name: [] for name in started}
    cpu: dict[str, list[float]] = {name: [] for name in started} if CPU_MEASURED else {}
    for r in range(rounds):
        for framework in FRAMEWORKS:
            pair = [f"{framework}, plain", f"{framework}, presence"]
            for name in pair if r % 2 == 0 else [*reversed(pair)]:
                pid = started[name].pid
                before = cpu_ns(pid) if cpu else 0
                samples[name].append(
                    _run(control, producers, name, tasks[framework], started[name])
                )
                if cpu:
                    cpu[name].append((cpu_ns(pid) - before) / 1e6)
    return samples, cpu


class _Producers:
    """Enqueue the counting task of each framework's app (producers opened on first use)."""

    def __init__(self, broker_url: str) -> None:
        self.broker_url = broker_url
        self._redis = redis.Redis.from_url(broker_url)
        self._huey: dict[str, Any] = {}

    def send(self, name: str, key: str, tasks: int) -> None:
        framework, variant = name.split(", ")
        queue = f"bench-{variant}"
        if framework == "rq":
            from rq import Queue

            rq_queue = Queue(queue, connection=self._redis)
            rq_queue.enqueue_many(
                [Queue.prepare_data("rq_jobs.tick", (key,), result_ttl=0) for _ in range(tasks)]
            )
        elif framework == "huey":
            huey = self._huey.get(queue) or self._huey.setdefault(
                queue, _huey(self.broker_url, queue)
            )
            tick = huey._registry.string_to_task("huey_app.tick")
            for _ in range(tasks):
                huey.enqueue(tick(args=(key,)))
        else:
            asyncio.run(_taskiq_send(self.broker_url, queue, key, tasks))

    def close(self) -> None:
        self._redis.close()


def _huey(broker_url: str, queue: str) -> Any:
    """A producer of ``huey_app.tick`` (a task is known by its module and name)."""
    from huey import RedisHuey

    huey = RedisHuey(queue, url=broker_url, results=False)

    def tick(key: str) -> None:  # pragma: no cover - runs in the consumer
        raise AssertionError

    tick.__module__ = "huey_app"
    huey.task()(tick)
    return huey


async def _taskiq_send(broker_url: str, queue: str, key: str, tasks: int) -> None:
    from taskiq_redis import ListQueueBroker

    broker = ListQueueBroker(broker_url, queue_name=queue)

    @broker.task(task_name="tick")
    async def tick(key: str) -> None:  # pragma: no cover - runs in the worker
        raise AssertionError

    await broker.startup()
    try:
        for _ in range(tasks):
            await tick.kiq(key)
    finally:
        await broker.shutdown()

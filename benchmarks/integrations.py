"""Case 8: what each integration costs on its read or task path, against the same path
without presence, in the same run.

- **Streams:** a consumer loop's read with `StreamReader` (the heartbeat and the
  ``XREADGROUP`` in one pipeline) against a bare ``XREADGROUP``: an idle poll of an empty
  stream, and a read of 10 entries with their ``XACK``. Target: at most 1.05x.
- **Celery** and **Dramatiq:** task throughput of a real worker process with presence
  installed against one without, both on this run's redis-server as broker, rounds
  interleaved. Target: at most 1.02x (time with / time without), checked on wall time
  and on the CPU time of the worker's process tree (``cpu_ns``, far less moved by the
  other work of a shared machine), with the CPU per task of each side as facts.

The worker processes run the test suite's apps (``tests/integrations/apps``, configured
from the environment), so this case needs a source checkout and the frameworks (the
``test`` extra); without them it is skipped with the reason. Every process it starts is
stopped at the end, also on errors.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import redis

from redis_presence import RedisPresenceRegistry
from redis_presence.integrations.streams import StreamReader

from .server import BenchServer
from .stats import CaseResult, Check, Measure, interleaved, server_usec

ROOT = Path(__file__).resolve().parent.parent
APPS = ROOT / "tests" / "integrations" / "apps"
STREAM_TARGET = 1.05
BEAT_INTERVAL_MS = 1_000
"""The coalescing reader's beat interval (a thirtieth of the default TTL)."""
TASK_TARGET = 1.02
PRESENCE_DB, BROKER_DB = 0, 1
START_TIMEOUT_S = 60.0


def case_integrations(server: BenchServer, sizes: Any) -> CaseResult:
    """Streams reads with and without presence; Celery and Dramatiq task throughput with
    and without presence."""
    result = CaseResult("integrations", "8. integrations: read and task paths with presence")
    missing = [m for m in ("celery", "dramatiq") if importlib.util.find_spec(m) is None]
    if missing or not APPS.is_dir():
        result.skipped = f"needs {', '.join(missing) or APPS} (pip install -e '.[test]')"
        return result
    client = server.client()
    try:
        client.flushall()
        _streams(result, client, calls=sizes.latency_calls)
        # The run's sizes have no field of this case's own: scale with the latency case's.
        quick = sizes.quick
        tasks, rounds = (200, 3) if quick else (500, 10)
        _tasks(result, server, tasks=tasks, rounds=rounds)
    finally:
        client.flushall()
        client.close()
    return result


# -- Streams -----------------------------------------------------------------------------


def _streams(result: CaseResult, client: redis.Redis, *, calls: int) -> None:
    group, batch, warm = "bench", 10, max(10, calls // 10)
    registry = RedisPresenceRegistry(client, prefix="bench")
    readers = {
        "every read beats": 0,
        f"beat_interval_ms={BEAT_INTERVAL_MS:,}": BEAT_INTERVAL_MS,
    }
    streams = ["idle", "busy", *(f"idle {r}" for r in readers), *(f"busy {r}" for r in readers)]
    for stream in streams:
        client.xgroup_create(stream, group, id="0", mkstream=True)
        if stream.startswith("busy"):  # entries for every timed read
            pipe = client.pipeline(transaction=False)
            for i in range(batch * (calls + warm)):
                pipe.xadd(stream, {"n": i})
            pipe.execute()

    def plain(stream: str) -> Callable[[], object]:
        def read() -> object:
            reply: Any = client.xreadgroup(group, "c", {stream: ">"}, count=batch)
            if reply:
                client.xack(stream, group, *[entry for entry, _ in reply[0][1]])
            return reply

        return read

    def with_presence(stream: str, interval_ms: int) -> Callable[[], object]:
        reader = StreamReader(
            registry, stream, group, "c", block_ms=0, beat_interval_ms=interval_ms
        )

        def read() -> object:
            entries = reader.read(count=batch)
            if entries:
                reader.ack(*[entry for entry, _ in entries])
            return entries

        return read

    variants: dict[str, Callable[[], object]] = {}
    for kind, what in (("idle", "idle poll"), ("busy", "10 entries + XACK")):
        variants[f"streams, {what}: XREADGROUP"] = plain(kind)
        for name, interval_ms in readers.items():
            variants[f"streams, {what}: StreamReader, {name}"] = with_presence(
                f"{kind} {name}", interval_ms
            )
    interleaved(variants, warm)  # warm-up (loads the script)
    usec: dict[str, float] = {}
    with server_usec(client, usec):
        samples = interleaved(variants, calls)
    for name, values in samples.items():
        result.measures.append(Measure(name, "us", values, "read"))
    for what in ("idle poll", "10 entries + XACK"):
        base = f"streams, {what}: XREADGROUP"
        for name in readers:
            variant = f"streams, {what}: StreamReader, {name}"
            result.checks.append(
                Check(
                    f"streams {what}, {name}: with / without presence",
                    result.measure(variant).median / result.measure(base).median,
                    "<=",
                    STREAM_TARGET,
                    f"{variant} median / {base} median",
                )
            )
    result.facts["streams server usec per call"] = {
        name: round(value, 2) for name, value in sorted(usec.items())
    }


# -- Celery and Dramatiq -----------------------------------------------------------------


def _tasks(result: CaseResult, server: BenchServer, *, tasks: int, rounds: int) -> None:
    broker_url = f"redis://127.0.0.1:{server.port}/{BROKER_DB}"
    presence_url = f"redis://127.0.0.1:{server.port}/{PRESENCE_DB}"
    control = server.client(db=BROKER_DB)
    tool = Path(sys.executable).with_name
    workers = {
        "celery, plain": (
            [
                str(tool("celery")),
                "-A",
                "celery_app",
                "worker",
                "-Q",
                "bench-plain",
                "-n",
                "plain@bench",
            ],
            None,
        ),
        "celery, presence": (
            [
                str(tool("celery")),
                "-A",
                "celery_app",
                "worker",
                "-Q",
                "bench-presence",
                "-n",
                "presence@bench",
            ],
            presence_url,
        ),
        "dramatiq, plain": (
            [str(tool("dramatiq")), "dramatiq_app", "--queues", "bench-plain"],
            None,
        ),
        "dramatiq, presence": (
            [str(tool("dramatiq")), "dramatiq_app", "--queues", "bench-presence"],
            presence_url,
        ),
    }
    options = {
        "celery": [
            "--pool",
            "prefork",
            "-c",
            "2",
            "--without-gossip",
            "--without-mingle",
            "--loglevel=WARNING",
        ],
        "dramatiq": ["--processes", "1", "--threads", "2"],
    }
    producers = _Producers(broker_url)
    try:
        with _processes(workers, options, broker_url) as started:
            _wait_ready(control, producers, started)
            samples, cpu = _throughput(control, producers, started, tasks=tasks, rounds=rounds)
    finally:
        producers.close()
        control.close()
    for name, values in samples.items():
        result.measures.append(Measure(f"{name}: {tasks} tasks", "ms", values, "round", tasks))
    for name, values in cpu.items():
        result.measures.append(
            Measure(f"{name}: {tasks} tasks, worker CPU", "ms", values, "round", tasks)
        )
    for framework in ("celery", "dramatiq"):
        plain = result.measure(f"{framework}, plain: {tasks} tasks").median
        with_presence = result.measure(f"{framework}, presence: {tasks} tasks").median
        result.checks.append(
            Check(
                f"{framework} task throughput: time with / without presence",
                with_presence / plain,
                "<=",
                TASK_TARGET,
                f"median time for {tasks} tasks, with / without presence",
            )
        )
        add_cpu_check(result, f"{framework} task throughput", cpu, framework, tasks, TASK_TARGET)
    result.facts["task rounds"] = {"rounds": rounds, "tasks per round": tasks}


@contextlib.contextmanager
def worker_processes(
    specs: dict[str, tuple[list[str], dict[str, str]]],
) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    """Start ``{name: (argv, env)}`` in the apps' folder, each in a session of its own with
    its output discarded; kill every process group at the end, also on errors."""
    started: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name, (argv, env) in specs.items():
            started[name] = subprocess.Popen(
                argv,
                cwd=APPS,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        yield started
    finally:
        for proc in started.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


_TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 10_000_000


def _tree(root: int) -> Iterator[int]:
    """`root` and every live descendant of it (from ``/proc/*/stat``)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                with open(f"/proc/{entry}/stat") as stat:
                    ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
    todo = [root]
    while todo:
        pid = todo.pop()
        yield pid
        todo.extend(children.get(pid, ()))


CPU_MEASURED = os.path.isdir("/proc/self/task")
"""Whether this system tells each thread's CPU time (Linux's ``/proc``): elsewhere the task
cases measure wall time only."""


def add_cpu_check(
    result: CaseResult,
    what: str,
    cpu: dict[str, list[float]],
    framework: str,
    tasks: int,
    target: float,
) -> None:
    """The check on `framework`'s CPU ratio (median over rounds) and its CPU per task, from
    ``cpu[f"{framework}, plain"]`` and ``cpu[f"{framework}, presence"]`` (ms per round)."""
    if not cpu:
        return
    plain, with_presence = cpu[f"{framework}, plain"], cpu[f"{framework}, presence"]
    result.checks.append(
        Check(
            f"{what}: CPU with / without presence",
            statistics.median(b / a for a, b in zip(plain, with_presence, strict=True)),
            "<=",
            target,
            f"median over rounds of (the worker's CPU time for {tasks} tasks with presence / "
            "without)",
        )
    )
    per_task = [statistics.median(v) * 1000 / tasks for v in (plain, with_presence)]
    result.facts[f"{framework}: worker CPU per task, us (median of rounds)"] = {
        "plain": round(per_task[0], 1),
        "presence": round(per_task[1], 1),
        "difference": round(per_task[1] - per_task[0], 1),
    }


def cpu_ns(root: int) -> int:
    """CPU time of `root`'s process tree so far: each live thread's (``schedstat``, ns)
    and the children each process reaped (``cutime + cstime`` of ``stat``, clock ticks)."""
    total = 0
    for pid in _tree(root):
        with contextlib.suppress(OSError, IndexError, ValueError):
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/schedstat") as schedstat:
                    total += int(schedstat.read().split()[0])
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += (int(fields[13]) + int(fields[14])) * _TICK_NS  # cutime, cstime
    return total


def rss_mb(root: int) -> float:
    """``VmRSS`` of `root`'s process tree, in MB."""
    total_kb = 0
    for pid in _tree(root):
        with contextlib.suppress(OSError, ValueError), open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    total_kb += int(line.split()[1])
    return round(total_kb / 1024, 1)


def _processes(
    workers: dict[str, tuple[list[str], str | None]],
    options: dict[str, list[str]],
    broker_url: str,
) -> contextlib.AbstractContextManager[dict[str, subprocess.Popen[bytes]]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(APPS), str(ROOT)])}
    env.update(RP_BROKER_URL=broker_url, RP_PREFIX="bench")
    env.pop("RP_PRESENCE_URL", None)
    specs = {}
    for name, (argv, presence_url) in workers.items():
        framework = name.split(",")[0]
        extra = {"RP_PRESENCE_URL": presence_url} if presence_url else {}
        specs[name] = ([*argv, *options[framework]], {**env, **extra, "RP_INTERVAL_MS": "5000"})
    return worker_processes(specs)


def _wait_ready(
    control: redis.Redis, producers: _Producers, started: dict[str, subprocess.Popen[bytes]]
) -> None:
    """Until each worker ran one task (it is up and consuming)."""
    for name, proc in started.items():
        key = f"bench:ready:{uuid.uuid4().hex}"
        producers.send(name, key, 1)
        deadline = time.monotonic() + START_TIMEOUT_S
        while int(control.get(key) or 0) < 1:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"benchmark worker {name!r} did not start")
            time.sleep(0.01)


def _throughput(
    control: redis.Redis,
    producers: _Producers,
    workers: dict[str, subprocess.Popen[bytes]],
    *,
    tasks: int,
    rounds: int,
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per round and worker, in turn: ms from the first task sent until `tasks` ran, and
    the CPU ms the worker's process tree spent meanwhile."""
    names = ["celery, plain", "celery, presence", "dramatiq, plain", "dramatiq, presence"]
    samples: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names} if CPU_MEASURED else {}
    for r in range(rounds):
        order = names if r % 2 == 0 else [*reversed(names)]
        for name in order:
            key = f"bench:done:{uuid.uuid4().hex}"
            cpu_before = cpu_ns(workers[name].pid) if cpu else 0
            started = time.perf_counter()
            producers.send(name, key, tasks)
            while int(control.get(key) or 0) < tasks:
                time.sleep(0.002)
            samples[name].append((time.perf_counter() - started) * 1000)
            if cpu:
                cpu[name].append((cpu_ns(workers[name].pid) - cpu_before) / 1e6)
    return samples, cpu


class _Producers:
    """Enqueue the counting task for one benchmark worker (producers opened on first use)."""

    def __init__(self, broker_url: str) -> None:
        self.broker_url = broker_url
        self._celery: Any = None
        self._dramatiq: Any = None

    def send(self, name: str, key: str, tasks: int) -> None:
        """`tasks` runs of the task that counts in `key`, for the worker `name`."""
        framework, variant = name.split(", ")
        queue = f"bench-{variant}"
        if framework == "celery":
            if self._celery is None:
                from celery import Celery

                self._celery = Celery("bench", broker=self.broker_url)
            for _ in range(tasks):
                self._celery.send_task("celery_app.tick", args=[key], queue=queue)
            return
        import dramatiq
        from dramatiq.brokers.redis import RedisBroker

        if self._dramatiq is None:
            self._dramatiq = RedisBroker(url=self.broker_url)  # type: ignore[no-untyped-call]
        actor = f"tick_{queue.replace('-', '_')}"
        for _ in range(tasks):
            message: dramatiq.Message[None] = dramatiq.Message(
                queue_name=queue, actor_name=actor, args=(key,), kwargs={}, options={}
            )
            self._dramatiq.enqueue(message)

    def close(self) -> None:
        if self._celery is not None:
            self._celery.close()
        if self._dramatiq is not None:
            self._dramatiq.close()

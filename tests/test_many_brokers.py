"""Many brokers: eight OS processes beat 1,000 consumers into one real redis-server while an
observer process snapshots, prunes and deregisters.

Half the brokers use a `PresenceReporter` on their read loop, half call `heartbeat_many`;
their consumers share queues and groups. During the run the test SIGKILLs two brokers (the
observer deregisters the consumers of one and prunes those of the other once they expire)
and every live broker retires ten consumers (stops beating them; the observer deregisters
them). Checked afterwards, from the observer's log, with instants on the machine-wide
monotonic clock:

- every consumer of a broker that is alive is active in every snapshot;
- no deregistered consumer appears in a snapshot taken after its deregistration (none of
  them beats again), and the pruned ones are gone for good.

Run as ``python tests/test_many_brokers.py broker|observer ...`` this file is also the code
of the child processes.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from processes import ManagedProcess
from waiting import wait_until

from redis_presence import PresenceReporter, PresenceState, RedisPresenceRegistry

BROKERS = 8
PER_BROKER = 125  # 1,000 consumers in all
RETIRED = 10  # per live broker, at the end of its list
KILLED_DEREGISTERED, KILLED_PRUNED = 6, 7
TTL_MS = 1_500  # ages stay far below (beats every 100 ms); the killed expire 3 s after death
BEAT_EVERY_S = 0.1
SNAPSHOTS_PER_PHASE = 10
PREFIX = "brokers"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]  # 6-10 s


def consumers_of(broker: int) -> list[str]:
    return [f"b{broker}-c{j:03}" for j in range(PER_BROKER)]


def identity(consumer: str) -> tuple[str, str, str]:
    """Consumers of different brokers share queues and groups."""
    broker, number = consumer[1:].split("-c")
    return f"queue-{int(number) % 8}", f"group-{int(broker) % 2}", consumer


def mark(path: Path, value: object = "") -> None:
    """Write a small file atomically (the other processes poll for it)."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(value))
    os.replace(temporary, path)


def read(path: Path) -> Any:
    return json.loads(path.read_text())


# --- the child processes ----------------------------------------------------------------------


def broker_main(url: str, folder: Path, index: int) -> None:
    """Beat this broker's consumers until told to stop; retire the last ten when told."""
    registry = RedisPresenceRegistry.from_url(url, prefix=PREFIX)
    reporter = PresenceReporter(registry, 100) if index % 2 == 0 else None
    live = [identity(c) for c in consumers_of(index)]

    def beat_all() -> None:
        if reporter is not None:
            for queue, group, consumer in live:  # the read path: O(1) each, no I/O
                reporter.beat(queue, group, consumer, 1)
        else:
            registry.heartbeat_many([(*key, 1) for key in live])

    beat_all()
    if reporter is not None:
        reporter.flush()
    mark(folder / f"ready-{index}", time.monotonic_ns())
    retired = False
    while not (folder / "stop").exists():
        if not retired and (folder / "retire").exists():
            live = live[:-RETIRED]
            if reporter is not None:
                reporter.flush()  # the retired consumers' last beats are written now
            mark(folder / f"retired-{index}", time.monotonic_ns())
            retired = True
        beat_all()
        time.sleep(BEAT_EVERY_S)
    if reporter is not None:
        reporter.close()
    registry.close()


def observer_main(url: str, folder: Path) -> None:
    """Snapshot, prune and deregister until told to stop; log everything with its instant."""
    registry = RedisPresenceRegistry.from_url(url, prefix=PREFIX)
    snapshots: list[tuple[int, int, list[str], list[str]]] = []
    deregistered: dict[str, int] = {}
    pruned: list[tuple[int, int]] = []
    handled: set[str] = set()
    while not (folder / "stop").exists():
        start = time.monotonic_ns()
        rows = registry.snapshot(ttl_ms=TTL_MS)
        end = time.monotonic_ns()
        active = [r.consumer for r in rows if r.state is PresenceState.ACTIVE]
        others = [r.consumer for r in rows if r.state is not PresenceState.ACTIVE]
        snapshots.append((start, end, active, others))
        if len(snapshots) % 4 == 0:
            pruned.append((time.monotonic_ns(), registry.prune_expired(ttl_ms=TTL_MS)))
        for path in sorted(folder.glob("retired-*")) + sorted(folder.glob("killed")):
            if path.name in handled:
                continue
            handled.add(path.name)
            if path.name == "killed":
                leaving = consumers_of(KILLED_DEREGISTERED)
            else:
                leaving = consumers_of(int(path.name.split("-")[1]))[-RETIRED:]
            for consumer in leaving:
                registry.deregister(*identity(consumer))
                deregistered[consumer] = time.monotonic_ns()
        mark(
            folder / "progress",
            {"snapshots": len(snapshots), "deregistered": len(deregistered), "pruned": pruned},
        )
        time.sleep(0.02)
    registry.close()
    log = {"snapshots": snapshots, "deregistered": deregistered, "pruned": pruned}
    (folder / "observer.json").write_text(json.dumps(log))


# --- the test ---------------------------------------------------------------------------------


def spawn(role: str, url: str, folder: Path, *args: str) -> ManagedProcess:
    name = "-".join([role, *args])
    argv = [sys.executable, __file__, role, url, str(folder), *args]
    return ManagedProcess(argv, name=name, log=folder / f"{name}.log", separate_stderr=True).start()


def no_child_failed(procs: list[ManagedProcess]) -> Callable[[], None]:
    """An `alive` check: fail at once when a child exits, unless it was SIGKILLed."""

    def check() -> None:
        for proc in procs:
            if proc.poll() not in (None, -signal.SIGKILL):
                raise AssertionError(f"{proc.name} exited ({proc.returncode}):\n{proc.stderr}")

    return check


def progress(folder: Path) -> dict[str, Any]:
    path = folder / "progress"
    return read(path) if path.exists() else {"snapshots": 0, "deregistered": 0, "pruned": []}


def test_many_brokers_share_one_server(redis_url: str, tmp_path: Path) -> None:
    brokers = [spawn("broker", redis_url, tmp_path, str(i)) for i in range(BROKERS)]
    observer: ManagedProcess | None = None
    children = list(brokers)
    try:
        wait_until(
            lambda: all((tmp_path / f"ready-{i}").exists() for i in range(BROKERS)),
            timeout_s=60,
            what="every broker's first write",
            alive=no_child_failed(children),
        )
        observer = spawn("observer", redis_url, tmp_path)
        children.append(observer)
        wait_until(
            lambda: progress(tmp_path)["snapshots"] >= SNAPSHOTS_PER_PHASE,
            timeout_s=30,
            what="the first snapshots",
            alive=no_child_failed(children),
        )

        before_kill = progress(tmp_path)["snapshots"]
        killed_at = time.monotonic_ns()
        for index in (KILLED_DEREGISTERED, KILLED_PRUNED):
            brokers[index].kill()
        mark(tmp_path / "killed", killed_at)
        mark(tmp_path / "retire")
        live = [i for i in range(BROKERS) if i not in (KILLED_DEREGISTERED, KILLED_PRUNED)]
        leaving = PER_BROKER + RETIRED * len(live)
        wait_until(
            lambda: progress(tmp_path)["deregistered"] == leaving,
            timeout_s=30,
            what="the deregistrations",
            alive=no_child_failed(children),
        )
        wait_until(
            lambda: sum(n for _, n in progress(tmp_path)["pruned"]) >= PER_BROKER,
            timeout_s=30,
            what="the killed broker's consumers to be pruned",
            alive=no_child_failed(children),
        )
        # The middle phase is observed by as many snapshots as the others, however slowly
        # a loaded machine takes them (the prune may come after only a few).
        wait_until(
            lambda: progress(tmp_path)["snapshots"] >= before_kill + SNAPSHOTS_PER_PHASE,
            timeout_s=60,
            what="snapshots while consumers leave",
            alive=no_child_failed(children),
        )
        seen = progress(tmp_path)["snapshots"]
        wait_until(
            lambda: progress(tmp_path)["snapshots"] >= seen + SNAPSHOTS_PER_PHASE,
            timeout_s=30,
            what="the last snapshots",
            alive=no_child_failed(children),
        )
        mark(tmp_path / "stop")
        for proc in [*(brokers[i] for i in live), observer]:
            assert proc.wait(30) == 0, proc.stderr
    finally:
        for proc in children:
            proc.stop()

    log = read(tmp_path / "observer.json")
    retired_at = {i: read(tmp_path / f"retired-{i}") for i in live}
    check_log(log, killed_at, retired_at, live)


def check_log(
    log: dict[str, Any], killed_at: int, retired_at: dict[int, int], live: list[int]
) -> None:
    snapshots = log["snapshots"]
    deregistered: dict[str, int] = log["deregistered"]
    assert len(snapshots) >= 3 * SNAPSHOTS_PER_PHASE
    staying = {c for i in live for c in consumers_of(i)[:-RETIRED]}
    killed = {i: set(consumers_of(i)) for i in (KILLED_DEREGISTERED, KILLED_PRUNED)}
    # Prune removed exactly the killed-and-not-deregistered broker's consumers.
    assert sum(n for _, n in log["pruned"]) == PER_BROKER
    for start, end, active, others in snapshots:
        shown = set(active) | set(others)
        assert not others or end > killed_at, "a live consumer was not active"
        missing = staying - set(active)
        assert not missing, f"live consumers missing from a snapshot: {sorted(missing)[:5]}"
        if end < killed_at:
            for index, theirs in killed.items():
                assert theirs <= set(active), f"broker {index} was alive but not listed"
        back = {c for c in shown if c in deregistered and deregistered[c] < start}
        assert not back, f"deregistered consumers came back: {sorted(back)[:5]}"
    last_active, last_others = snapshots[-1][2], snapshots[-1][3]
    assert set(last_active) | set(last_others) == staying
    assert all(deregistered[c] > retired_at[i] for i in live for c in consumers_of(i)[-RETIRED:])
    print(
        f"{len(snapshots)} snapshots of up to {BROKERS * PER_BROKER} consumers; "
        f"{len(deregistered)} deregistered, {PER_BROKER} pruned"
    )


if __name__ == "__main__":
    role, url, folder = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    if role == "broker":
        broker_main(url, folder, int(sys.argv[4]))
    else:
        observer_main(url, folder)

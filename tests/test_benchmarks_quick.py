"""``python -m benchmarks --quick`` runs end to end and writes every case (no timing asserts)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from binaries import need_binary

ROOT = Path(__file__).resolve().parent.parent
CASES = (
    "heartbeat",
    "batched",
    "coalescing",
    "snapshot",
    "counts",
    "prune",
    "prune-groups",
    "memory",
    "startup",
    "integrations",
    "web",
    "fleets",
    "events",
    "metadata",
    "node",
    "queues",
    "pages",
    "idle",
    "streams",
    "beat_cost",
    "scrape",
)


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.redis_server
@pytest.mark.timeout(480)
def test_quick_benchmark_writes_every_case(tmp_path: Path) -> None:
    need_binary("redis-server")
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--out", str(tmp_path)],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=450,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]

    results = json.loads((tmp_path / "results.json").read_text())
    assert results["mode"] == "quick"
    assert set(results["cases"]) == set(CASES)
    assert results["machine"]["redis_server"]
    reporter_exists = _has("redis_presence.reporter")
    for key, case in results["cases"].items():
        if case["skipped"] and key == "node":
            assert "Node.js" in case["skipped"]  # test_cross_language fails in CI without it
            continue
        if case["skipped"]:
            # Only the reporter's cases may be missing, and only while the module is.
            assert not reporter_exists, f"{key} skipped: {case['skipped']}"
            assert "reporter" in case["skipped"]
            continue
        assert case["measures"], key
        for measure in case["measures"]:
            assert measure["rounds"] >= 1
            assert measure["median"] > 0
            assert measure["p99"] >= measure["median"]
        for check in case["checks"]:
            assert isinstance(check["met"], bool)

    heartbeat = results["cases"]["heartbeat"]
    assert heartbeat["facts"]["commands_sent"] == {"FCALL": 1}  # the function library
    assert all(m["median"] > 0 for m in results["cases"]["memory"]["measures"])
    described = results["cases"]["metadata"]["facts"]
    assert described["reporter's default metadata (host, pid, version)"]["B per consumer"] > 0
    chart = tmp_path / "snapshot_scaling.png"
    if _has("matplotlib"):
        assert chart.read_bytes().startswith(b"\x89PNG")
    else:
        assert "matplotlib is not installed" in done.stdout
        assert not chart.exists()

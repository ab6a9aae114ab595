"""Long-lived readers of the web service (issue 30 item 8): what a thousand server-sent
event streams leave behind once they close, and what 500 open streams cost the API while
20,000 consumers go stale at one instant.

A real `redis-presence serve` process on the run's redis-server; the streams are raw
sockets held by a child process of their own (so reading them costs this process
nothing). Memory is the service's resident set (``VmRSS``) when idle, with the streams open
and a few seconds after they closed. The API's cost is the latency of ``GET
/api/v1/groups`` (one request at a time, as a monitoring probe asks) over the seconds
around the crossing, beside the same requests with no stream open.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from redis_presence import RedisPresenceRegistry

try:
    import httpx
except ImportError as exc:  # pragma: no cover - reported as a skipped case
    MISSING: str | None = f"httpx is not installed ({exc})"
else:
    MISSING = None

from .server import HOST, BenchServer
from .stats import CaseResult, Check, Measure, percentile

PREFIX = "bench-streams"
SERVING = re.compile(r"serving (http://\S+)")
NS_PER_MS = 1_000_000


def rss_mb(pid: int) -> float:
    """A process's resident memory (``VmRSS``), in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


@contextmanager
def serve(url: str, max_streams: int) -> Iterator[tuple[int, str]]:
    """`redis-presence serve` on a free port: its pid and base URL."""
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "redis_presence.cli",
            "--url",
            url,
            "--prefix",
            PREFIX,
            "serve",
            "--port",
            "0",
            "--max-streams",
            str(max_streams),
            "--log-level",
            "warning",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        base = ""
        deadline = time.monotonic() + 30
        while not base and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                raise RuntimeError("redis-presence serve ended before it served")
            found = SERVING.search(line)
            base = found.group(1) if found else ""
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep the pipe drained
        for _ in range(300):
            try:
                if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield proc.pid, base
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# -- the streams, held by a child process ----------------------------------------------


async def _open(base: str, path: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    where = urlsplit(base)
    reader, writer = await asyncio.open_connection(where.hostname, where.port)
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: {where.netloc}\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    await writer.drain()
    head = b""
    while b"event: hello" not in head:
        chunk = await reader.read(65536)
        if not chunk:
            raise RuntimeError(f"the stream ended before its hello: {head[:300]!r}")
        head += chunk
    return reader, writer


async def _hold(base: str, paths: list[str], opened: Any, stop: Any, counts: Any) -> None:
    streams = []
    for start in range(0, len(paths), 50):
        streams += await asyncio.gather(*(_open(base, p) for p in paths[start : start + 50]))
    opened.set()

    async def read(i: int, reader: asyncio.StreamReader) -> None:
        while chunk := await reader.read(1 << 16):
            counts[i] += len(chunk)

    readers = [asyncio.ensure_future(read(i, r)) for i, (r, _) in enumerate(streams)]
    while not stop.is_set():
        await asyncio.sleep(0.05)
    for task in readers:
        task.cancel()
    for _, writer in streams:
        writer.close()


def _streams_child(base: str, paths: list[str], opened: Any, stop: Any, counts: Any) -> None:
    asyncio.run(_hold(base, paths, opened, stop, counts))


@contextmanager
def streams_open(base: str, paths: list[str]) -> Iterator[Any]:
    """`paths` open as event streams in a child process until the block ends (then closed);
    yields the bytes each received so far (a shared array)."""
    context = multiprocessing.get_context("spawn")
    opened, stop = context.Event(), context.Event()
    counts = context.Array("q", len(paths), lock=False)
    child = context.Process(target=_streams_child, args=(base, paths, opened, stop, counts))
    child.start()
    try:
        if not opened.wait(120):
            raise RuntimeError("the streams did not open within 120 s")
        yield counts
    finally:
        stop.set()
        child.join(30)
        if child.is_alive():
            child.kill()
            child.join()


# -- the two measurements ----------------------------------------------------------------


def _settle(pid: int, seconds: float) -> float:
    """The service's RSS once it stopped falling (after 3 s, at most `seconds`)."""
    time.sleep(3)
    last = rss_mb(pid)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = rss_mb(pid)
        if abs(now - last) < 0.5:
            return now
        last = now
    return last


def memory(url: str, streams: int, result: CaseResult) -> None:
    """RSS idle, with `streams` streams open while consumers join, and after they close."""
    writer = RedisPresenceRegistry.from_url(url, prefix=PREFIX)
    stop = threading.Event()

    def joining() -> None:
        n = 0
        while not stop.is_set():
            writer.heartbeat_many([(f"q{(n + i) % 50}", "g", f"c{n}-{i}", 0) for i in range(20)])
            n += 20
            stop.wait(0.05)

    beats = threading.Thread(target=joining, daemon=True)
    with serve(url, streams) as (pid, base):
        with streams_open(base, ["/api/v1/events"] * 20):  # warm: every code path loaded once
            time.sleep(2)
        idle = _settle(pid, 15)
        beats.start()
        paths = [
            "/api/v1/events" if i % 2 else f"/api/v1/events?queue=q{i % 50}" for i in range(streams)
        ]
        with streams_open(base, paths) as counts:
            time.sleep(5)
            peak = rss_mb(pid)
            received = sum(counts)
        closed = _settle(pid, 20)
        stop.set()
        beats.join()
    writer.close()
    result.facts[f"service RSS, {streams:,} streams (MB)"] = {
        "idle": round(idle, 1),
        "open": round(peak, 1),
        "after they closed": round(closed, 1),
        "bytes the streams received": received,
    }
    result.checks.append(
        Check(
            f"RSS held after {streams:,} streams closed / RSS they added",
            (closed - idle) / max(1.0, peak - idle),
            "<=",
            0.5,
            "(RSS after close - idle) / (RSS open - idle), same run",
        )
    )


async def _latencies(base: str, seconds: float) -> list[float]:
    samples: list[float] = []
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            started = time.perf_counter()
            response = await client.get("/api/v1/groups?limit=50")
            samples.append((time.perf_counter() - started) * 1000)
            if response.status_code != 200:
                raise RuntimeError(f"/api/v1/groups: {response.status_code} {response.text}")
    return samples


def mass_stale(
    url: str, streams: int, consumers: int, result: CaseResult, *, window_s: float = 8.0
) -> None:
    """/api/v1/groups latency while `consumers` consumers cross the stale line at one
    instant under `streams` open streams, and the same requests with no stream open."""
    ttl_ms = 4_000
    writer = RedisPresenceRegistry.from_url(url, prefix=PREFIX, max_future_ms=None)
    writer.set_ttl(ttl_ms)
    with serve(url, streams + 10) as (_, base):
        quiet = asyncio.run(_latencies(base, 3))
        paths = [
            "/api/v1/events" if i % 2 else f"/api/v1/events?queue=s{i % 20}" for i in range(streams)
        ]
        with streams_open(base, paths) as counts:
            time.sleep(2)  # open and greeted: the crossing is what they see next
            at = writer.clock_ns()
            beats = [(f"s{i % 20}", f"g{i % 200}", f"w{i}", 0) for i in range(consumers)]
            for start in range(0, consumers, 1_000):
                writer.heartbeat_many(beats[start : start + 1_000], now_ns=at)
            before = sum(counts)
            # The joins were a burst too; the crossing comes ttl_ms after `at`.
            wait_s = (at + ttl_ms * NS_PER_MS - writer.clock_ns()) / 1e9 - 1
            time.sleep(max(0.0, wait_s))
            busy = asyncio.run(_latencies(base, window_s))
            received = sum(counts) - before
    writer.close()
    for name, samples in (("no stream open", quiet), (f"{streams:,} streams open", busy)):
        result.measures.append(
            Measure(
                f"GET /api/v1/groups, {consumers:,} consumers going stale, {name}",
                "ms",
                samples,
                "request",
                consumers,
            )
        )
    result.facts[f"{streams:,} streams, {consumers:,} consumers stale at once"] = {
        "bytes the streams received around the crossing": received,
        "p99 ms, no stream open": round(percentile(quiet, 99), 1),
        "p99 ms, streams open": round(percentile(busy, 99), 1),
        "max ms, streams open": round(max(busy), 1),
    }
    result.checks.append(
        Check(
            f"/api/v1/groups p99 with {streams:,} streams open during the crossing / without",
            percentile(busy, 99) / max(0.001, percentile(quiet, 99)),
            "<=",
            10.0,
            "p99 while the consumers cross the stale line under open streams / p99 with none",
        )
    )


def case_streams(server: BenchServer, sizes: Any) -> CaseResult:
    quick = sizes.quick
    result = CaseResult(
        "streams", "Long-lived readers: memory after streams close, the API under a mass stale"
    )
    if MISSING is not None or not Path("/proc/self/status").exists():
        result.skipped = MISSING or "needs /proc (Linux) for the service's RSS"
        return result
    url = f"redis://{HOST}:{server.port}/0"
    client = server.client()
    try:
        memory(url, 200 if quick else 1_000, result)
        client.flushall()
        if quick:
            mass_stale(url, 100, 2_000, result, window_s=3.0)
        else:
            mass_stale(url, 500, 20_000, result)
    finally:
        client.flushall()
        client.close()
    result.notes.append(
        f"{os.cpu_count()} CPUs shared by the service, the stream holder and this process"
    )
    return result


__all__ = ["case_streams"]

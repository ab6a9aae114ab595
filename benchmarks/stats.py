"""Samples, their median and p99, ratios against targets, and server-side counters."""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import redis


@dataclass
class Measure:
    """One measured variant: raw samples in `unit`, reduced to median and p99."""

    name: str
    unit: str
    samples: list[float]
    per: str = "call"
    """What one sample measures: ``call``, ``batch of 1000 beats``, ``snapshot``..."""
    size: int | None = None
    """Fleet size or batch size the variant ran at, when it has one."""

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def p99(self) -> float:
        return percentile(self.samples, 99)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "unit": self.unit,
            "per": self.per,
            "size": self.size,
            "rounds": len(self.samples),
            "median": self.median,
            "p99": self.p99,
            "min": min(self.samples),
            "max": max(self.samples),
        }


@dataclass
class Check:
    """A target: `ratio` compared with `target` by `op` (``<=`` or ``>=``)."""

    name: str
    ratio: float
    op: Literal["<=", ">="]
    target: float
    how: str
    """How the ratio is formed, e.g. ``heartbeat median / PING median``."""

    @property
    def met(self) -> bool:
        return self.ratio <= self.target if self.op == "<=" else self.ratio >= self.target

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ratio": self.ratio,
            "op": self.op,
            "target": self.target,
            "how": self.how,
            "met": self.met,
        }


@dataclass
class CaseResult:
    """What one case measured: variants, targets, plain facts and notes."""

    key: str
    title: str
    measures: list[Measure] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    skipped: str | None = None
    seconds: float = 0.0

    def measure(self, name: str) -> Measure:
        for m in self.measures:
            if m.name == name:
                return m
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "skipped": self.skipped,
            "seconds": round(self.seconds, 3),
            "measures": [m.to_json() for m in self.measures],
            "checks": [c.to_json() for c in self.checks],
            "facts": self.facts,
            "notes": self.notes,
        }


def percentile(samples: list[float], pct: float) -> float:
    """The nearest-rank percentile (p99 of fewer than 100 samples is their maximum)."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def time_us(fn: Callable[[], object]) -> float:
    """Wall time of one call of `fn`, in microseconds."""
    start = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - start) / 1_000


def interleaved(
    variants: dict[str, Callable[[], object]],
    rounds: int,
    *,
    before: Callable[[str], object] | None = None,
    collect: bool = False,
) -> dict[str, list[float]]:
    """Time every variant once per round, in turn (A B C A B C ...), in microseconds.

    Interleaving spreads the noise of a shared machine evenly over the variants, so the
    ratios between them stay meaningful. `before(name)` runs untimed before each call;
    `collect` runs a full garbage collection before each call (for large results).
    """
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            if before is not None:
                before(name)
            if collect:
                gc.collect()
            samples[name].append(time_us(fn))
    return samples


async def ainterleaved(
    variants: dict[str, Callable[[], Awaitable[object]]], rounds: int
) -> dict[str, list[float]]:
    """`interleaved` for coroutine functions, on the running event loop, in microseconds."""
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            start = time.perf_counter_ns()
            await fn()
            samples[name].append((time.perf_counter_ns() - start) / 1_000)
    return samples


def command_calls(client: redis.Redis) -> dict[str, int]:
    """``INFO commandstats`` as ``{command: calls}`` (scripts' own calls included)."""
    stats: dict[str, Any] = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


def command_usec(client: redis.Redis) -> dict[str, tuple[int, int]]:
    """``INFO commandstats`` as ``{command: (calls, usec)}``."""
    stats: dict[str, Any] = client.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
        for name, v in stats.items()
    }


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    """Per-command difference of two `command_calls` readings, without ``info`` itself."""
    out = {name: n - before.get(name, 0) for name, n in after.items() if name != "info"}
    return {name: n for name, n in sorted(out.items()) if n}


@contextmanager
def server_usec(client: redis.Redis, into: dict[str, float]) -> Iterator[None]:
    """Fill `into` with ``{command: usec_per_call}`` over the block (server-side time)."""
    before = command_usec(client)
    yield
    after = command_usec(client)
    for name, (calls, usec) in after.items():
        c0, u0 = before.get(name, (0, 0))
        if calls > c0 and name != "info":
            into[name] = (usec - u0) / (calls - c0)


def used_memory(client: redis.Redis) -> int:
    """``used_memory`` in bytes."""
    return int(client.info("memory")["used_memory"])


def format_value(value: float, unit: str) -> str:
    """A measurement for the tables: three significant digits or so, bytes as integers."""
    if unit == "B":
        return f"{value:,.0f} B"
    if value >= 100:
        return f"{value:,.0f} {unit}"
    if value >= 10:
        return f"{value:.1f} {unit}"
    return f"{value:.2f} {unit}"

"""How big and how long each case runs: `FULL` for the published run, `QUICK` for CI."""

from __future__ import annotations

from dataclasses import dataclass

from .fleets import FULL_FLEETS, QUICK_FLEETS, Fleet


@dataclass(frozen=True)
class Sizes:
    """How big and how long each case runs; `QUICK` keeps the whole run under a minute."""

    latency_calls: int
    """Single-call samples per variant for the heartbeat-vs-PING case."""
    batch_beats: int
    batch_rounds: int
    coalesce_beats: int
    coalesce_consumers: int
    coalesce_rounds: int
    snapshot_sizes: tuple[int, ...]
    snapshot_rounds: tuple[int, ...]
    count_sizes: tuple[int, int]
    count_rounds: int
    prune_sizes: tuple[int, int]
    prune_removed: int
    prune_rounds: int
    memory_sizes: tuple[int, ...]
    other_keys: int
    """Unrelated keys (a broker's own data) beside the largest snapshot fleet, for the
    ``info:`` rows that show what a keyspace scan pays for them."""
    fleets: tuple[Fleet, ...] = FULL_FLEETS
    """The fleets of case 9 (`benchmarks.fleets`)."""
    prune_groups: tuple[int, int] = (100, 10_000)
    """The few and the many groups of case prune-groups (`benchmarks.prunes`)."""
    quick: bool = False
    """Whether this is the `--quick` run: the cases with sizes of their own (web pages,
    `/metrics`, the workers' loops) take their small ones."""


FULL = Sizes(
    latency_calls=5_000,
    batch_beats=1_000,
    batch_rounds=200,
    coalesce_beats=1_000_000,
    coalesce_consumers=1_000,
    coalesce_rounds=20,
    snapshot_sizes=(1_000, 10_000, 100_000),
    snapshot_rounds=(50, 20, 15),
    count_sizes=(1_000, 100_000),
    count_rounds=300,
    prune_sizes=(10_000, 100_000),
    prune_removed=1_000,
    prune_rounds=30,
    memory_sizes=(10_000, 100_000),
    other_keys=1_000_000,
)

QUICK = Sizes(
    latency_calls=1_000,
    batch_beats=1_000,
    batch_rounds=30,
    coalesce_beats=100_000,
    coalesce_consumers=1_000,
    coalesce_rounds=10,
    snapshot_sizes=(1_000, 10_000),
    snapshot_rounds=(10, 5),
    count_sizes=(1_000, 100_000),
    count_rounds=50,
    prune_sizes=(10_000, 100_000),
    prune_removed=1_000,
    prune_rounds=5,
    memory_sizes=(10_000,),
    other_keys=20_000,
    fleets=QUICK_FLEETS,
    prune_groups=(100, 2_000),
    quick=True,
)

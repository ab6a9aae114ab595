"""Every case of the benchmark, by key, in the order of the report.

Every case takes the running `BenchServer` and the `Sizes` of the run, and returns a
`CaseResult`: raw samples per variant (median and p99 are derived), the targets as
ratios, and plain facts (command counts, bytes). Variants of one case are interleaved
round by round, so the noise of a shared machine hits them alike.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable

from .fleets import case_fleets
from .integrations import case_integrations
from .scale import case_counts, case_memory, case_prune, case_snapshot
from .server import BenchServer
from .sizes import Sizes
from .startup import case_startup
from .stats import CaseResult
from .writes import case_batched, case_coalescing, case_heartbeat

CASES: dict[str, Callable[[BenchServer, Sizes], CaseResult]] = {
    "heartbeat": case_heartbeat,
    "batched": case_batched,
    "coalescing": case_coalescing,
    "snapshot": case_snapshot,
    "counts": case_counts,
    "prune": case_prune,
    "prune-groups": lambda server, sizes: importlib.import_module(
        "benchmarks.prunes"
    ).case_prune_groups(server, sizes),
    "memory": case_memory,
    "startup": case_startup,
    "integrations": case_integrations,
    "fleets": case_fleets,
    "web": lambda server, sizes: importlib.import_module("benchmarks.web").case_web(server, sizes),
    "events": lambda server, sizes: importlib.import_module("benchmarks.events").case_events(
        server, sizes
    ),
    "metadata": lambda server, sizes: importlib.import_module("benchmarks.metadata").case_metadata(
        server, sizes
    ),
    "node": lambda server, sizes: importlib.import_module("benchmarks.node").case_node(
        server, sizes
    ),
    "queues": lambda server, sizes: importlib.import_module("benchmarks.queues").case_queues(
        server, sizes
    ),
    "pages": lambda server, sizes: importlib.import_module("benchmarks.pages").case_pages(
        server, sizes
    ),
    "idle": lambda server, sizes: importlib.import_module("benchmarks.idle").case_idle(
        server, sizes
    ),
    "streams": lambda server, sizes: importlib.import_module("benchmarks.streams").case_streams(
        server, sizes
    ),
    "beat_cost": lambda server, sizes: importlib.import_module("benchmarks.beats").case_beat_cost(
        server, sizes
    ),
    "scrape": lambda server, sizes: importlib.import_module("benchmarks.scrape").case_scrape(
        server, sizes
    ),
}
"""Every case, in the order of issue 6, then the CLI's startup; the keys are the JSON's ``cases``
keys."""


def run_case(key: str, server: BenchServer, sizes: Sizes) -> CaseResult:
    """Run one case and time it."""
    started = time.monotonic()
    result = CASES[key](server, sizes)
    result.seconds = time.monotonic() - started
    return result


__all__ = ["CASES", "run_case"]

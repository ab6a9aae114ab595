"""Rendering a run: the rich tables, ``results.json`` and the snapshot-scaling chart."""

from __future__ import annotations

import json
import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .fleets import BOUNDED, RAW
from .stats import CaseResult, Check, Measure, format_value

CHART_NAME = "snapshot_scaling.png"
JSON_NAME = "results.json"


def machine(redis_version: str) -> dict[str, Any]:
    """What the numbers were measured on."""
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        model = platform.processor()

    def version(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    return {
        "nproc": os.cpu_count(),
        "cpu_model": model or "unknown",
        "load_average_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "redis_server": redis_version,
        "redis_py": version("redis"),
        "hiredis": version("hiredis"),
    }


def _verdict(check: Check) -> str:
    return "[green]met[/green]" if check.met else "[bold red]missed[/bold red]"


def measurements_table(results: list[CaseResult]) -> Table:
    table = Table(title="Measurements (median and p99 over rounds)", show_lines=False)
    table.add_column("case")
    table.add_column("variant")
    table.add_column("per")
    table.add_column("rounds", justify="right")
    table.add_column("median", justify="right")
    table.add_column("p99", justify="right")
    for result in results:
        if result.skipped:
            table.add_row(
                result.title, f"[yellow]skipped[/yellow]: {escape(result.skipped)}", "", "", "", ""
            )
            continue
        for i, m in enumerate(result.measures):
            table.add_row(
                result.title if i == 0 else "",
                m.name,
                m.per,
                str(len(m.samples)),
                format_value(m.median, m.unit),
                format_value(m.p99, m.unit),
                end_section=i == len(result.measures) - 1,
            )
    return table


def targets_table(results: list[CaseResult]) -> Table:
    table = Table(title="Targets")
    table.add_column("case")
    table.add_column("ratio")
    table.add_column("value", justify="right")
    table.add_column("target", justify="right")
    table.add_column("result")
    table.add_column("how")
    for result in results:
        for check in result.checks:
            table.add_row(
                result.key,
                check.name,
                f"{check.ratio:.3g}",
                f"{check.op} {check.target:.3g}",
                _verdict(check),
                check.how,
            )
    return table


def facts_table(results: list[CaseResult]) -> Table:
    table = Table(title="Facts (counted on the server, or derived)")
    table.add_column("case")
    table.add_column("fact")
    table.add_column("value")
    for result in results:
        for name, value in result.facts.items():
            shown = (
                ", ".join(f"{k}: {v}" for k, v in value.items())
                if isinstance(value, dict)
                else f"{value:,}"
                if isinstance(value, int)
                else str(value)
            )
            table.add_row(result.key, escape(name), escape(shown))
        for note in result.notes:
            table.add_row(result.key, "note", escape(note))
    return table


def print_report(console: Console, results: list[CaseResult]) -> None:
    console.print(measurements_table(results))
    console.print(targets_table(results))
    console.print(facts_table(results))


def write_json(path: Path, document: dict[str, Any]) -> None:
    path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n", encoding="utf-8")


def document(
    results: list[CaseResult], *, mode: str, machine_info: dict[str, Any], wall_s: float
) -> dict[str, Any]:
    """The JSON written to ``results.json``."""
    checks = [c for r in results for c in r.checks]
    return {
        "mode": mode,
        "wall_time_s": round(wall_s, 2),
        "machine": machine_info,
        "targets_met": sum(c.met for c in checks),
        "targets_total": len(checks),
        "cases": {r.key: r.to_json() for r in results},
    }


CHART_SERIES = ("snapshot()", RAW, BOUNDED, "SCAN + MGET design")
"""The series case 9 (fleets) extends to its largest fleet of 100 groups."""


def _fleet_points(fleets: CaseResult | None) -> list[Measure]:
    """Case 9's reads of its largest 100-group standalone fleet, as chart points in ms."""
    if fleets is None or fleets.skipped:
        return []
    points = []
    for m in fleets.measures:
        name, _, where = m.name.partition(" @ ")
        if name in CHART_SERIES and where.endswith(" over 100 groups"):
            scale = 1 / 1_000 if m.unit == "us" else 1.0
            points.append(Measure(m.name, "ms", [v * scale for v in m.samples], m.per, m.size))
    return points


def draw_chart(path: Path, snapshot: CaseResult, fleets: CaseResult | None = None) -> str | None:
    """Draw cost against fleet size (case 4, with case 9's largest fleet when it ran);
    returns why not when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install 'redis-presence[bench]'): no chart"
    series: dict[str, list[Measure]] = {}
    for m in snapshot.measures:
        series.setdefault(m.name.split(" @ ")[0], []).append(m)
    largest = max((m.size or 0 for m in snapshot.measures), default=0)
    for m in _fleet_points(fleets):
        if (m.size or 0) > largest and m.name.split(" @ ")[0] in series:
            series[m.name.split(" @ ")[0]].append(m)
    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=120)
    for name, measures in series.items():
        sizes = [m.size or 0 for m in measures]
        extra = name.startswith(("info:", "diag:"))
        ax.plot(
            sizes,
            [m.median for m in measures],
            marker="o",
            linestyle="--" if extra else "-",
            linewidth=1.2 if extra else 2.0,
            label=name,
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("tracked consumers (100 groups)")
    ax.set_ylabel("time per full read, ms (median)")
    ax.set_title("Reading every consumer: cost against fleet size")
    ax.grid(True, which="both", alpha=0.3)
    low, high = ax.get_ylim()
    ax.set_ylim(low, high * 40)  # headroom on the log scale: the legend sits above the lines
    ax.legend(fontsize="small", loc="upper left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return None

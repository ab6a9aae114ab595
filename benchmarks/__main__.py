"""``python -m benchmarks [--quick] [--out DIR] [--case NAME ...]``: run the benchmark suite."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from rich.console import Console
from rich.markup import escape

from .cases import CASES, run_case
from .report import CHART_NAME, JSON_NAME, document, draw_chart, machine, print_report, write_json
from .server import BenchServer, ServerError
from .sizes import FULL, QUICK


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Measure redis-presence against the round-trip floor, raw redis-py and "
        "the SCAN + MGET design, on a redis-server started for the run.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="small sizes and few rounds (under a minute)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("benchmarks/results"),
        help=f"directory for {JSON_NAME} and {CHART_NAME} (default: benchmarks/results, "
        "which git ignores; the published run is benchmarks/reference)",
    )
    parser.add_argument(
        "--case",
        action="append",
        choices=list(CASES),
        help="run only this case (repeatable); default: every case",
    )
    parser.add_argument("--redis-server", help="path of the redis-server binary to start")
    return parser


def _stop_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # Wide enough for the tables when the output goes to a file or a CI log.
    console = Console() if sys.stdout.isatty() else Console(width=160)
    sizes = QUICK if args.quick else FULL
    mode = "quick" if args.quick else "full"
    keys = args.case or list(CASES)
    args.out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    started = time.monotonic()
    results = []
    try:
        with BenchServer(args.redis_server) as server:
            info = machine(server.version)
            console.print(
                f"[bold]redis-presence benchmark[/bold] ({mode}) on redis-server "
                f"{info['redis_server']} at 127.0.0.1:{server.port}; {info['nproc']} CPUs "
                f"({info['cpu_model']}), load {info['load_average_1m']}"
            )
            for key in keys:
                with console.status(f"running {key} ..."):
                    result = run_case(key, server, sizes)
                state = f"skipped: {result.skipped}" if result.skipped else "done"
                console.print(f"  {result.title}: {state} in {result.seconds:.1f} s")
                results.append(result)
    except ServerError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        return 2
    except KeyboardInterrupt:
        console.print("[yellow]interrupted; the benchmark's redis-server was stopped[/yellow]")
        return 130
    wall = time.monotonic() - started
    print_report(console, results)
    write_json(args.out / JSON_NAME, document(results, mode=mode, machine_info=info, wall_s=wall))
    console.print(f"results: {args.out / JSON_NAME}")
    snapshot = next((r for r in results if r.key == "snapshot" and not r.skipped), None)
    if snapshot is not None:
        fleets = next((r for r in results if r.key == "fleets"), None)
        why_not = draw_chart(args.out / CHART_NAME, snapshot, fleets)
        console.print(escape(why_not or f"chart: {args.out / CHART_NAME}"))
    console.print(f"wall time: {wall:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

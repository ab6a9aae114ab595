"""``python -m benchmarks.markdown [results.json]``: the tables of a run as Markdown.

Used to paste a full run into docs/performance.md, so the published numbers
are exactly those of the committed ``benchmarks/reference/results.json``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from .stats import format_value

DEFAULT = Path(__file__).resolve().parent / "reference" / "results.json"


def render(document: dict[str, Any]) -> str:
    """Machine line, targets table and measurements table."""
    m = document["machine"]
    lines = [
        f"Machine: {m['nproc']} CPUs ({m['cpu_model']}), load average {m['load_average_1m']} "
        f"at the start, redis-server {m['redis_server']}, Python {m['python']}, "
        f"redis-py {m['redis_py']}, hiredis {m['hiredis'] or 'not installed'}; "
        f"{document['mode']} run, {document['wall_time_s']:.0f} s.",
        "",
        "| case | ratio | value | target | |",
        "| --- | --- | ---: | ---: | --- |",
    ]
    for key, case in document["cases"].items():
        for c in case["checks"]:
            verdict = "met" if c["met"] else "**missed**"
            lines.append(
                f"| {key} | {c['name']} | {c['ratio']:.3g} | {c['op']} {c['target']:.3g} "
                f"| {verdict} |"
            )
    lines += [
        "",
        "| case | variant | per | rounds | median | p99 |",
        "| --- | --- | --- | ---: | ---: | ---: |",
    ]
    for key, case in document["cases"].items():
        if case["skipped"]:
            lines.append(f"| {key} | skipped: {case['skipped']} | | | | |")
        for x in case["measures"]:
            lines.append(
                f"| {key} | {x['name']} | {x['per']} | {x['rounds']} "
                f"| {format_value(x['median'], x['unit'])} | {format_value(x['p99'], x['unit'])} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0]) if args else DEFAULT
    sys.stdout.write(render(json.loads(path.read_text(encoding="utf-8"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())

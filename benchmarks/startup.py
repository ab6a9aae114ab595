"""Startup of the command line: `redis-presence --help` and `--version` against
`python -c 'import click'`, each a fresh process, interleaved round by round.

The target (issue 18, item 14) is an overhead of at most 0.15 s over importing click, which
the CLI cannot do without. The case also counts what `--help` imports: neither redis-py
nor rich may be among it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path

from .server import BenchServer
from .sizes import Sizes
from .stats import CaseResult, Check, Measure, interleaved

HEAVY = ("redis", "rich")
"""Top-level packages a `--help` or `--version` must not import."""

TARGET_OVERHEAD_S = 0.15


def cli_argv() -> tuple[list[str], str]:
    """How to start the CLI: the installed console script next to this Python, else the
    same entry point through `-c`; and which of the two it is."""
    script = Path(sys.executable).parent / "redis-presence"
    if script.exists():
        return [sys.executable, str(script)], "console script"
    found = shutil.which("redis-presence")
    if found is not None:
        return [sys.executable, found], "console script"
    return [sys.executable, "-c", "from redis_presence.cli import main; main()"], "-c main()"


def _run(argv: list[str]) -> None:
    subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True)


def imported_by_help() -> list[str]:
    """The heavy packages present in `sys.modules` once `--help` has been printed."""
    probe = (
        "import sys, contextlib, io\n"
        "from redis_presence.cli import main\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    main()\n"
        f"print(' '.join(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, "--help"], capture_output=True, text=True, check=True
    )
    return done.stdout.split()


def case_startup(server: BenchServer, sizes: Sizes) -> CaseResult:
    """Process start to exit of `--help` and `--version`, and of `import click` alone."""
    del server  # no Redis: `--help` and `--version` never connect
    rounds = max(10, sizes.latency_calls // 125)  # 40 in a full run, 10 in a quick one
    result = CaseResult("startup", "8. CLI startup")
    cli, how = cli_argv()
    variants = {
        "python -c 'import click'": [sys.executable, "-c", "import click"],
        "redis-presence --help": [*cli, "--help"],
        "redis-presence --version": [*cli, "--version"],
        "python -c 'import redis_presence'": [sys.executable, "-c", "import redis_presence"],
        "info: python -c 'import redis'": [sys.executable, "-c", "import redis"],
    }
    for argv in variants.values():  # warm the file cache and the bytecode
        _run(argv)
    samples = interleaved({name: partial(_run, argv) for name, argv in variants.items()}, rounds)
    for name, us in samples.items():
        result.measures.append(Measure(name, "ms", [u / 1000 for u in us], "process"))
    baseline = result.measure("python -c 'import click'").median
    for name in ("redis-presence --help", "redis-presence --version"):
        overhead_s = (result.measure(name).median - baseline) / 1000
        result.checks.append(
            Check(
                f"{name.removeprefix('redis-presence ')} overhead",
                round(overhead_s, 3),
                "<=",
                TARGET_OVERHEAD_S,
                f"{name} median - import click median, in s",
            )
        )
        result.facts[f"{name} / import click"] = round(result.measure(name).median / baseline, 2)
    heavy = imported_by_help()
    result.facts["started as"] = how
    result.facts["heavy packages imported by --help"] = ", ".join(heavy) or "none"
    return result

"""The `redis-presence` command line: inspect live consumers, and a self-contained demo."""

from __future__ import annotations

from .check import check_command
from .commands import cli
from .serve import serve_command

cli.add_command(serve_command)
cli.add_command(check_command)


def main() -> None:
    """Console-script entry point (`redis-presence`)."""
    cli(prog_name="redis-presence")


__all__ = ["cli", "main"]

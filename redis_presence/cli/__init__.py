"""The `redis-presence` command line: inspect live consumers, and a self-contained demo."""

from __future__ import annotations

from .commands import cli
from .streams import streams_group

cli.add_command(streams_group)


def main() -> None:
    """Console-script entry point (`redis-presence`)."""
    cli(prog_name="redis-presence")


__all__ = ["cli", "main"]

"""The `redis-presence` command line: inspect live consumers, and a self-contained demo.

`group` holds the click group and its global options, `app` the context every command
receives, `commands/` one module per command.
"""

from __future__ import annotations

from .group import cli


def main() -> None:
    """Console-script entry point (`redis-presence`)."""
    cli(prog_name="redis-presence")


__all__ = ["cli", "main"]

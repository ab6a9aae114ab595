"""The `redis-presence` command line: inspect live consumers, and a self-contained demo.

`group` holds the click group and its global options, `app` the context every command
receives, `commands/` one module per command.
"""

from __future__ import annotations

import sys

from .errors import OutputClosed, OutputFailed, output_errors
from .group import cli


def main() -> None:
    """Console-script entry point (`redis-presence`)."""
    try:
        with output_errors():  # click's own output (`--help > /dev/full`) can fail too
            cli(prog_name="redis-presence")
    except OutputClosed:
        sys.exit(0)
    except OutputFailed as exc:
        exc.show()
        sys.exit(exc.exit_code)


__all__ = ["cli", "main"]

"""The commands of `redis-presence`, one module each; its line in `COMMANDS` registers it.

A command module defines `command` (a `click.Command`, or a `click.Group` for a family such
as `streams reap`) and is named after it (`demo-broker` lives in `demo_broker.py`). It
receives the global options as an `App` (`@pass_app`), calls the library, and hands rows to
`App.show_consumers` / `App.show_counts` or text to `App.emit`.

At the top, a command module imports only click, the CLI's light modules (`..app`,
`..options`) and the library's model: `redis-presence --help` imports every command module,
so anything heavier (redis-py, rich, a web framework) is imported inside the function.
"""

from __future__ import annotations

COMMANDS: tuple[str, ...] = (
    "ls",
    "counts",
    "expect",
    "unexpect",
    "watch",
    "events",
    "ttl",
    "prune",
    "heartbeat",
    "deregister",
    "drain",
    "demo",
    "demo_broker",
    "migrate",
    "streams",
    "serve",
    "check",
    "doctor",
)
"""Module names under `redis_presence.cli.commands`, each defining `command`."""

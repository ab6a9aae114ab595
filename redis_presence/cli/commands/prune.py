"""`redis-presence prune`: remove the expired consumers, or list them with `--dry-run`."""

from __future__ import annotations

import click

from redis_presence.model import PresenceState

from ..app import App, pass_app
from ..options import format_option
from ..reads import Selection


@click.command("prune", short_help="Remove expired consumers (--dry-run lists them).")
@click.option("--dry-run", is_flag=True, help="List the expired consumers; remove nothing.")
@format_option(
    "Output format: with --dry-run, the consumers (as ls prints them); without, how many went "
    '(json: {"pruned": N}, csv: a "pruned" column).'
)
@pass_app
def command(app: App, dry_run: bool, fmt: str) -> None:
    """Remove expired consumers and print how many.

    \b
    Examples:
      redis-presence prune --dry-run
      redis-presence prune
      redis-presence prune --format json
    """
    fmt = fmt.lower()
    if dry_run:
        expired = Selection(states=frozenset({PresenceState.EXPIRED}))
        doomed = app.consumers(expired)
        app.show_consumers(doomed, fmt, selection=expired)
        if fmt == "table":
            app.emit(f"would prune {len(doomed)} expired consumer(s)\n")
        return
    removed = app.writer("prune").prune_expired(now_ns=app.now_ns, ttl_ms=app.ttl_ms)
    if fmt == "json":
        app.emit_json({"pruned": removed})
    elif fmt == "csv":
        app.emit(f"pruned\n{removed}\n")
    else:
        app.emit(f"pruned {removed} expired consumer(s)\n")

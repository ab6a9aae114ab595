"""`redis-presence prune`: remove the expired consumers, or list them with `--dry-run`."""

from __future__ import annotations

import click

from redis_presence.model import PresenceState

from ..app import App, pass_app
from ..options import FORMAT_OPTION


@click.command("prune", short_help="Remove expired consumers (--dry-run lists them).")
@click.option("--dry-run", is_flag=True, help="List the expired consumers; remove nothing.")
@FORMAT_OPTION
@pass_app
def command(app: App, dry_run: bool, fmt: str) -> None:
    """Remove expired consumers and print how many.

    \b
    Examples:
      redis-presence prune --dry-run
      redis-presence prune
    """
    if dry_run:
        doomed = [row for row in app.snapshot() if row.state is PresenceState.EXPIRED]
        app.show_consumers(doomed, fmt)
        if fmt.lower() == "table":
            app.emit(f"would prune {len(doomed)} expired consumer(s)\n")
        return
    removed = app.writer("prune").prune_expired(now_ns=app.now_ns, ttl_ms=app.ttl_ms)
    app.emit(f"pruned {removed} expired consumer(s)\n")

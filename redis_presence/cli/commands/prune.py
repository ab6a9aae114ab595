"""`redis-presence prune`: remove the expired consumers, or list them with `--dry-run`."""

from __future__ import annotations

import click

from redis_presence.model import PresenceState

from ..app import App, pass_app
from ..options import filters, format_option
from ..reads import Selection


@click.command("prune", short_help="Remove expired consumers (--dry-run lists them).")
@filters(states=False)
@click.option("--dry-run", is_flag=True, help="List the expired consumers; remove nothing.")
@format_option(
    "Output format: with --dry-run, the consumers (as ls prints them); without, how many went "
    '(json: {"pruned": N}, csv: a "pruned" column).'
)
@pass_app
def command(app: App, queue: str | None, group: str | None, dry_run: bool, fmt: str) -> None:
    """Remove expired consumers (of one queue or group, with --queue / --group) and print
    how many.

    \b
    Examples:
      redis-presence prune --dry-run
      redis-presence prune
      redis-presence prune --queue orders --format json
    """
    fmt = fmt.lower()
    if dry_run:
        expired = Selection(queue, group, frozenset({PresenceState.EXPIRED}))
        doomed = app.consumers(expired)
        app.show_consumers(doomed, fmt, selection=expired)
        if fmt == "table":
            app.emit(f"would prune {len(doomed)} expired consumer(s)\n")
        app.note_ttl(queue, group, sorted({(row.queue, row.group) for row in doomed}))
        return
    registry = app.writer("prune")
    # Not given, --ttl-ms is each group's shared TTL: what the brokers beat under.
    removed = registry.prune_expired(now_ns=app.now_ns, ttl_ms=app.ttl_ms, queue=queue, group=group)
    ttl, source = app.note_ttl(queue, group)
    if fmt == "json":
        app.emit_json({"pruned": removed, "ttl_ms": ttl, "ttl_source": source})
    elif fmt == "csv":
        app.emit(f"pruned\n{removed}\n")
    else:
        app.emit(f"pruned {removed} expired consumer(s)\n")

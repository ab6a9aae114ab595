"""`redis-presence counts`: active consumers per (queue, group), 0 for tracked groups."""

from __future__ import annotations

import click

from ..app import App, pass_app
from ..options import FORMAT_OPTION


@click.command("counts", short_help="Active consumers per queue and group (0 when none).")
@FORMAT_OPTION
@pass_app
def command(app: App, fmt: str) -> None:
    """Active consumers per (queue, group); tracked groups with none show 0.

    \b
    Examples:
      redis-presence counts
      redis-presence counts --format csv
    """
    registry = app.registry()
    counts = registry.count_active_by_group(now_ns=app.now_ns, ttl_ms=app.ttl_ms)
    groups = {(row.queue, row.group): 0 for row in app.snapshot()}
    app.show_counts(groups | counts, fmt)

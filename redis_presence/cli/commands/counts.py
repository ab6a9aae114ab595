"""`redis-presence counts`: active consumers per (queue, group), 0 for tracked groups."""

from __future__ import annotations

import click

from ..app import App, pass_app
from ..options import filters, format_option
from ..reads import Selection


@click.command("counts", short_help="Active consumers per queue and group (0 when none).")
@filters(states=False)
@format_option("Output format; json and csv carry the fields queue, group and active.")
@pass_app
def command(app: App, queue: str | None, group: str | None, fmt: str) -> None:
    """Active consumers per (queue, group); tracked and declared groups with none show 0.

    Once a group is declared (`redis-presence expect`), the table gains MIN (the declared
    minimum) and marks each group below it; JSON and CSV gain min_active and below.

    \b
    Examples:
      redis-presence counts
      redis-presence counts --queue orders
      redis-presence counts --format csv
    """
    selection = Selection.of(queue, group)
    counts = app.active_counts(selection)
    app.show_counts(counts, fmt, selection=selection)
    app.note_ttl(queue, group, sorted(counts))

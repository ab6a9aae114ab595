"""`redis-presence migrate`: move a store written by release 0.1 to this release's index."""

from __future__ import annotations

import click

from ..app import App, pass_app
from ..errors import UsageProblem
from ..options import format_option


@click.command("migrate", short_help="Move a 0.1 store's index to this release's (idempotent).")
@format_option('Output format (json: {"moved": N}).')
@pass_app
def command(app: App, fmt: str) -> None:
    """List every group of a store written by redis-presence 0.1 in this release's index.

    Release 0.1 kept its index in a set (PREFIX:index); this release pages through a sorted
    set (PREFIX:groups), so 0.1's groups stay invisible to this release's readers until they
    are moved. Each step moves at most 100 groups, so it is safe to run while brokers keep
    beating, and again at any time: it moves only what is left. Brokers of this release list
    their groups themselves; run it once every broker runs this release.

    \b
    Examples:
      redis-presence migrate
      redis-presence --url redis://janitor:secret@redis.internal:6379/0 migrate --format json
    """
    registry = app.writer("migrate")
    migrate = getattr(registry, "migrate", None)
    if migrate is None:
        raise UsageProblem("migrate moves a Redis store: this registry keeps nothing in Redis")
    moved = migrate()
    if fmt.lower() == "json":
        app.emit_json({"moved": moved})
    elif fmt.lower() == "csv":
        app.emit(f"moved\n{moved}\n")
    else:
        app.emit(f"moved {moved} group(s) of the 0.1 index to {app.prefix}:groups\n")

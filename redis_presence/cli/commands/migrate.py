"""`redis-presence migrate`: bring a store to this release: 0.1's index moved, protocol
version 2 set, the fleet indexes seeded."""

from __future__ import annotations

import click

from ..app import App, pass_app
from ..errors import UsageProblem
from ..options import format_option


@click.command(
    "migrate", short_help="Bring a store to protocol version 2 (0.1's index too; idempotent)."
)
@format_option('Output format (json: {"moved": N, "seeded": N, "protocol": "2", "was": ...}).')
@pass_app
def command(app: App, fmt: str) -> None:
    """List every group of a store written by redis-presence 0.1 in this release's index.

    Release 0.1 kept its index in a set (PREFIX:index); this release pages through a sorted
    set (PREFIX:groups), so 0.1's groups stay invisible to this release's readers until they
    are moved. Each step moves at most 100 groups, so it is safe to run while brokers keep
    beating, and again at any time: it moves only what is left. Brokers of this release list
    their groups themselves; run it once every broker runs this release.

    It then sets PREFIX:protocol to 2: a prefix that version 1 clients wrote stays in mode 1
    (v1 values, no capacity, draining, instances or drain requests) until then, so run it
    once every client speaks version 2. On a standalone server it seeds the fleet indexes
    (PREFIX:newest, PREFIX:oldest) from each group's newest and oldest beat, 100 groups a
    step; running it again (after an interruption, say) seeds again, harmlessly.

    \b
    Examples:
      redis-presence migrate
      redis-presence --url redis://janitor:secret@redis.internal:6379/0 migrate --format json
    """
    registry = app.writer("migrate")
    migrate = getattr(registry, "migrate", None)
    if migrate is None:
        raise UsageProblem("migrate moves a Redis store: this registry keeps nothing in Redis")
    done = migrate()
    moved, seeded, was = int(done), getattr(done, "seeded", 0), getattr(done, "was", None)
    if fmt.lower() == "json":
        app.emit_json({"moved": moved, "seeded": seeded, "protocol": "2", "was": was})
    elif fmt.lower() == "csv":
        app.emit(f"moved,seeded,protocol,was\n{moved},{seeded},2,{was or ''}\n")
    else:
        app.emit(
            f"moved {moved} group(s) of the 0.1 index to {app.prefix}:groups\n"
            f"{app.prefix}:protocol is 2 (was {was or 'unset'}); "
            f"seeded the fleet indexes from {seeded} group(s)\n"
        )

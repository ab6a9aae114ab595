"""`redis-presence expect` / `unexpect`: declare (or forget) a group that must have readers."""

from __future__ import annotations

import click

from redis_presence.validation import MAX_MIN_ACTIVE

from ..app import App, pass_app
from ..options import MESSAGE_FORMATS, format_option


@click.command("expect", short_help="Declare a group that must have active consumers.")
@click.argument("queue")
@click.argument("group")
@click.option(
    "--min-active",
    type=click.IntRange(1, MAX_MIN_ACTIVE),
    default=1,
    show_default=True,
    metavar="N",
    help=(
        "Active consumers the group must have, 1 to 1,000,000 (`counts` marks it below, "
        "`check` fails); `unexpect` stops declaring it."
    ),
)
@format_option("text: one line; json: the names and min_active.", MESSAGE_FORMATS)
@pass_app
def command(app: App, queue: str, group: str, min_active: int, fmt: str) -> None:
    """Declare that GROUP must have at least N active readers of QUEUE.

    The declaration stays in Redis until `unexpect`, whether or not the group has
    consumers: `counts` shows it (with 0) and marks it when below, and `check` without
    --queue/--group checks every declared group.

    \b
    Examples:
      redis-presence expect payments settle
      redis-presence expect orders billing --min-active 2
    """
    from .. import render

    app.writer("expect").expect(queue, group, min_active)
    if fmt.lower() == "json":
        app.emit_json({"queue": queue, "group": group, "min_active": min_active})
        return
    app.emit(
        f"queue '{render.shown(queue)}' group '{render.shown(group)}' expects at least "
        f"{render.plural(min_active, 'active consumer')}\n"
    )


@click.command("unexpect", short_help="Forget a declared group.")
@click.argument("queue")
@click.argument("group")
@format_option("text: one line; json: the names and unexpected: true or false.", MESSAGE_FORMATS)
@pass_app
def unexpect(app: App, queue: str, group: str, fmt: str) -> None:
    """Forget that GROUP of QUEUE was declared (exit 0 either way).

    \b
    Examples:
      redis-presence unexpect payments settle
    """
    from .. import render

    existed = app.writer("unexpect").unexpect(queue, group)
    if fmt.lower() == "json":
        app.emit_json({"queue": queue, "group": group, "unexpected": existed})
        return
    outcome = "is no longer declared" if existed else "was not declared"
    app.emit(f"queue '{render.shown(queue)}' group '{render.shown(group)}' {outcome}\n")

"""`redis-presence deregister`: forget one consumer, as a graceful shutdown does."""

from __future__ import annotations

import click

from ..app import App, pass_app
from ..options import MESSAGE_FORMATS, format_option


@click.command("deregister", short_help="Forget one consumer, as a graceful shutdown does.")
@click.argument("queue")
@click.argument("group")
@click.argument("consumer")
@format_option(
    "text: one line; json: the consumer's names and deregistered: true or false.",
    MESSAGE_FORMATS,
)
@pass_app
def command(app: App, queue: str, group: str, consumer: str, fmt: str) -> None:
    """Forget one consumer, as a graceful shutdown would (exit 0 either way).

    \b
    Examples:
      redis-presence deregister orders billing worker-7
      redis-presence deregister orders billing worker-7 --format json
    """
    from .. import render

    existed = app.writer("deregister").deregister(queue, group, consumer)
    if fmt.lower() == "json":
        app.emit_json(
            {"queue": queue, "group": group, "consumer": consumer, "deregistered": existed}
        )
        return
    outcome = "deregistered" if existed else "was not tracked"
    app.emit(f"{render.who(queue, group, consumer)} {outcome}\n")

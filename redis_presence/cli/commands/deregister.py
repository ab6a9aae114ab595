"""`redis-presence deregister`: forget one consumer, as a graceful shutdown does."""

from __future__ import annotations

import click

from ..app import App, pass_app


@click.command("deregister", short_help="Forget one consumer, as a graceful shutdown does.")
@click.argument("queue")
@click.argument("group")
@click.argument("consumer")
@pass_app
def command(app: App, queue: str, group: str, consumer: str) -> None:
    """Forget one consumer, as a graceful shutdown would (exit 0 either way).

    \b
    Examples:
      redis-presence deregister orders billing worker-7
    """
    from .. import render

    existed = app.writer("deregister").deregister(queue, group, consumer)
    outcome = "deregistered" if existed else "was not tracked"
    app.emit(f"{render.who(queue, group, consumer)} {outcome}\n")

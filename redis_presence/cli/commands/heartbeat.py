"""`redis-presence heartbeat`: record one beat by hand (scripts, tests, repair)."""

from __future__ import annotations

import click

from redis_presence.validation import MAX_LEASE_COUNT

from ..app import App, pass_app
from ..options import MESSAGE_FORMATS, format_option


@click.command("heartbeat", short_help="Record one heartbeat for a consumer.")
@click.argument("queue")
@click.argument("group")
@click.argument("consumer")
@click.option(
    "--lease-count",
    type=click.IntRange(0, MAX_LEASE_COUNT),
    default=0,
    show_default=True,
    help="In-flight leases the consumer holds.",
)
@format_option(
    "text: one line; json: the consumer's names, lease_count and recorded: true.",
    MESSAGE_FORMATS,
)
@pass_app
def command(app: App, queue: str, group: str, consumer: str, lease_count: int, fmt: str) -> None:
    """Record one heartbeat for a consumer (for scripts, tests and manual repair).

    \b
    Examples:
      redis-presence heartbeat orders billing worker-7
      redis-presence heartbeat orders billing worker-7 --lease-count 3 --format json
    """
    from .. import render

    registry = app.writer("heartbeat")
    registry.heartbeat(queue, group, consumer, lease_count=lease_count, now_ns=app.now_ns)
    if fmt.lower() == "json":
        app.emit_json(
            {
                "queue": queue,
                "group": group,
                "consumer": consumer,
                "lease_count": lease_count,
                "recorded": True,
            }
        )
    else:
        app.emit(
            f"heartbeat recorded: {render.who(queue, group, consumer)}, {lease_count} lease(s)\n"
        )

"""`redis-presence heartbeat`: record one beat by hand (scripts, tests, repair)."""

from __future__ import annotations

import click

from redis_presence.validation import MAX_CAPACITY, MAX_LEASE_COUNT

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
@click.option(
    "--capacity",
    type=click.IntRange(0, MAX_CAPACITY),
    default=None,
    help="Leases it could hold at most (0: not reported; default: keep the stored one).",
)
@click.option(
    "--draining/--not-draining",
    default=None,
    help="It takes no new work (or does again); default: keep what is stored.",
)
@format_option(
    "text: one line; json: the consumer's names, lease_count, recorded: true and drain_requested.",
    MESSAGE_FORMATS,
)
@pass_app
def command(
    app: App,
    queue: str,
    group: str,
    consumer: str,
    lease_count: int,
    capacity: int | None,
    draining: bool | None,
    fmt: str,
) -> None:
    """Record one heartbeat for a consumer (for scripts, tests and manual repair), and say
    whether a drain of it was requested (redis-presence drain).

    \b
    Examples:
      redis-presence heartbeat orders billing worker-7
      redis-presence heartbeat orders billing worker-7 --lease-count 3 --format json
      redis-presence heartbeat orders billing worker-7 --capacity 8 --draining
    """
    from .. import render

    registry = app.writer("heartbeat")
    reply = registry.heartbeat(
        queue,
        group,
        consumer,
        lease_count=lease_count,
        now_ns=app.now_ns,
        capacity=capacity,
        draining=draining,
    )
    drain = bool(getattr(reply, "drain_requested", False))
    if fmt.lower() == "json":
        app.emit_json(
            {
                "queue": queue,
                "group": group,
                "consumer": consumer,
                "lease_count": lease_count,
                "recorded": True,
                "drain_requested": drain,
            }
        )
    else:
        said = "; a drain is requested" if drain else ""
        app.emit(
            f"heartbeat recorded: {render.who(queue, group, consumer)}, "
            f"{lease_count} lease(s){said}\n"
        )

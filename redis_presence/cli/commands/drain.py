"""`redis-presence drain`: ask consumers to drain (protocol version 2)."""

from __future__ import annotations

import click

from ..app import App, pass_app
from ..errors import UsageProblem
from ..options import MESSAGE_FORMATS, format_option


@click.command("drain", short_help="Ask a consumer (or a group's, or a host's) to drain.")
@click.argument("queue")
@click.argument("group")
@click.argument("consumer", required=False)
@click.option(
    "--host",
    default=None,
    metavar="HOST",
    help="Only the group's consumers whose metadata says this host (without CONSUMER).",
)
@format_option(
    "text: a line per consumer; json: the queue, group and each consumer asked.",
    MESSAGE_FORMATS,
)
@pass_app
def command(
    app: App, queue: str, group: str, consumer: str | None, host: str | None, fmt: str
) -> None:
    """Ask CONSUMER of QUEUE/GROUP to drain: its next heartbeats answer that a drain was
    requested, until one of them says it is draining (a reporter calls its
    on_drain_requested). Without CONSUMER, every consumer of the group (with --host, those
    whose metadata names that host). Needs protocol version 2 (run redis-presence migrate
    once every client is upgraded). Exit 0 either way.

    \b
    Examples:
      redis-presence drain orders billing worker-7
      redis-presence drain orders billing --host web-3 --format json
    """
    from .. import reads, render

    registry = app.writer("drain")
    request = getattr(registry, "request_drain", None)
    if request is None:
        raise UsageProblem("drain needs a registry that speaks protocol version 2")
    if consumer is not None:
        if host is not None:
            raise UsageProblem("give CONSUMER or --host, not both")
        names = [consumer]
    else:
        rows = reads.consumers(
            registry,
            reads.Selection(queue, group),
            now_ns=None,
            ttl_ms=None,
            with_meta=host is not None,
        )
        names = [row.consumer for row in rows if host is None or row.meta.get("host") == host]
    asked = {name: bool(request(queue, group, name)) for name in names}
    if fmt.lower() == "json":
        app.emit_json(
            {
                "queue": queue,
                "group": group,
                "consumers": [{"consumer": n, "requested": ok} for n, ok in asked.items()],
            }
        )
        return
    if not asked:
        app.emit(f"no consumer of queue '{render.shown(queue)}' group '{render.shown(group)}'\n")
    for name, ok in asked.items():
        outcome = "asked to drain" if ok else "was not tracked"
        app.emit(f"{render.who(queue, group, name)} {outcome}\n")

"""`redis-presence streams reap`: remove the dead consumers of a Redis Streams group safely."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ..app import App, pass_app
from ..options import format_option

if TYPE_CHECKING:
    from redis_presence.integrations.streams import ReapedConsumer, StreamReap

    from .. import render


@click.group("streams", short_help="Redis Streams consumer groups: reap dead consumers.")
def command() -> None:
    """Redis Streams consumer groups, seen through presence.

    \b
    Examples:
      redis-presence streams reap --stream orders --group billing --dry-run
      redis-presence streams reap --stream orders --group billing --format json
    """


@command.command("reap", short_help="Move a dead consumer's entries, then remove it.")
@click.option("--stream", required=True, help="The stream key (presence's queue name).")
@click.option("--group", required=True, help="The consumer group.")
@click.option(
    "--claim-to",
    metavar="CONSUMER",
    help="The consumer that takes the entries: active in presence, else an error and "
    "nothing is done (default: the active consumer of the group holding the fewest "
    "leases).",
)
@click.option(
    "--dry-run", is_flag=True, help="Say what would be moved and removed; change nothing."
)
@click.option(
    "--stream-url",
    envvar="REDIS_PRESENCE_STREAM_URL",
    metavar="URL",
    help="Redis holding the stream, when it is not the presence Redis (--url). "
    "Env: REDIS_PRESENCE_STREAM_URL.",
)
@format_option("Output format: a table with a summary line, or one JSON object.", ("table", "json"))
@pass_app
def reap(
    app: App,
    stream: str,
    group: str,
    claim_to: str | None,
    dry_run: bool,
    stream_url: str | None,
    fmt: str,
) -> None:
    """Move the pending entries of each dead consumer of GROUP to a live consumer, then
    remove it from the group and deregister it.

    Dead: presence calls it expired (or has never seen it) and Redis has not seen it read
    for longer than twice the TTL. Active and stale consumers, and any consumer still
    holding entries, are never removed; with no active consumer to take the entries,
    nothing is done.

    \b
    Examples:
      redis-presence streams reap --stream orders --group billing --dry-run
      redis-presence streams reap --stream orders --group billing --claim-to worker-2
      redis-presence --url redis://presence:6379/0 streams reap \\
          --stream-url redis://broker:6379/0 --stream orders --group billing --format json
    """
    from redis_presence.clients import open_client
    from redis_presence.integrations.streams import reap_stream_consumers

    from .. import render

    registry = app.registry() if dry_run else app.writer("streams reap")
    ttl, source = app.ttl_in_use(stream, group)
    client = open_client(
        stream_url or app.url, socket_connect_timeout=app.timeout_s, socket_timeout=app.timeout_s
    )
    app.ctx.call_on_close(client.close)
    outcome = reap_stream_consumers(
        client,
        registry,
        stream,
        group,
        claim_to=claim_to,
        dry_run=dry_run,
        ttl_ms=ttl,
        now_ns=app.now_ns,
    )
    if fmt.lower() == "json":
        app.emit_json(outcome.to_dict())
    else:
        app.emit(render_reap(outcome, render.Styler(app.console), app.width()))
    app.say_ttl(ttl, source, stream, group)


def _action(consumer: ReapedConsumer, would: str) -> str:
    if consumer.removed:
        return f"{would}remove"
    if consumer.deregistered:  # only presence knew it
        return f"{would}deregister"
    return f"keep: {consumer.reason}"


def render_reap(outcome: StreamReap, styler: render.Styler, width: int | None = None) -> str:
    """The outcome of a reap as a table (fitted to `width`) and a summary line."""
    from redis_presence.formatting import human_age

    from .. import render

    columns = (
        render.Column("CONSUMER", name=True),
        render.Column("PRESENCE", style=lambda cell: render.STATE_STYLES.get(cell, "")),
        render.Column("IDLE", right=True),
        render.Column("PENDING", right=True),
        render.Column("MOVED", right=True),
        render.Column("ACTION", style=lambda cell: "" if cell.startswith("keep") else "bold"),
    )
    would = "would " if outcome.dry_run else ""
    rows = [
        (
            c.consumer,
            c.presence,
            "-" if c.idle_ms is None else human_age(c.idle_ms),
            str(c.pending),
            str(c.moved),
            _action(c, would),
        )
        for c in outcome.consumers
    ]
    table = render.text_table(columns, rows, styler, width) if rows else "(no consumers)\n"
    moved = sum(outcome.moved.values())
    target = f" to {render.shown(outcome.target)!r}" if outcome.target is not None else ""
    # Every action of the table is counted: a row only presence knew is deregistered.
    forgotten = sum(1 for c in outcome.consumers if c.deregistered and not c.removed)
    summary = (
        f"stream {render.shown(outcome.stream)!r}, group {render.shown(outcome.group)!r}: "
        f"{would}move {moved} entr{'y' if moved == 1 else 'ies'}{target}, "
        f"{would}remove {len(outcome.removed)} consumer(s)"
        + (f", {would}deregister {forgotten} only presence knew" if forgotten else "")
        + "\n"
    )
    return table + summary + (f"{outcome.note}\n" if outcome.note else "")

"""`redis-presence streams reap`: remove dead consumers of a Redis Streams group safely."""

from __future__ import annotations

import json

import click

from redis_presence.integrations.streams import (
    ReapedConsumer,
    StreamReap,
    reap_stream_consumers,
)
from redis_presence.urls import open_client

from . import render
from .commands import App, pass_app

CONNECT_TIMEOUT_S = 5.0
REPLY_TIMEOUT_S = 30.0

REAP_COLUMNS = (
    render.Column("CONSUMER"),
    render.Column("PRESENCE"),
    render.Column("IDLE", right=True),
    render.Column("PENDING", right=True),
    render.Column("MOVED", right=True),
    render.Column("ACTION"),
)


@click.group("streams", short_help="Redis Streams consumer groups: reap dead consumers.")
def streams_group() -> None:
    """Redis Streams consumer groups, seen through presence.

    \b
    Examples:
      redis-presence streams reap --stream orders --group billing --dry-run
      redis-presence streams reap --stream orders --group billing --format json
    """


@streams_group.command("reap", short_help="Move a dead consumer's entries, then remove it.")
@click.option("--stream", required=True, help="The stream key (presence's queue name).")
@click.option("--group", required=True, help="The consumer group.")
@click.option(
    "--claim-to",
    metavar="CONSUMER",
    help="The live consumer that takes the entries (default: the group's active consumer "
    "holding the fewest leases).",
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
@click.option(
    "--format",
    "fmt",
    type=click.Choice(("table", "json"), case_sensitive=False),
    default="table",
    show_default=True,
    help="Output format.",
)
@pass_app
def reap_command(
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
    holding entries, are never removed; with no live consumer to take the entries,
    nothing is done.

    \b
    Examples:
      redis-presence streams reap --stream orders --group billing --dry-run
      redis-presence streams reap --stream orders --group billing --claim-to worker-2
      redis-presence --url redis://presence:6379/0 streams reap \\
          --stream-url redis://broker:6379/0 --stream orders --group billing --format json
    """
    registry = app.registry() if dry_run else app.writer("streams reap")
    client = open_client(
        stream_url or app.url,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        socket_timeout=REPLY_TIMEOUT_S,
    )
    app.ctx.call_on_close(client.close)
    outcome = reap_stream_consumers(
        client,
        registry,
        stream,
        group,
        claim_to=claim_to,
        dry_run=dry_run,
        ttl_ms=app.ttl_ms,
        now_ns=app.now_ns,
    )
    app.emit(render_reap(outcome, fmt.lower(), render.Styler(app.console)))


def _action(consumer: ReapedConsumer, would: str) -> str:
    if consumer.removed:
        return f"{would}remove"
    if consumer.deregistered:  # only presence knew it
        return f"{would}deregister"
    return f"keep: {consumer.reason}"


def render_reap(outcome: StreamReap, fmt: str, styler: render.Styler) -> str:
    """The outcome of a reap as JSON or as a table with a summary line."""
    if fmt == "json":
        return json.dumps(outcome.to_dict(), indent=2, ensure_ascii=False) + "\n"
    would = "would " if outcome.dry_run else ""
    rows = [
        (
            c.consumer,
            c.presence,
            "-" if c.idle_ms is None else render.human_age(c.idle_ms),
            str(c.pending),
            str(c.moved),
            _action(c, would),
        )
        for c in outcome.consumers
    ]

    def styles(index: int, cell: str) -> str:
        if index == 1:
            return render.STATE_STYLES.get(cell.strip(), "")
        return "bold" if index == 5 and not cell.startswith("keep") else ""

    table = render.text_table(REAP_COLUMNS, rows, styler, styles) if rows else "(no consumers)\n"
    target = render.shown(outcome.target) if outcome.target is not None else None
    moved = sum(outcome.moved.values())
    summary = (
        f"stream {render.shown(outcome.stream)!r}, group {render.shown(outcome.group)!r}: "
        f"{would}move {moved} entr{'y' if moved == 1 else 'ies'}"
        + (f" to {target!r}" if target is not None else "")
        + f", {would}remove {len(outcome.removed)} consumer(s)\n"
    )
    note = f"{outcome.note}\n" if outcome.note else ""
    return table + summary + note

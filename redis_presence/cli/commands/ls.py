"""`redis-presence ls` (alias `snapshot`): every tracked consumer, optionally filtered."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from ..app import App, pass_app
from ..options import FORMAT_OPTION, STATE_CHOICE

if TYPE_CHECKING:
    from redis_presence.model import ConsumerPresence


def _filter(
    rows: Sequence[ConsumerPresence],
    queue: str | None,
    group: str | None,
    states: Sequence[str],
) -> list[ConsumerPresence]:
    wanted = {s.lower() for s in states}
    return [
        row
        for row in rows
        if (queue is None or row.queue == queue)
        and (group is None or row.group == group)
        and (not wanted or row.state.value in wanted)
    ]


@click.command("ls", short_help="List consumers: state, last seen, leases (alias: snapshot).")
@click.option("--queue", help="Only this queue (exact name).")
@click.option("--group", help="Only this consumer group (exact name).")
@click.option(
    "--state", "states", type=STATE_CHOICE, multiple=True, help="Only these states (repeatable)."
)
@FORMAT_OPTION
@pass_app
def command(
    app: App, queue: str | None, group: str | None, states: tuple[str, ...], fmt: str
) -> None:
    """List tracked consumers with their state, age and leases (alias: snapshot).

    \b
    Examples:
      redis-presence ls
      redis-presence ls --queue orders --state stale --state expired
      redis-presence ls --format json | jq -r '.[] | select(.state != "active") | .consumer'
    """
    app.show_consumers(_filter(app.snapshot(), queue, group, states), fmt)

"""Options that several commands share, defined once."""

from __future__ import annotations

import click

from redis_presence.model import PresenceState

FORMATS = ("table", "json", "csv")
"""The output formats of `ls`, `counts` and `prune --dry-run`."""

STATE_CHOICE = click.Choice([s.value for s in PresenceState], case_sensitive=False)

FORMAT_OPTION = click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS, case_sensitive=False),
    default="table",
    show_default=True,
    help="Output format; json and csv carry the ConsumerPresence field names.",
)

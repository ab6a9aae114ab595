"""`redis-presence ttl`: the TTL every broker and reader shares, stored in Redis for the
prefix or for one group."""

from __future__ import annotations

import click

from redis_presence.validation import MAX_TTL_MS

from ..app import App, pass_app
from ..errors import UsageProblem
from ..options import format_option

_formats = format_option(
    'Output format; json: {"ttl_ms": N, "source": "group|prefix|default", ...}.',
    ("text", "json"),
)


def _where(f: click.decorators.FC) -> click.decorators.FC:
    f = click.option("--group", help="With --queue: this group's TTL, not the prefix's.")(f)
    return click.option("--queue", help="With --group: this group's TTL, not the prefix's.")(f)


@click.group("ttl", invoke_without_command=True, short_help="Show or store the shared TTL.")
@_where
@_formats
@click.pass_context
def command(ctx: click.Context, queue: str | None, group: str | None, fmt: str) -> None:
    """Show (get, the default), store (set) or forget (unset) the TTL that brokers and
    readers share: for the prefix (every group's default) or for one group.

    Reads without --ttl-ms use it: a group's own TTL, else the prefix's, else the default
    (30000 ms). Brokers and long-running readers (the dashboard) pick up a new value
    within 5 s (TTL_CACHE_MS).

    \b
    Examples:
      redis-presence ttl
      redis-presence ttl --queue reports --group nightly --format json
      redis-presence ttl set 60000
      redis-presence ttl set 120000 --queue reports --group nightly
      redis-presence ttl get --queue reports --group nightly --format json
      redis-presence ttl unset --queue reports --group nightly
    """
    if ctx.invoked_subcommand is None:  # `ttl [--queue Q --group G] [--format F]` is `get`
        ctx.invoke(get, queue=queue, group=group, fmt=fmt)
        return
    given = [
        f"--{name}"
        for name in ("queue", "group", "format")
        if ctx.get_parameter_source("fmt" if name == "format" else name)
        is click.core.ParameterSource.COMMANDLINE
    ]
    if given:
        raise UsageProblem(
            f"put {'/'.join(given)} after '{ctx.invoked_subcommand}' "
            f"(redis-presence ttl {ctx.invoked_subcommand} ... {given[0]} ...)"
        )


def _document(app: App, queue: str | None, group: str | None) -> dict[str, object]:
    ttl, source = app.registry().ttl_source(*((queue, group) if queue or group else ()))
    return {
        "ttl_ms": ttl,
        "source": source,
        "queue": queue,
        "group": group,
        "prefix": app.prefix,
    }


def _show(app: App, queue: str | None, group: str | None, fmt: str, before: str = "") -> None:
    """The TTL in use for the prefix (or one group), as a line or a JSON document."""
    data = _document(app, queue, group)
    if fmt.lower() == "json":
        app.emit_json(data)
        return
    source = str(data["source"])
    # Nothing stored: say how to store one (rather than that a group's own would win).
    words = app.ttl_words(
        int(str(data["ttl_ms"])), source, queue, group, own_known=source == "default"
    )
    scope = f"queue {queue!r}, group {group!r}" if queue is not None else f"prefix {app.prefix!r}"
    app.emit(f"{before}{scope}: {words}\n")


@command.command("get", short_help="Show the shared TTL and where it comes from.")
@_where
@_formats
@pass_app
def get(app: App, queue: str | None = None, group: str | None = None, fmt: str = "text") -> None:
    """Show the TTL reads use (for the prefix, or for one group) and where it comes from:
    stored for the group, stored for the prefix, or the default."""
    _show(app, queue, group, fmt)


@command.command("set", short_help="Store the shared TTL.")
@click.argument("value_ms", metavar="MS", type=click.IntRange(1, MAX_TTL_MS))
@_where
@_formats
@pass_app
def set_(app: App, value_ms: int, queue: str | None, group: str | None, fmt: str) -> None:
    """Store MS as the TTL of the prefix (every group without its own), or of one group."""
    registry = app.writer("ttl set")
    registry.set_ttl(value_ms, queue=queue, group=group)
    _show(app, queue, group, fmt, "stored: ")


@command.command("unset", short_help="Forget a stored TTL.")
@_where
@_formats
@pass_app
def unset(app: App, queue: str | None, group: str | None, fmt: str) -> None:
    """Forget the TTL stored for the prefix (or for one group); show the one now in use."""
    registry = app.writer("ttl unset")
    registry.set_ttl(None, queue=queue, group=group)
    _show(app, queue, group, fmt, "unset; now ")

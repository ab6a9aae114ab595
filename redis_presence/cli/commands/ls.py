"""`redis-presence ls` (alias `snapshot`): every tracked consumer, filtered and sorted."""

from __future__ import annotations

import click

from redis_presence.validation import check_name

from ..app import App, pass_app
from ..errors import UsageProblem
from ..options import arrangement, consumer_formats, filters
from ..reads import Selection, arrange


def check_by(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A metadata field's name, as `describe` takes one (one line, exit 2, else)."""
    if value is None:
        return None
    try:
        return check_name("--by", value)
    except ValueError as exc:
        raise click.BadParameter(str(exc).removeprefix("--by "), param_hint="--by") from None


@click.command("ls", short_help="List consumers: state, last seen, leases (alias: snapshot).")
@filters()
@arrangement
@consumer_formats
@click.option(
    "--stuck",
    is_flag=True,
    help="Only stuck consumers: active, holding leases, no progress within the shared "
    "progress budget.",
)
@click.option(
    "--by",
    "by",
    metavar="FIELD",
    callback=check_by,
    help="Roll the consumers up by a metadata field (host, version, any key of their "
    "metadata): per value, its consumers active, stale and expired, groups and leases; "
    "'(none)' counts those without the field.",
)
@pass_app
def command(
    app: App,
    queue: str | None,
    group: str | None,
    states: tuple[str, ...],
    sort: str,
    limit: int | None,
    wide: bool,
    fmt: str,
    stuck: bool,
    by: str | None,
) -> None:
    """List tracked consumers with their state, age and leases.

    `redis-presence snapshot` is the same command. On a terminal the table fits its
    width: META and REGISTERED are left out first, then names are shortened in the middle
    (state, age and leases never are); --wide shows everything, with each consumer's
    metadata. A stuck consumer's state reads `active stuck`; JSON and CSV carry
    last_progress_ns, stuck and meta. --by FIELD rolls the chosen consumers up by a
    metadata field instead, one row per value in order (--limit: the first values).

    \b
    Examples:
      redis-presence ls
      redis-presence ls --queue orders --state stale --state expired
      redis-presence ls --sort age --limit 10
      redis-presence ls --stuck --wide
      redis-presence ls --by host
      redis-presence ls --by version --queue orders    # is build X drained?
      redis-presence ls --format json | jq -r '.[] | select(.state != "active") | .consumer'
    """
    selection = Selection.of(queue, group, states)
    if by is not None and click.get_current_context().get_parameter_source("sort") not in (
        None,
        click.core.ParameterSource.DEFAULT,
    ):
        raise UsageProblem("--sort orders consumers: --by lists the values of FIELD in order")
    now = app.clock_ns()  # one clock for the rows and for the AHEAD marks
    if by is not None:
        app.show_rollup(selection, by, fmt, now_ns=now, wide=wide, stuck=stuck, limit=limit)
        return
    rows = app.consumers(selection, now_ns=now, with_meta=wide or fmt.lower() != "table")
    read = {(row.queue, row.group) for row in rows}
    if stuck:
        rows = [row for row in rows if row.stuck]
    chosen = arrange(rows, sort.lower(), limit, row=lambda row: row)
    app.show_consumers(chosen, fmt, selection=selection, wide=wide, total=len(rows), now_ns=now)
    app.note_ttl(queue, group, sorted(read))

"""`redis-presence watch`: a live table of what changed between refreshes, which rides out
Redis outages."""

from __future__ import annotations

import time

import click

from ..app import App, pass_app
from ..options import arrangement, filters
from ..reads import Selection, arrange
from ..watch import Frame, Outage, run_watch


@click.command("watch", short_help="Live table marking joined, went stale, expired, left.")
@filters()
@arrangement
@click.option(
    "--interval",
    type=click.FloatRange(min=0.05, max=3600),
    default=1.0,
    show_default=True,
    help="Seconds between refreshes.",
)
@click.option("--iterations", type=click.IntRange(min=1), hidden=True)
@pass_app
def command(
    app: App,
    queue: str | None,
    group: str | None,
    states: tuple[str, ...],
    sort: str,
    limit: int | None,
    wide: bool,
    interval: float,
    iterations: int | None,
) -> None:
    """Live table that marks who joined, went stale, expired or left. Ctrl-C quits.

    Each refresh reads one snapshot; counts come from that same snapshot. When Redis
    cannot be reached, watch says so, keeps the last table, retries with backoff and
    carries on when Redis is back; only Ctrl-C ends it.

    \b
    Examples:
      redis-presence watch
      redis-presence watch --queue orders --sort state
      redis-presence --ttl-ms 5000 watch --interval 0.5
    """
    from redis_presence.errors import PresenceConnectionError
    from redis_presence.urls import scrub

    from .. import render
    from ..errors import one_line

    console = app.console
    selection = Selection.of(queue, group, states)
    title = f"redis-presence watch  prefix {app.prefix}  TTL {app.ttl_ms} ms  every {interval:g}s"
    empty = app.nothing("no consumers", selection)
    last: list[tuple[Frame, str]] = []
    try:
        with render.frame_sink(console, live=True) as sink:

            def view(frame: Frame, status: str | None = None) -> render.View:
                items = [item for item in frame.rows if selection.holds_state(item.row.state)]
                chosen = arrange(items, sort.lower(), limit, row=lambda item: item.row)
                return render.View(
                    chosen,
                    width=None if wide else sink.width,
                    height=sink.height,
                    hidden=len(items) - len(chosen),
                    empty=empty,
                    status=status,
                )

            def reason(error: Exception) -> str:
                return scrub(one_line(str(error)), app.url)

            def show(frame: Frame) -> None:
                stamp = time.strftime("%H:%M:%S", time.localtime())
                last[:] = [(frame, f"{title}  {stamp}")]
                sink.show(frame, last[0][1], view(frame))

            def on_outage(outage: Outage) -> None:
                status = (
                    f"Redis unreachable for {time.monotonic() - outage.since_s:.0f}s "
                    f"({render.plural(outage.failures, 'failed read')}): "
                    f"{reason(outage.error)}; retrying in {outage.retry_in_s:g}s"
                )
                if sink.live is not None:
                    frame, stamp = last[0] if last else (Frame((), {}, {}), title)
                    sink.show(frame, stamp, view(frame, status))
                elif outage.failures == 1:
                    click.echo(f"watch: {reason(outage.error)}; retrying", err=True)

            def on_recovered(outage: Outage) -> None:
                if sink.live is None:
                    gone = time.monotonic() - outage.since_s
                    click.echo(f"watch: Redis is back after {gone:.0f}s", err=True)

            run_watch(
                lambda: app.consumers(selection, states=False),
                show,
                interval_s=interval,
                iterations=iterations,
                transient=lambda exc: isinstance(exc, PresenceConnectionError),
                on_outage=on_outage,
                on_recovered=on_recovered,
            )
    except KeyboardInterrupt:
        pass

"""`redis-presence watch`: a live table of what changed between refreshes."""

from __future__ import annotations

import time
from typing import Any

import click

from ..app import App, pass_app


@click.command("watch", short_help="Live table marking joined, went stale, expired, left.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.05, max=3600),
    default=1.0,
    show_default=True,
    help="Seconds between refreshes.",
)
@click.option("--iterations", type=click.IntRange(min=1), hidden=True)
@pass_app
def command(app: App, interval: float, iterations: int | None) -> None:
    """Live table that marks who joined, went stale, expired or left. Ctrl-C quits.

    Each refresh reads one snapshot; counts come from that same snapshot.

    \b
    Examples:
      redis-presence watch
      redis-presence --ttl-ms 5000 watch --interval 0.5
    """
    from .. import render
    from ..watch import run_watch

    console = app.console
    title = f"redis-presence watch  prefix {app.prefix}  TTL {app.ttl_ms} ms  every {interval:g}s"
    try:
        with render.frame_sink(console, live=True) as sink:

            def show(frame: Any) -> None:
                stamp = time.strftime("%H:%M:%S", time.localtime())
                sink.show(frame, f"{title}  {stamp}")

            run_watch(app.snapshot, show, interval_s=interval, iterations=iterations)
    except KeyboardInterrupt:
        pass

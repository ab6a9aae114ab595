"""`redis-presence demo-broker` (hidden): one simulated broker, for the demo and compose."""

from __future__ import annotations

import contextlib
import sys

import click

from ..app import App, pass_app


@click.command("demo-broker", hidden=True)
@click.option("--name", required=True, help="Broker name; consumers are NAME-c1, NAME-c2, ...")
@click.option("--consumers", type=click.IntRange(1, 1000), default=3, show_default=True)
@click.option("--offset", type=click.IntRange(0), help="First demo group (default from NAME).")
@click.option("--stdin-control", is_flag=True, help="Obey commands on stdin; quit at EOF.")
@click.option(
    "--quiet", is_flag=True, help="Log outages only (the demo reports starts and stops itself)."
)
@pass_app
def command(
    app: App, name: str, consumers: int, offset: int | None, stdin_control: bool, quiet: bool
) -> None:
    """One demo broker: simulated consumers heartbeating until stopped. It logs one line
    on stderr when it starts, stops, loses Redis and gets it back.

    \b
    Examples:
      redis-presence --url redis://redis:6379/0 demo-broker --name broker-a --consumers 3
    """
    from ..demo.broker import beat_interval_s, run_broker
    from ..signals import interrupt_on_sigterm

    registry = app.writer("demo-broker")
    ttl, source = app.ttl_in_use()
    beat_s = beat_interval_s(ttl)

    def log(line: str) -> None:
        click.echo(line, err=True)

    def lifecycle(line: str) -> None:
        if not quiet:
            log(line)

    where = f"{app.where}, {app.ttl_words(ttl, source)}, a read every {beat_s:g}s"
    with interrupt_on_sigterm(), contextlib.suppress(KeyboardInterrupt):
        run_broker(
            registry,
            name,
            consumers,
            beat_s=beat_s,
            offset=offset,
            control=sys.stdin if stdin_control else None,
            log=log,
            lifecycle=lifecycle,
            where=where,
        )

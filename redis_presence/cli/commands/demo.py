"""`redis-presence demo`: a local Redis, broker processes and the watch view, on one machine."""

from __future__ import annotations

import click

from ..app import App, pass_app

DEFAULT_DEMO_TTL_MS = 2000
"""The demo's heartbeat budget: short, so states change while you watch."""

SERVER_CHOICES = ("auto", "redis-server", "embedded")
"""`--server`: the values of `embedded.ServerChoice` (spelled here to keep `--help` light)."""


@click.command("demo", short_help="Self-contained demo: local Redis, brokers, live view.")
@click.option(
    "--duration",
    type=click.FloatRange(min=1, max=86_400),
    default=15.0,
    show_default=True,
    help="Seconds the story runs once every consumer is up.",
)
@click.option(
    "--brokers", type=click.IntRange(1, 16), default=3, show_default=True, help="Broker processes."
)
@click.option(
    "--consumers",
    type=click.IntRange(1, 32),
    default=3,
    show_default=True,
    help="Consumers per broker.",
)
@click.option(
    "--ttl-ms",
    "demo_ttl_ms",
    type=click.IntRange(100, 60_000),
    default=DEFAULT_DEMO_TTL_MS,
    show_default=True,
    help="Heartbeat budget of the demo (short, so states change while you watch).",
)
@click.option("--no-tui", is_flag=True, help="Plain periodic lines instead of the live table.")
@click.option(
    "--server",
    type=click.Choice(SERVER_CHOICES),
    default="auto",
    show_default=True,
    help="Local Redis to start: redis-server from PATH, or the embedded fakeredis.",
)
@pass_app
def command(
    app: App,
    duration: float,
    brokers: int,
    consumers: int,
    demo_ttl_ms: int,
    no_tui: bool,
    server: str,
) -> None:
    """Run a self-contained demo: a local Redis, broker processes, and the watch view.

    Starts its own Redis on a free loopback port (never the one in --url), launches
    broker processes that heartbeat on every simulated read, then hangs one consumer,
    crashes one broker, stops one consumer cleanly and starts a replacement broker,
    so you see consumers go active, stale and expired and the counts change.
    Everything it started is stopped on exit, Ctrl-C included.

    \b
    Examples:
      redis-presence demo
      redis-presence demo --brokers 4 --consumers 2 --duration 30
      redis-presence demo --no-tui --duration 8
    """
    from ..demo import run_demo

    run_demo(
        app.console,
        duration_s=duration,
        brokers=brokers,
        consumers=consumers,
        ttl_ms=demo_ttl_ms,
        tui=not no_tui,
        server_choice=server,  # type: ignore[arg-type]
    )

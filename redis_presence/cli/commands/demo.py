"""`redis-presence demo`: a local Redis, broker processes and the watch view, on one machine."""

from __future__ import annotations

import click

from ..app import App, pass_app
from ..errors import UsageProblem
from .serve import web_extra_missing

DEFAULT_DEMO_TTL_MS = 2000
"""The demo's heartbeat budget unless --ttl-ms or REDIS_PRESENCE_TTL_MS says otherwise:
short, so states change while you watch."""

DEMO_TTL_RANGE_MS = (100, 60_000)

SERVE_DURATION_S = 600.0
"""How long `demo --serve` runs unless --duration says otherwise (Ctrl-C ends it sooner):
long enough to open the dashboard and watch the story and the fleet after it."""

SERVER_CHOICES = ("auto", "redis-server", "embedded")
"""`--server`: the values of `embedded.ServerChoice` (spelled here to keep `--help` light)."""


@click.command("demo", short_help="Self-contained demo: local Redis, brokers, live view.")
@click.option(
    "--duration",
    type=click.FloatRange(min=1, max=86_400),
    help="Seconds the story runs once every consumer is up  [default: until the story "
    "ends, 5 TTLs]",
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
@click.option("--no-tui", is_flag=True, help="Plain periodic lines instead of the live table.")
@click.option(
    "--server",
    type=click.Choice(SERVER_CHOICES),
    default="auto",
    show_default=True,
    help="Local Redis to start: redis-server from PATH, or the embedded fakeredis.",
)
@click.option(
    "--serve",
    is_flag=True,
    help="Also serve the dashboard on loopback (redis-presence serve) and print its URL; "
    "runs until Ctrl-C (at most --duration, default 10 minutes).",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    help="The dashboard's TCP port with --serve  [default: a free one]",
)
@pass_app
def command(
    app: App,
    duration: float | None,
    brokers: int,
    consumers: int,
    no_tui: bool,
    server: str,
    serve: bool,
    port: int | None,
) -> None:
    """Run a self-contained demo: a local Redis, broker processes, and the watch view.

    Starts its own Redis on a free loopback port (never the one in --url), launches
    broker processes that heartbeat on every simulated read, then hangs one consumer,
    crashes one broker, stops one consumer cleanly and starts a replacement broker,
    so you see consumers go active, stale and expired and the counts change.
    The global --ttl-ms (or REDIS_PRESENCE_TTL_MS) sets its heartbeat budget, 2000 ms
    unless given, between 100 and 60000. Everything it started is stopped on exit,
    Ctrl-C included.

    \b
    Examples:
      redis-presence demo
      redis-presence demo --brokers 4 --consumers 2 --duration 30
      redis-presence demo --no-tui --ttl-ms 1000
      redis-presence demo --serve
    """
    from ..demo import run_demo

    ttl_ms = app.ttl_ms if app.ttl_ms is not None else DEFAULT_DEMO_TTL_MS
    low, high = DEMO_TTL_RANGE_MS
    if not low <= ttl_ms <= high:
        raise UsageProblem(
            f"Invalid value for '--ttl-ms': the demo needs {low} to {high} ms, got {ttl_ms} "
            "(see 'redis-presence demo --help')"
        )
    if port is not None and not serve:
        raise UsageProblem("'--port' is the dashboard's: it needs '--serve'")
    if serve:
        try:  # the web extra is optional: say so before starting anything
            import redis_presence.web.server  # noqa: F401
        except ImportError as exc:
            raise web_extra_missing("demo --serve", exc) from None
        if duration is None:
            duration = SERVE_DURATION_S
    run_demo(
        app.console,
        duration_s=duration,
        brokers=brokers,
        consumers=consumers,
        ttl_ms=ttl_ms,
        tui=not no_tui,
        server_choice=server,  # type: ignore[arg-type]
        serve_port=(port or 0) if serve else None,
    )

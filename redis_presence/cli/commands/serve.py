"""`redis-presence serve`: the dashboard, JSON API and Prometheus metrics over HTTP."""

from __future__ import annotations

import ipaddress
import os

import click

from redis_presence.model import DEFAULT_RETENTION_TTLS

from ..app import App, pass_app
from ..errors import CliError, UsageProblem
from ..options import Duration

DEFAULT_PORT = 8321


def is_loopback(host: str) -> bool:
    """Whether `host` names only this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def web_extra_missing(command: str, exc: ImportError) -> CliError:
    """The one-line error of a command that needs the optional web extra."""
    return CliError(
        f"redis-presence {command} needs the web extra: pip install 'redis-presence[web]' "
        f"(missing: {exc.name})"
    )


@click.command("serve", short_help="Dashboard, JSON API and Prometheus metrics over HTTP.")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    envvar="REDIS_PRESENCE_HOST",
    help="Address to listen on (loopback by default). Env: REDIS_PRESENCE_HOST.",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    envvar="REDIS_PRESENCE_PORT",
    help="TCP port (0 picks a free one and prints it). Env: REDIS_PRESENCE_PORT.",
)
@click.option(
    "--auth-token",
    envvar="REDIS_PRESENCE_AUTH_TOKEN",
    metavar="TOKEN",
    help="Require this token on every route but /healthz: 'Authorization: Bearer TOKEN', or "
    "as the HTTP Basic password in a browser. Prefer the environment: "
    "REDIS_PRESENCE_AUTH_TOKEN.",
)
@click.option(
    "--drain-token",
    envvar="REDIS_PRESENCE_DRAIN_TOKEN",
    metavar="TOKEN",
    help="Offer 'Ask it to drain' on consumer pages (POST /api/v1/drain, the writer's role): "
    "a request must carry this second token in its X-Presence-Drain-Token header. Off by "
    "default; not with --read-only; must differ from --auth-token. Prefer the environment: "
    "REDIS_PRESENCE_DRAIN_TOKEN.",
)
@click.option(
    "--per-consumer-metrics",
    is_flag=True,
    envvar="REDIS_PRESENCE_PER_CONSUMER_METRICS",
    help="Also export one series per consumer (reads every consumer at each scrape; names "
    "are unbounded). Env: REDIS_PRESENCE_PER_CONSUMER_METRICS=1.",
)
@click.option(
    "--stuck-metrics",
    is_flag=True,
    envvar="REDIS_PRESENCE_STUCK_METRICS",
    help="Count stuck consumers per group in /metrics (reads every consumer at each "
    "scrape; implied by --per-consumer-metrics). Env: REDIS_PRESENCE_STUCK_METRICS=1.",
)
@click.option(
    "--capacity-metrics/--no-capacity-metrics",
    default=False,
    show_default=True,
    envvar="REDIS_PRESENCE_CAPACITY_METRICS",
    help="Read each group's live consumers' values at each scrape (two commands a group "
    "more): capacity, free slots, draining and duplicates per group. Without it a scrape "
    "reads the stale consumers' values only, so a drained consumer that left still raises "
    "no alert. Env: REDIS_PRESENCE_CAPACITY_METRICS=1.",
)
@click.option(
    "--log-level",
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
    default="info",
    show_default=True,
    help="Log level of the service and its access log.",
)
@click.option(
    "--max-streams",
    type=click.IntRange(1, 1_000_000),
    default=1_000,
    show_default=True,
    envvar="REDIS_PRESENCE_MAX_STREAMS",
    help="Open event streams (/api/v1/events, one per open dashboard page) at most; past "
    "them a new one is a 503 with Retry-After. Env: REDIS_PRESENCE_MAX_STREAMS.",
)
@click.option(
    "--max-connections",
    type=click.IntRange(1, 100_000),
    default=100,
    show_default=True,
    envvar="REDIS_PRESENCE_MAX_CONNECTIONS",
    help="Connections to Redis at most (a redis:// URL's ?max_connections= wins). "
    "Env: REDIS_PRESENCE_MAX_CONNECTIONS.",
)
@click.option(
    "--pool-timeout",
    type=click.FloatRange(0, 3600, min_open=True),
    default=5.0,
    show_default=True,
    metavar="SECONDS",
    envvar="REDIS_PRESENCE_POOL_TIMEOUT",
    help="How long a read waits for a free connection when all are in use (then 503 "
    "service_busy, not 'Redis unreachable'). Env: REDIS_PRESENCE_POOL_TIMEOUT.",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="Also answer to this Host name (repeatable; '*.example.com' for its subdomains, "
    "'*' for any). Always answered: localhost, 127.0.0.1, [::1], --host and the address a "
    "request arrives at; any other Host gets 421. Env (without --allowed-host): "
    "REDIS_PRESENCE_ALLOWED_HOSTS, separated by commas or spaces.",
)
@click.option(
    "--prune-every",
    type=Duration(least_ms=1_000),
    metavar="DURATION",
    envvar="REDIS_PRESENCE_PRUNE_EVERY",
    help="Automatic removal (off by default): prune every DURATION (1m, 5m) the consumers "
    "expired for longer than --prune-retention. Writes, so not with --read-only. "
    "Env: REDIS_PRESENCE_PRUNE_EVERY.",
)
@click.option(
    "--prune-retention",
    type=Duration(),
    metavar="DURATION",
    envvar="REDIS_PRESENCE_PRUNE_RETENTION",
    help=f"With --prune-every: keep expired consumers this long past expiry (default: "
    f"{DEFAULT_RETENTION_TTLS} TTLs of each group). Env: REDIS_PRESENCE_PRUNE_RETENTION.",
)
@click.option("--read-cache-ms", type=click.IntRange(0, 60_000), default=500, hidden=True)
@click.option("--live-interval-ms", type=click.IntRange(50, 60_000), default=500, hidden=True)
@pass_app
def command(
    app: App,
    host: str,
    port: int,
    auth_token: str | None,
    drain_token: str | None,
    per_consumer_metrics: bool,
    stuck_metrics: bool,
    capacity_metrics: bool,
    log_level: str,
    max_streams: int,
    max_connections: int,
    pool_timeout: float,
    allowed_hosts: tuple[str, ...],
    prune_every: int | None,
    prune_retention: int | None,
    read_cache_ms: int,
    live_interval_ms: int,
) -> None:
    """Serve the dashboard (/), the JSON API (/api/v1/), Prometheus metrics (/metrics) and
    health probes (/healthz, /readyz). Read-only: nothing it serves writes to Redis, unless
    --prune-every asks it to remove expired consumers (automatic removal) or --drain-token
    lets a person with that token ask a consumer to drain.

    The service starts and answers while Redis is down (/readyz says 503) and recovers by
    itself when Redis returns.

    \b
    Examples:
      redis-presence serve
      REDIS_PRESENCE_AUTH_TOKEN=s3cret redis-presence serve --host 0.0.0.0
      redis-presence --url redis://replica.internal:6379/0 --read-only serve --port 9000
    """
    from redis_presence.redaction import redact

    try:  # the web extra is optional: import it only when serving
        from redis_presence.web.auth import check_token
        from redis_presence.web.security import ALLOWED_HOSTS_ENV, parse_allowed_hosts
        from redis_presence.web.server import bind, run, url_of
        from redis_presence.web.service import WebConfig
    except ImportError as exc:
        raise web_extra_missing("serve", exc) from None
    if prune_every is not None and app.read_only:
        raise UsageProblem(
            "--prune-every writes to Redis, but --read-only (or REDIS_PRESENCE_READ_ONLY) is "
            "set: a read-only serve cannot prune"
        )
    if prune_retention is not None and prune_every is None:
        raise UsageProblem("--prune-retention needs --prune-every")
    if auth_token:
        try:
            check_token(auth_token)
        except ValueError as exc:
            raise UsageProblem(f"--auth-token / REDIS_PRESENCE_AUTH_TOKEN: {exc}") from None
    if drain_token:
        from redis_presence.web.drain import check_drain_token

        try:
            check_drain_token(drain_token, auth_token=auth_token or None, read_only=app.read_only)
        except ValueError as exc:
            raise UsageProblem(f"--drain-token / REDIS_PRESENCE_DRAIN_TOKEN: {exc}") from None
    config = WebConfig(
        url=app.url,
        prefix=app.prefix,
        ttl_ms=app.ttl_ms,  # None (not given): each group's shared TTL, re-read as it changes
        read_only=app.read_only,
        auth_token=auth_token or None,
        drain_token=drain_token or None,
        per_consumer_metrics=per_consumer_metrics,
        stuck_metrics=stuck_metrics,
        capacity_metrics=capacity_metrics,
        now_ns=app.now_ns,
        read_cache_s=read_cache_ms / 1000,
        live_interval_s=live_interval_ms / 1000,
        max_streams=max_streams,
        max_connections=max_connections,
        pool_timeout_s=pool_timeout,
        prune_every_s=None if prune_every is None else prune_every / 1000,
        prune_retention_ms=prune_retention,
        allowed_hosts=(
            host,
            *(allowed_hosts or parse_allowed_hosts(os.environ.get(ALLOWED_HOSTS_ENV, ""))),
        ),
    )
    config.open_registry()  # a malformed URL or option fails here, before anything listens
    try:
        sock = bind(host, port)
    except OSError as exc:
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    if not auth_token and not is_loopback(host):
        click.echo(
            f"warning: listening on {host} without --auth-token: anyone who can reach this "
            "address sees every queue, group and consumer name",
            err=True,
        )
    ttl_words = "TTL shared" if app.ttl_ms is None else app.ttl_words(app.ttl_ms, app.ttl_from)
    click.echo(
        f"redis-presence serve: serving {url_of(sock)} (Redis {redact(app.url)}, prefix "
        f"{app.prefix!r}, {ttl_words}, "
        f"{'auth token required' if auth_token else 'no auth token'}"
        f"{', drain requests on' if drain_token else ''}"
        f"{'' if prune_every is None else f', pruning every {prune_every} ms'})",
        err=True,
    )
    try:
        run(config, sock, log_level=log_level)
    finally:
        sock.close()

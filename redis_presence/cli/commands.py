"""The `redis-presence` commands: each reads the registry once and hands rows to `render`."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import click
from rich.console import Console

from redis_presence import RedisPresenceRegistry
from redis_presence.model import DEFAULT_PRESENCE_TTL_MS, ConsumerPresence, PresenceState
from redis_presence.protocol import PresenceRegistry
from redis_presence.validation import MAX_LEASE_COUNT, MAX_TTL_MS

from . import render
from .demo import beat_interval_s, interrupt_on_sigterm, run_broker, run_demo
from .embedded import SERVER_CHOICES
from .errors import ReadOnlyRefused, one_line_errors
from .watch import run_watch

DEFAULT_URL = "redis://localhost:6379/0"
CONNECT_TIMEOUT_S = 5.0
"""How long the CLI waits for a TCP connection before calling Redis unreachable."""
REPLY_TIMEOUT_S = 30.0
"""How long the CLI waits for a reply (a server that accepts but never answers)."""


RegistryFactory = Callable[[str, str, bool], PresenceRegistry]
"""`(url, prefix, read_only) -> registry`; tests pass their own as `obj=` to click's runner."""

READ_ONLY_COMMANDS = "ls, counts, watch and prune --dry-run"
"""What `--read-only` allows (named in the refusal of every other command)."""


def open_redis_registry(url: str, prefix: str, read_only: bool) -> PresenceRegistry:
    """The default factory: a `RedisPresenceRegistry` for `url` (connects on first use);
    `read_only` runs reads with EVALSHA_RO and refuses writes."""
    return RedisPresenceRegistry.from_url(
        url,
        prefix=prefix,
        read_only=read_only,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        socket_timeout=REPLY_TIMEOUT_S,
    )


@dataclass
class App:
    """The global options, and the registry opened from them on first use."""

    url: str
    prefix: str
    ttl_ms: int
    read_only: bool
    now_ns: int | None
    factory: RegistryFactory
    ctx: click.Context
    console: Console = field(default_factory=lambda: Console(highlight=False))
    _registry: PresenceRegistry | None = field(default=None, repr=False)

    def registry(self) -> PresenceRegistry:
        """The registry to read from (opened read-only under `--read-only`)."""
        if self._registry is None:
            self._registry = self.factory(self.url, self.prefix, self.read_only)
            close = getattr(self._registry, "close", None)
            if callable(close):
                self.ctx.call_on_close(close)
        return self._registry

    def writer(self, command: str) -> PresenceRegistry:
        """The registry for a command that writes; under `--read-only`, one refusal line
        before anything is opened or sent."""
        if self.read_only:
            raise ReadOnlyRefused(
                f"{command} writes to Redis, but --read-only (or REDIS_PRESENCE_READ_ONLY) "
                f"is set: only {READ_ONLY_COMMANDS} run read-only"
            )
        return self.registry()

    def snapshot(self) -> list[ConsumerPresence]:
        return self.registry().snapshot(now_ns=self.now_ns, ttl_ms=self.ttl_ms)

    def emit(self, text: str) -> None:
        render.write(self.console, text)


class PresenceGroup(click.Group):
    """Every error below it becomes one line; `snapshot` is an alias of `ls`."""

    aliases = {"snapshot": "ls"}  # noqa: RUF012

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        with one_line_errors():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        app = ctx.obj if isinstance(ctx.obj, App) else None
        with one_line_errors(app.url if app else None):
            return super().invoke(ctx)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, self.aliases.get(cmd_name, cmd_name))


pass_app = click.make_pass_decorator(App)

STATE_CHOICE = click.Choice([s.value for s in PresenceState], case_sensitive=False)
FORMAT_OPTION = click.option(
    "--format",
    "fmt",
    type=click.Choice(render.FORMATS, case_sensitive=False),
    default="table",
    show_default=True,
    help="Output format; json and csv carry the ConsumerPresence field names.",
)


@click.group(
    cls=PresenceGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.option(
    "--url",
    envvar=["REDIS_PRESENCE_URL", "REDIS_URL"],
    default=DEFAULT_URL,
    show_default=True,
    metavar="URL",
    help="Redis URL: redis://, rediss://, unix://, redis+cluster:// or redis+sentinel://. "
    "Env: REDIS_PRESENCE_URL, then REDIS_URL.",
)
@click.option(
    "--prefix",
    envvar="REDIS_PRESENCE_PREFIX",
    default="presence",
    show_default=True,
    help="Key prefix the brokers use. Env: REDIS_PRESENCE_PREFIX.",
)
@click.option(
    "--ttl-ms",
    envvar="REDIS_PRESENCE_TTL_MS",
    type=click.IntRange(1, MAX_TTL_MS),
    default=DEFAULT_PRESENCE_TTL_MS,
    show_default=True,
    help="Heartbeat budget: active up to TTL, stale up to 2 x TTL, then expired. "
    "Env: REDIS_PRESENCE_TTL_MS.",
)
@click.option(
    "--read-only",
    is_flag=True,
    envvar="REDIS_PRESENCE_READ_ONLY",
    help="Only read, with read-only scripts (EVALSHA_RO, Redis 7+): for replicas and "
    f"read-only ACL users. Allows {READ_ONLY_COMMANDS}. Env: REDIS_PRESENCE_READ_ONLY=1.",
)
@click.option("--now-ns", type=click.IntRange(0), hidden=True, help="Fixed clock (tests).")
@click.version_option(package_name="redis-presence", message="%(prog)s %(version)s")
@click.pass_context
def cli(
    ctx: click.Context, url: str, prefix: str, ttl_ms: int, read_only: bool, now_ns: int | None
) -> None:
    """See which consumers are reading which queues, shared through Redis.

    Ages and states use the Redis server's clock, so every broker and every
    operator agrees on them.

    \b
    Examples:
      redis-presence ls
      redis-presence --url redis://:secret@redis.internal:6379/0 counts
      REDIS_PRESENCE_URL=redis://localhost:6379/0 redis-presence watch
      redis-presence --url redis://replica.internal:6379/0 --read-only counts
      redis-presence demo
    """
    factory = ctx.obj if callable(ctx.obj) else open_redis_registry
    ctx.obj = App(url, prefix, ttl_ms, read_only, now_ns, factory, ctx)


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


@cli.command("ls", short_help="List consumers: state, last seen, leases (alias: snapshot).")
@click.option("--queue", help="Only this queue (exact name).")
@click.option("--group", help="Only this consumer group (exact name).")
@click.option(
    "--state", "states", type=STATE_CHOICE, multiple=True, help="Only these states (repeatable)."
)
@FORMAT_OPTION
@pass_app
def ls_command(
    app: App, queue: str | None, group: str | None, states: tuple[str, ...], fmt: str
) -> None:
    """List tracked consumers with their state, age and leases (alias: snapshot).

    \b
    Examples:
      redis-presence ls
      redis-presence ls --queue orders --state stale --state expired
      redis-presence ls --format json | jq -r '.[] | select(.state != "active") | .consumer'
    """
    rows = _filter(app.snapshot(), queue, group, states)
    app.emit(render.render_consumers(rows, fmt.lower(), render.Styler(app.console)))


@cli.command("counts", short_help="Active consumers per queue and group (0 when none).")
@FORMAT_OPTION
@pass_app
def counts_command(app: App, fmt: str) -> None:
    """Active consumers per (queue, group); tracked groups with none show 0.

    \b
    Examples:
      redis-presence counts
      redis-presence counts --format csv
    """
    registry = app.registry()
    counts = registry.count_active_by_group(now_ns=app.now_ns, ttl_ms=app.ttl_ms)
    groups = {(row.queue, row.group): 0 for row in app.snapshot()}
    app.emit(render.render_counts(groups | counts, fmt.lower(), render.Styler(app.console)))


@cli.command("watch", short_help="Live table marking joined, went stale, expired, left.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.05, max=3600),
    default=1.0,
    show_default=True,
    help="Seconds between refreshes.",
)
@click.option("--iterations", type=click.IntRange(min=1), hidden=True)
@pass_app
def watch_command(app: App, interval: float, iterations: int | None) -> None:
    """Live table that marks who joined, went stale, expired or left. Ctrl-C quits.

    Each refresh reads one snapshot; counts come from that same snapshot.

    \b
    Examples:
      redis-presence watch
      redis-presence --ttl-ms 5000 watch --interval 0.5
    """
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


@cli.command("prune", short_help="Remove expired consumers (--dry-run lists them).")
@click.option("--dry-run", is_flag=True, help="List the expired consumers; remove nothing.")
@FORMAT_OPTION
@pass_app
def prune_command(app: App, dry_run: bool, fmt: str) -> None:
    """Remove expired consumers and print how many.

    \b
    Examples:
      redis-presence prune --dry-run
      redis-presence prune
    """
    if dry_run:
        doomed = [row for row in app.snapshot() if row.state is PresenceState.EXPIRED]
        app.emit(render.render_consumers(doomed, fmt.lower(), render.Styler(app.console)))
        if fmt.lower() == "table":
            app.emit(f"would prune {len(doomed)} expired consumer(s)\n")
        return
    removed = app.writer("prune").prune_expired(now_ns=app.now_ns, ttl_ms=app.ttl_ms)
    app.emit(f"pruned {removed} expired consumer(s)\n")


@cli.command("heartbeat", short_help="Record one heartbeat for a consumer.")
@click.argument("queue")
@click.argument("group")
@click.argument("consumer")
@click.option(
    "--lease-count",
    type=click.IntRange(0, MAX_LEASE_COUNT),
    default=0,
    show_default=True,
    help="In-flight leases the consumer holds.",
)
@pass_app
def heartbeat_command(app: App, queue: str, group: str, consumer: str, lease_count: int) -> None:
    """Record one heartbeat for a consumer (for scripts, tests and manual repair).

    \b
    Examples:
      redis-presence heartbeat orders billing worker-7
      redis-presence heartbeat orders billing worker-7 --lease-count 3
    """
    registry = app.writer("heartbeat")
    registry.heartbeat(queue, group, consumer, lease_count=lease_count, now_ns=app.now_ns)
    app.emit(f"heartbeat recorded: {_who(queue, group, consumer)}, {lease_count} lease(s)\n")


@cli.command("deregister", short_help="Forget one consumer, as a graceful shutdown does.")
@click.argument("queue")
@click.argument("group")
@click.argument("consumer")
@pass_app
def deregister_command(app: App, queue: str, group: str, consumer: str) -> None:
    """Forget one consumer, as a graceful shutdown would (exit 0 either way).

    \b
    Examples:
      redis-presence deregister orders billing worker-7
    """
    existed = app.writer("deregister").deregister(queue, group, consumer)
    outcome = "deregistered" if existed else "was not tracked"
    app.emit(f"{_who(queue, group, consumer)} {outcome}\n")


def _who(queue: str, group: str, consumer: str) -> str:
    return (
        f"consumer {render.shown(consumer)!r} "
        f"(queue {render.shown(queue)!r}, group {render.shown(group)!r})"
    )


@cli.command("demo", short_help="Self-contained demo: local Redis, brokers, live view.")
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
    default=2000,
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
def demo_command(
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
    run_demo(
        app.console,
        duration_s=duration,
        brokers=brokers,
        consumers=consumers,
        ttl_ms=demo_ttl_ms,
        tui=not no_tui,
        server_choice=server,  # type: ignore[arg-type]
    )


@cli.command("demo-broker", hidden=True)
@click.option("--name", required=True, help="Broker name; consumers are NAME-c1, NAME-c2, ...")
@click.option("--consumers", type=click.IntRange(1, 1000), default=3, show_default=True)
@click.option("--offset", type=click.IntRange(0), help="First demo group (default from NAME).")
@click.option("--stdin-control", is_flag=True, help="Obey commands on stdin; quit at EOF.")
@pass_app
def demo_broker_command(
    app: App, name: str, consumers: int, offset: int | None, stdin_control: bool
) -> None:
    """One demo broker: simulated consumers heartbeating until stopped.

    \b
    Examples:
      redis-presence --url redis://redis:6379/0 demo-broker --name broker-a --consumers 3
    """
    registry = app.writer("demo-broker")
    with interrupt_on_sigterm(), contextlib.suppress(KeyboardInterrupt):
        run_broker(
            registry,
            name,
            consumers,
            beat_s=beat_interval_s(app.ttl_ms),
            offset=offset,
            control=sys.stdin if stdin_control else None,
            log=lambda line: click.echo(line, err=True),
        )

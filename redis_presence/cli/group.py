"""The `redis-presence` click group: the global options, one-line errors, aliases, and the
commands listed in `commands.COMMANDS`."""

from __future__ import annotations

import importlib
from typing import Any

import click

from redis_presence.model import DEFAULT_PRESENCE_TTL_MS
from redis_presence.validation import MAX_TTL_MS

from .app import DEFAULT_URL, READ_ONLY_COMMANDS, App, open_redis_registry
from .commands import COMMANDS
from .errors import one_line_errors


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
    help="Redis URL (redis://, rediss:// or unix://, with user and password as in redis-py). "
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


for _name in COMMANDS:
    cli.add_command(importlib.import_module(f"{__package__}.commands.{_name}").command)

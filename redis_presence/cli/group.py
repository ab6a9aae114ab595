"""The `redis-presence` click group: the global options (accepted before or after the
command), one-line errors, aliases, and the commands listed in `commands.COMMANDS`."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import click
from click.core import ParameterSource

from ..__about__ import __version__
from .app import App
from .commands import COMMANDS
from .errors import one_line_errors
from .options import GLOBAL_NAMES, global_options


def _override(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    """A global option given after the command: it replaces the group's value."""
    if (
        param.name is None
        or ctx.get_parameter_source(param.name) is not ParameterSource.COMMANDLINE
    ):
        return
    app = ctx.find_object(App)
    if app is not None:
        app.set_option(param.name, value)


def after_command_options() -> list[click.Option]:
    """Hidden copies of the global options for a command, so that `ls --url URL` works like
    `--url URL ls` (the environment is read once, by the group)."""
    copies = []
    for option in global_options():
        copies.append(
            click.Option(
                [*option.opts, str(option.name)],
                type=option.type,
                is_flag=option.is_flag,
                default=None,
                expose_value=False,
                hidden=True,
                callback=_override,
            )
        )
    return copies


GLOBALS_EPILOG = (
    f"Global options ({', '.join(GLOBAL_NAMES)}) also work after the command; "
    "see 'redis-presence --help'."
)


class PresenceGroup(click.Group):
    """Every error below it becomes one line; `snapshot` is an alias of `ls`; every command
    added to it also accepts the global options."""

    aliases = {"snapshot": "ls"}  # noqa: RUF012

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        _accept_global_options(cmd)
        super().add_command(cmd, name)

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
        try:
            with data_warnings_on_one_line():
                return super().invoke(ctx)
        except Exception:
            # Read the App at failure: options after the command may have changed it.
            app = ctx.obj if isinstance(ctx.obj, App) else None
            with one_line_errors(app.url if app else None, app.timeout_s if app else None):
                raise

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, self.aliases.get(cmd_name, cmd_name))


@contextmanager
def data_warnings_on_one_line() -> Iterator[None]:
    """Show what a read set aside (`PresenceDataWarning`) as one line on stderr, once a
    command, the way errors are shown; other warnings keep Python's own display."""
    with warnings.catch_warnings():
        # By the message and the class name: importing the class loads the driver, which
        # `--help` must not.
        warnings.filterwarnings("always", message="redis-presence set aside ")
        shown = warnings.showwarning
        said: set[str] = set()

        def show(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
            if category.__name__ == "PresenceDataWarning":
                if str(message) not in said:
                    said.add(str(message))
                    click.echo(f"redis-presence: warning: {message}", err=True)
            else:
                shown(message, category, *args, **kwargs)

        warnings.showwarning = show
        yield


def _accept_global_options(cmd: click.Command) -> None:
    """Give `cmd` (and the commands of a group) hidden copies of the global options."""
    taken = {opt for param in cmd.params for opt in getattr(param, "opts", ())}
    cmd.params.extend(o for o in after_command_options() if not taken.intersection(o.opts))
    if cmd.epilog is None and not cmd.hidden:
        cmd.epilog = GLOBALS_EPILOG
    if isinstance(cmd, click.Group):
        for sub in cmd.commands.values():
            _accept_global_options(sub)


@click.group(
    cls=PresenceGroup,
    params=global_options(),
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, message="%(prog)s %(version)s")
@click.pass_context
def cli(
    ctx: click.Context,
    url: str,
    prefix: str,
    ttl_ms: int | None,
    timeout_s: float,
    read_only: bool,
    now_ns: int | None,
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
      redis-presence ls --url redis+cluster://10.0.0.5:7000 --state expired
      redis-presence demo
    """
    factory = ctx.obj if callable(ctx.obj) else None
    from_env = ctx.get_parameter_source("ttl_ms") is ParameterSource.ENVIRONMENT
    ttl_from = "REDIS_PRESENCE_TTL_MS" if from_env else "--ttl-ms"
    ctx.obj = App(url, prefix, ttl_ms, read_only, now_ns, factory, ctx, timeout_s, ttl_from)


for _name in COMMANDS:
    cli.add_command(importlib.import_module(f"{__package__}.commands.{_name}").command)

"""What every command receives: the global options' values, the registry opened from them,
and the way out to the terminal.

This module imports neither redis-py nor rich at the top: `redis-presence --help` loads it
(and every command module), and opening a registry or a console waits until a command needs
one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import click

from .errors import ReadOnlyRefused

if TYPE_CHECKING:
    from rich.console import Console

    from redis_presence.model import ConsumerPresence
    from redis_presence.protocol import PresenceRegistry

DEFAULT_URL = "redis://localhost:6379/0"
CONNECT_TIMEOUT_S = 5.0
"""How long the CLI waits for a TCP connection before calling Redis unreachable."""
REPLY_TIMEOUT_S = 30.0
"""How long the CLI waits for a reply (a server that accepts but never answers)."""

RegistryFactory = Callable[[str, str, bool], "PresenceRegistry"]
"""`(url, prefix, read_only) -> registry`; tests pass their own as `obj=` to click's runner."""

READ_ONLY_COMMANDS = "ls, counts, watch and prune --dry-run"
"""What `--read-only` allows (named in the refusal of every other command)."""


def open_redis_registry(url: str, prefix: str, read_only: bool) -> PresenceRegistry:
    """The default factory: a `RedisPresenceRegistry` for `url` (connects on first use);
    `read_only` runs reads with EVALSHA_RO and refuses writes."""
    from redis_presence.redis import RedisPresenceRegistry

    return RedisPresenceRegistry.from_url(
        url,
        prefix=prefix,
        read_only=read_only,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        socket_timeout=REPLY_TIMEOUT_S,
    )


@dataclass
class App:
    """The global options, and the registry and console opened from them on first use."""

    url: str
    prefix: str
    ttl_ms: int
    read_only: bool
    now_ns: int | None
    factory: RegistryFactory
    ctx: click.Context
    _registry: PresenceRegistry | None = field(default=None, repr=False)
    _console: Console | None = field(default=None, repr=False)

    @property
    def console(self) -> Console:
        """The terminal (rich decides colour from it, `NO_COLOR` and `FORCE_COLOR`)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(highlight=False)
        return self._console

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
        """Every tracked consumer at the global clock and TTL."""
        return self.registry().snapshot(now_ns=self.now_ns, ttl_ms=self.ttl_ms)

    def emit(self, text: str) -> None:
        """Write already-rendered text to the terminal."""
        from . import render

        render.write(self.console, text)

    def show_consumers(self, rows: list[ConsumerPresence], fmt: str) -> None:
        """Consumers as a table, JSON or CSV."""
        from . import render

        self.emit(render.render_consumers(rows, fmt.lower(), render.Styler(self.console)))

    def show_counts(self, counts: Mapping[tuple[str, str], int], fmt: str) -> None:
        """Active consumers per `(queue, group)` as a table, JSON or CSV."""
        from . import render

        self.emit(render.render_counts(counts, fmt.lower(), render.Styler(self.console)))


pass_app = click.make_pass_decorator(App)
"""Hands a command the `App` that the group built from the global options."""

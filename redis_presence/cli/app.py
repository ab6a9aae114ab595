"""What every command receives: the global options' values, the registry opened from them,
the reads it makes (through `reads`), and the way out to the terminal.

This module imports neither redis-py nor rich at the top: `redis-presence --help` loads it
(and every command module), and opening a registry or a console waits until a command needs
one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from . import reads
from .errors import ReadOnlyRefused
from .options import DEFAULT_TIMEOUT_S, READ_ONLY_COMMANDS

if TYPE_CHECKING:
    from rich.console import Console

    from redis_presence.contract import PresenceRegistry
    from redis_presence.model import ConsumerPresence

HOW_TO_STORE = "'redis-presence ttl set' stores one"

OWN_TTLS_NAMED = 3
"""Most groups with a TTL of their own that the TTL note names one by one."""

RegistryFactory = Callable[[str, str, bool], "PresenceRegistry"]
"""`(url, prefix, read_only) -> registry`; tests pass their own as `obj=` to click's runner."""


def open_redis_registry(
    url: str, prefix: str, read_only: bool, timeout_s: float = DEFAULT_TIMEOUT_S
) -> PresenceRegistry:
    """The default factory: a `RedisPresenceRegistry` for `url` (connects on first use) that
    waits `timeout_s` to connect and for each reply; `read_only` runs reads with EVALSHA_RO
    and refuses writes."""
    from redis_presence.registry import RedisPresenceRegistry

    return RedisPresenceRegistry.from_url(
        url,
        prefix=prefix,
        read_only=read_only,
        socket_connect_timeout=timeout_s,
        socket_timeout=timeout_s,
    )


@dataclass
class App:
    """The global options, and the registry and console opened from them on first use."""

    url: str
    prefix: str
    ttl_ms: int | None
    """`--ttl-ms`; None (not given): the TTL the brokers share (`registry.ttl`)."""
    read_only: bool
    now_ns: int | None
    factory: RegistryFactory | None
    """None: `open_redis_registry` with `timeout_s`."""
    ctx: click.Context
    timeout_s: float = DEFAULT_TIMEOUT_S
    ttl_from: str = "--ttl-ms"
    """What gave `ttl_ms`: the option, or its variable (`REDIS_PRESENCE_TTL_MS`)."""
    _registry: PresenceRegistry | None = field(default=None, repr=False)
    _console: Console | None = field(default=None, repr=False)

    def set_option(self, name: str, value: Any) -> None:
        """A global option given after the command."""
        setattr(self, name, value)
        if name == "ttl_ms":
            self.ttl_from = "--ttl-ms"

    @property
    def console(self) -> Console:
        """The terminal (rich decides colour from it, `NO_COLOR` and `FORCE_COLOR`)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(highlight=False)
        return self._console

    @property
    def where(self) -> str:
        """`prefix 'presence' at redis://:***@host:6379/0`: what was read (no password)."""
        from redis_presence.redaction import redact

        return f"prefix {self.prefix!r} at {redact(self.url)}"

    def registry(self) -> PresenceRegistry:
        """The registry to read from (opened read-only under `--read-only`)."""
        if self._registry is None:
            if self.factory is None:
                self._registry = open_redis_registry(
                    self.url, self.prefix, self.read_only, self.timeout_s
                )
            else:
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

    # ------------------------------------------------------------ the TTL

    def ttl_in_use(self, queue: str | None = None, group: str | None = None) -> tuple[int, str]:
        """The TTL a read of one group (`queue` and `group`), or of the prefix, classifies
        with, and where it came from: `ttl_from`, ``"group"``, ``"prefix"`` or
        ``"default"`` (see `ttl_words`)."""
        if self.ttl_ms is not None:
            return self.ttl_ms, self.ttl_from
        if queue is not None and group is not None:
            return self.registry().ttl_source(queue, group)
        return self.registry().ttl_source()

    def ttl_words(
        self,
        ttl_ms: int,
        source: str,
        queue: str | None = None,
        group: str | None = None,
        *,
        short: bool = False,
        own_known: bool = False,
    ) -> str:
        """`TTL 5000 ms (stored for prefix 'presence'; ...)`: the TTL in use and where it came
        from (`short`: `TTL 5000 ms (stored for the prefix)`, for a title). For a read of
        many groups, it says that a group's own TTL wins unless `own_known` (the groups that
        have one were named apart: `ttl_lines`)."""
        if short:
            brief = {"group": "stored for the group", "prefix": "stored for the prefix"}
            return f"TTL {ttl_ms} ms ({brief.get(source, source)})"
        many = (queue is None or group is None) and not own_known
        if source == "group":
            where = f"stored for queue {queue!r}, group {group!r}"
        elif source == "prefix":
            where = f"stored for prefix {self.prefix!r}" + ("; a group's own wins" if many else "")
        elif source == "default":
            where = "the default; " + ("a group's own wins" if many else HOW_TO_STORE)
        else:
            where = source
        return f"TTL {ttl_ms} ms ({where})"

    def ttl_lines(
        self,
        ttl_ms: int,
        source: str,
        queue: str | None,
        group: str | None,
        own: Mapping[tuple[str, str], int] | None = None,
    ) -> list[str]:
        """What `note_ttl` says: with `own` (the groups read that have a TTL of their own),
        each one's TTL (by value past OWN_TTLS_NAMED groups), then the TTL of the others."""
        if own is None:
            return [self.ttl_words(ttl_ms, source, queue, group)]
        from collections import Counter

        from .render import plural

        if len(own) <= OWN_TTLS_NAMED:
            lines = [
                f"TTL {own_ms} ms for queue {q!r} group {g!r} (its own)"
                for (q, g), own_ms in sorted(own.items())
            ]
        else:
            lines = [
                f"TTL {own_ms} ms for {plural(n, 'group')} (their own)"
                for own_ms, n in sorted(Counter(own.values()).items())
            ]
        words = self.ttl_words(ttl_ms, source, queue, group, own_known=True)
        if own:  # kept short: the line before it is about the groups' own
            words = words.replace(f"; {HOW_TO_STORE}", "")
            words = words.replace(" ms (", " ms for the other groups (", 1)
        return [*lines, words]

    def note_ttl(
        self,
        queue: str | None = None,
        group: str | None = None,
        groups: Iterable[tuple[str, str]] | None = None,
    ) -> tuple[int, str]:
        """`ttl_in_use`, said on stderr (lines which stdout's formats never carry); `groups`,
        the groups a read of many used, are each said with the TTL they were read with."""
        ttl, source = self.ttl_in_use(queue, group)
        own: dict[tuple[str, str], int] | None = None
        if groups is not None and self.ttl_ms is None and (queue is None or group is None):
            sources = self.registry().ttl_sources(groups)
            own = {pair: ms for pair, (ms, where) in sources.items() if where == "group"}
        for line in self.ttl_lines(ttl, source, queue, group, own):
            self.note(line)
        return ttl, source

    def say_ttl(self, ttl_ms: int, source: str, queue: str | None, group: str | None) -> None:
        """The line of `note_ttl`, for a TTL already read."""
        self.note(self.ttl_words(ttl_ms, source, queue, group))

    def note(self, text: str) -> None:
        """`redis-presence: TEXT` on stderr, wrapped at 80 columns (names stay whole)."""
        from .render import LINE_WIDTH, wrapped

        click.echo(wrapped(text, LINE_WIDTH, indent=4, first="redis-presence: "), err=True)

    # ------------------------------------------------------------ reads

    def clock_ns(self) -> int:
        """The clock of this command's reads: `--now-ns`, else the server's."""
        return self.registry().clock_ns() if self.now_ns is None else self.now_ns

    def consumers(
        self,
        selection: reads.Selection = reads.EVERYTHING,
        *,
        states: bool = True,
        now_ns: int | None = None,
        with_meta: bool = False,
    ) -> list[ConsumerPresence]:
        """The selected consumers at `now_ns` (else the global clock) and the global TTL
        (`with_meta`: and their metadata)."""
        return reads.consumers(
            self.registry(),
            selection,
            now_ns=self.now_ns if now_ns is None else now_ns,
            ttl_ms=self.ttl_ms,
            states=states,
            with_meta=with_meta,
        )

    def active_counts(
        self, selection: reads.Selection = reads.EVERYTHING
    ) -> dict[tuple[str, str], int]:
        """Active consumers per selected group at the global clock and TTL."""
        return reads.active_counts(
            self.registry(), selection, now_ns=self.now_ns, ttl_ms=self.ttl_ms
        )

    # ------------------------------------------------------------ output

    def width(self, wide: bool = False) -> int | None:
        """The width a table must fit: the terminal's (or `COLUMNS`), unless `wide` or the
        output is not a terminal (a pipe or a file gets every name in full)."""
        if wide or not self.console.is_terminal:
            return None
        return self.console.width

    def nothing(self, what: str, selection: reads.Selection = reads.EVERYTHING) -> str:
        """`(no consumers with queue 'orders' under prefix 'presence' at redis://...)`."""
        matching = selection.describe()
        return f"({what}{' with ' + matching if matching else ''} under {self.where})"

    def emit(self, text: str) -> None:
        """Write already-rendered text to the terminal."""
        from . import render

        render.write(self.console, text)

    def emit_json(self, data: object) -> None:
        """One JSON document (names exact, as in `ls --format json`)."""
        import json

        self.emit(json.dumps(data, indent=2, ensure_ascii=False) + "\n")

    def show_consumers(
        self,
        rows: Sequence[ConsumerPresence],
        fmt: str,
        *,
        selection: reads.Selection = reads.EVERYTHING,
        wide: bool = False,
        total: int | None = None,
        now_ns: int | None = None,
    ) -> None:
        """Consumers as a table (fitted to the terminal), JSON or CSV; `total` is how many
        there were before `--limit`; the table marks beats stamped after `now_ns`."""
        from . import render

        fmt = fmt.lower()
        text = render.render_consumers(
            rows,
            fmt,
            render.Styler(self.console),
            self.width(wide),
            self.nothing("no consumers", selection),
            now_ns,
        )
        if fmt == "table" and total is not None and total > len(rows):
            text += f"(showing {len(rows)} of {render.plural(total, 'consumer')}: --limit)\n"
        self.emit(text)

    def show_counts(
        self,
        counts: Mapping[tuple[str, str], int],
        fmt: str,
        *,
        selection: reads.Selection = reads.EVERYTHING,
    ) -> None:
        """Active consumers per `(queue, group)` as a table, JSON or CSV; declared groups
        (`expect`) with their minimum, marked when below it."""
        from . import render

        self.emit(
            render.render_counts(
                counts,
                fmt.lower(),
                render.Styler(self.console),
                self.width(),
                self.nothing("no groups", selection),
                minimums=reads.declared(self.registry(), selection),
                capacities=getattr(counts, "capacities", None),
            )
        )

    def show_rollup(
        self,
        selection: reads.Selection,
        field: str,
        fmt: str,
        *,
        now_ns: int,
        wide: bool = False,
        stuck: bool = False,
        limit: int | None = None,
    ) -> None:
        """The selected consumers (`stuck`: the stuck ones) rolled up by metadata `field`;
        `limit`: the first values alone."""
        from . import render
        from .render_rollup import render_rollup

        count, rows = reads.rolled_up(
            self.registry(), selection, field, now_ns=now_ns, ttl_ms=self.ttl_ms, stuck=stuck
        )
        shown = rows if limit is None else rows[:limit]
        text = render_rollup(
            shown,
            field,
            fmt.lower(),
            render.Styler(self.console),
            self.width(wide),
            self.nothing("no consumers", selection),
        )
        if fmt.lower() == "table" and rows:
            values = "" if len(shown) == len(rows) else f"; {len(shown)} of {len(rows)} values"
            text += (
                f"({render.plural(count, 'consumer')} by {field}: '(none)' have no {field}"
                f"{values})\n"
            )
        self.emit(text)


pass_app = click.make_pass_decorator(App)
"""Hands a command the `App` that the group built from the global options."""

"""Options defined once: the global options (`group.py` adds their copies after the
command) and those that several commands share (formats, filters, sorting)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from redis_presence.model import DEFAULT_PRESENCE_TTL_MS, PresenceState
from redis_presence.validation import MAX_TTL_MS

from .reads import SORTS

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_URL = "redis://localhost:6379/0"
DEFAULT_TIMEOUT_S = 5.0
"""How long the CLI waits to connect, and then for each reply, before calling Redis
unreachable."""

READ_ONLY_COMMANDS = "ls, counts, watch, events, ttl get and prune --dry-run"
"""What `--read-only` allows (named in the refusal of every other command)."""

FORMATS = ("table", "json", "csv")
"""The output formats of `ls`, `counts` and `prune`."""

MESSAGE_FORMATS = ("text", "json")
"""The output formats of `heartbeat` and `deregister`."""


def global_options() -> list[click.Option]:
    """The group's options, new objects on each call: `--url`, `--prefix`, `--ttl-ms`,
    `--timeout`, `--read-only` and the hidden `--now-ns` (their names are `App` fields)."""
    return [
        click.Option(
            ["--url"],
            envvar=["REDIS_PRESENCE_URL", "REDIS_URL"],
            default=DEFAULT_URL,
            show_default=True,
            metavar="URL",
            help="Redis URL: redis://, rediss:// (TLS), unix://, or redis+cluster:// and "
            "rediss+cluster:// (Cluster), redis+sentinel://h1,h2/service (Sentinel). "
            "Env: REDIS_PRESENCE_URL, then REDIS_URL.",
        ),
        click.Option(
            ["--prefix"],
            envvar="REDIS_PRESENCE_PREFIX",
            default="presence",
            show_default=True,
            help="Key prefix the brokers use. Env: REDIS_PRESENCE_PREFIX.",
        ),
        click.Option(
            ["--ttl-ms"],
            envvar="REDIS_PRESENCE_TTL_MS",
            type=click.IntRange(1, MAX_TTL_MS),
            default=None,
            metavar="MS",
            help="Heartbeat budget: active up to TTL, stale up to 2 x TTL, then expired. "
            "Not given: the TTL the brokers share, stored in Redis ('redis-presence ttl'), "
            f"else {DEFAULT_PRESENCE_TTL_MS} (the demo's default is 2000). "
            "Env: REDIS_PRESENCE_TTL_MS.",
        ),
        click.Option(
            ["--timeout", "timeout_s"],
            envvar="REDIS_PRESENCE_TIMEOUT",
            type=click.FloatRange(0.1, 3600),
            default=DEFAULT_TIMEOUT_S,
            show_default=True,
            metavar="SECONDS",
            help="How long to wait to connect, and then for each reply. "
            "Env: REDIS_PRESENCE_TIMEOUT.",
        ),
        click.Option(
            ["--read-only"],
            is_flag=True,
            envvar="REDIS_PRESENCE_READ_ONLY",
            help="Only read, with read-only scripts (EVALSHA_RO, Redis 7+): for replicas and "
            f"read-only ACL users. Allows {READ_ONLY_COMMANDS}. Env: REDIS_PRESENCE_READ_ONLY=1.",
        ),
        click.Option(
            ["--now-ns"], type=click.IntRange(0), hidden=True, help="Fixed clock (tests)."
        ),
    ]


GLOBAL_NAMES = tuple(option.opts[0] for option in global_options() if not option.hidden)
"""`--url`, `--prefix`, ...: named in every command's help."""


STATE_CHOICE = click.Choice([s.value for s in PresenceState], case_sensitive=False)


def format_option(help: str, choices: tuple[str, ...] = FORMATS) -> Callable[[F], F]:
    """`--format`, into the parameter `fmt`; the first choice is the default."""
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(choices, case_sensitive=False),
        default=choices[0],
        show_default=True,
        help=help,
    )


consumer_formats = format_option(
    "Output format; json and csv carry the ConsumerPresence field names "
    "(CSV cells are made safe for spreadsheets; JSON is exact)."
)
"""`--format table|json|csv` for commands that print consumers."""


def filters(*, states: bool = True) -> Callable[[F], F]:
    """`--queue`, `--group` and (unless `states=False`) `--state`."""

    def decorate(f: F) -> F:
        if states:
            f = click.option(
                "--state",
                "states",
                type=STATE_CHOICE,
                multiple=True,
                help="Only these states (repeatable).",
            )(f)
        f = click.option("--group", help="Only this consumer group (exact name).")(f)
        return click.option("--queue", help="Only this queue (exact name).")(f)

    return decorate


def arrangement(f: F) -> F:
    """`--sort`, `--limit` and `--wide` for commands that show consumers."""
    f = click.option(
        "--wide",
        is_flag=True,
        help="Show every column and every name in full, however wide the terminal.",
    )(f)
    f = click.option(
        "--limit",
        type=click.IntRange(min=1),
        metavar="N",
        help="Show at most N consumers (after sorting).",
    )(f)
    return click.option(
        "--sort",
        type=click.Choice(SORTS, case_sensitive=False),
        default="name",
        show_default=True,
        help="name: queue, group, consumer; age: longest silent first; state: expired, "
        "stale, then active.",
    )(f)


_DURATION_UNITS_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


class Duration(click.ParamType[int, Any]):
    """A duration in milliseconds, written ``500ms``, ``30s``, ``5m``, ``2h``, ``1d`` (a
    bare number is seconds), within [`least_ms`, MAX_TTL_MS]."""

    name = "duration"

    def __init__(self, least_ms: int = 0) -> None:
        self.least_ms = least_ms

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip().lower()
        unit = next((u for u in ("ms", "s", "m", "h", "d") if text.endswith(u)), "")
        number = text[: len(text) - len(unit)] if unit else text
        try:
            ms = round(float(number) * _DURATION_UNITS_MS[unit or "s"])
        except (ValueError, OverflowError):
            self.fail(f"{value!r} is not a duration (say 500ms, 30s, 5m, 2h or 1d)", param, ctx)
        if not self.least_ms <= ms <= MAX_TTL_MS or number.strip() != number or not number:
            self.fail(
                f"{value!r} must be a duration from {self.least_ms} ms to {MAX_TTL_MS} ms",
                param,
                ctx,
            )
        return ms

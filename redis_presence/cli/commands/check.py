"""`redis-presence check`: exit 0 when every named group has enough active consumers.

For probes, cron and Nagios-style monitors: one line per group on stdout, exit 1 when a
group has fewer active consumers than asked for, 3 when Redis cannot be reached (and the
CLI's other codes for the other failures).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import click

from ..app import App, pass_app
from ..errors import UsageProblem

if TYPE_CHECKING:
    from redis_presence.protocol import PresenceRegistry


class Verdict(NamedTuple):
    queue: str
    group: str
    active: int
    min_active: int

    @property
    def ok(self) -> bool:
        return self.active >= self.min_active

    def to_dict(self) -> dict[str, object]:
        return self._asdict() | {"ok": self.ok}

    def line(self) -> str:
        from ..render import shown

        status = "OK  " if self.ok else "FAIL"
        return (
            f"{status} queue {shown(self.queue)!r} group {shown(self.group)!r}: "
            f"{self.active} active (at least {self.min_active} wanted)"
        )


def pairs_of(
    queues: Sequence[str], groups: Sequence[str], minimums: Sequence[int]
) -> list[tuple[str, str, int]]:
    """`(queue, group, min_active)` from repeated options: the n-th `--queue` goes with the
    n-th `--group`; `--min-active` is given never (1), once (for every pair) or per pair."""
    if not queues or len(queues) != len(groups):
        raise UsageProblem(
            "name each group to check as a --queue/--group pair (got "
            f"{len(queues)} --queue and {len(groups)} --group)"
        )
    if len(minimums) not in (0, 1, len(queues)):
        raise UsageProblem(
            f"give --min-active once for every pair, or once per pair ({len(queues)}), "
            f"not {len(minimums)} times"
        )
    wanted = list(minimums) * len(queues) if len(minimums) == 1 else list(minimums)
    return [
        (q, g, wanted[i] if wanted else 1)
        for i, (q, g) in enumerate(zip(queues, groups, strict=True))
    ]


def active_counts(
    registry: PresenceRegistry,
    pairs: Sequence[tuple[str, str]],
    *,
    now_ns: int | None,
    ttl_ms: int | None,
) -> list[int]:
    """Active consumers of each pair: one `count_active` per group named, and nothing else
    (no other group, no consumer row)."""
    return [registry.count_active(q, g, now_ns=now_ns, ttl_ms=ttl_ms) for q, g in pairs]


@click.command("check", short_help="Exit 0 if named groups have enough active consumers.")
@click.option("--queue", "queues", multiple=True, metavar="QUEUE", help="Queue (repeatable).")
@click.option(
    "--group", "groups", multiple=True, metavar="GROUP", help="Group of the queue before it."
)
@click.option(
    "--min-active",
    "minimums",
    type=click.IntRange(0),
    multiple=True,
    metavar="N",
    help="Active consumers wanted (default 1): once for all pairs, or once per pair.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"], case_sensitive=False),
    default="text",
    show_default=True,
)
@pass_app
def command(
    app: App,
    queues: tuple[str, ...],
    groups: tuple[str, ...],
    minimums: tuple[int, ...],
    fmt: str,
) -> None:
    """Check that every named group has at least N active consumers.

    Exit 0 when all do, 1 when one does not, 3 when Redis cannot be reached (2 for bad
    usage, 4 for refused credentials). One line per group on stdout. Without --queue and
    --group, every declared group (`redis-presence expect`) is checked against its own
    minimum.

    \b
    Examples:
      redis-presence check --queue orders --group billing
      redis-presence check --queue orders --group billing --min-active 2
      redis-presence check --queue orders --group billing --queue emails --group sender
      redis-presence check --queue orders --group billing --format json
      redis-presence check
    """
    if not queues and not groups:  # every declared group, each with its own minimum
        registry = app.registry()
        declared = registry.expected()
        if not declared:
            raise UsageProblem(
                "name each group to check as a --queue/--group pair, or declare groups "
                "with `redis-presence expect`"
            )
        if minimums:
            raise UsageProblem("--min-active goes with --queue/--group pairs only")
        wanted = [(q, g, least) for (q, g), least in declared.items()]
    else:
        wanted = pairs_of(queues, groups, minimums)
    active = active_counts(
        app.registry(), [(q, g) for q, g, _ in wanted], now_ns=app.now_ns, ttl_ms=app.ttl_ms
    )
    verdicts = [Verdict(q, g, n, m) for (q, g, m), n in zip(wanted, active, strict=True)]
    if len({(q, g) for q, g, _ in wanted}) == 1:
        app.note_ttl(*wanted[0][:2])
    else:
        app.note_ttl()
    if fmt.lower() == "json":
        import json

        click.echo(json.dumps([v.to_dict() for v in verdicts], indent=2, ensure_ascii=False))
    else:
        for verdict in verdicts:
            click.echo(verdict.line())
    if not all(v.ok for v in verdicts):
        raise click.exceptions.Exit(1)

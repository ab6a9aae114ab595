"""`redis-presence check`: exit 0 when every named group's verdict is OK or DRAINING, or
(`--consumer`) when one consumer is active.

For probes, cron and Nagios-style monitors: one line per group (its verdict and why, or the
consumer's state) on stdout, exit 1 when a group has fewer active consumers than asked for
(or the consumer is not active, or stuck with `--stuck`), 10, 11 or 12 when a group at its
minimum is DEGRADED, STALLED or STOPPED, 3 when Redis cannot be reached (0 with
`--unreachable ok`), and the CLI's other codes for the other failures.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple, TypeVar

import click

from redis_presence.verdict import GroupVerdict, judge

from ..app import App, pass_app
from ..errors import UsageProblem, translate
from ..reads import stuck_in_group

if TYPE_CHECKING:
    from redis_presence.contract import PresenceRegistry
    from redis_presence.model import ConsumerPresence, GroupPresence

T = TypeVar("T")

UNREACHABLE = ("fail", "ok")
"""`--unreachable`: exit 3 when Redis cannot be reached, or exit 0 (with a line on stderr)."""


EXIT_BELOW = 1
"""A group has fewer active consumers than wanted (its minimum not excused by draining)."""
EXIT_BY_VERDICT = {"DEGRADED": 10, "STALLED": 11, "STOPPED": 12}
"""The exit code of a group at or above its minimum that does not pass, by its verdict."""


class GroupCheck(NamedTuple):
    """One group's check: its active consumers against the minimum wanted and, unless
    `--below-only`, its row (`group()`) and stuck consumers (`--progress`; else None)."""

    queue: str
    group: str
    active: int
    min_active: int
    row: GroupPresence | None = None
    stuck: int | None = None

    @property
    def below(self) -> bool:
        return self.active < self.min_active

    @property
    def judged(self) -> GroupVerdict | None:
        """Its verdict against the minimum wanted (None: `--below-only`)."""
        row = self.row
        if row is None:
            return None
        return judge(row.facts(self.min_active, self.stuck))  # draining excuses, as read

    @property
    def exit_code(self) -> int:
        """0 when it passes; 1 below its minimum; else 10, 11 or 12 by its verdict."""
        judged = self.judged
        if judged is None:
            return EXIT_BELOW if self.below else 0
        if judged.verdict.passes:
            return 0
        return EXIT_BELOW if self.below else EXIT_BY_VERDICT[judged.verdict.value]

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "queue": self.queue,
            "group": self.group,
            "active": self.active,
            "min_active": self.min_active,
            "ok": self.ok,
        }
        row, judged = self.row, self.judged
        if row is not None and judged is not None:
            out |= {"stale": row.stale, "expired": row.expired, "stuck": self.stuck}
            out |= judged.to_dict()
        return out

    def line(self) -> str:
        from ..render import shown

        names = f"queue {shown(self.queue)!r} group {shown(self.group)!r}"
        judged = self.judged
        if judged is None:
            status = "OK  " if self.ok else "FAIL"
            return f"{status} {names}: {self.active} active (at least {self.min_active} wanted)"
        return f"{judged.verdict.value:<8} {names}: {judged.reason}"


def exit_code_of(checks: Sequence[GroupCheck]) -> int:
    """The command's exit code: 1 when a group is below its minimum, else the worst
    verdict's code (12 STOPPED, 11 STALLED, 10 DEGRADED), else 0."""
    codes = {check.exit_code for check in checks}
    return EXIT_BELOW if EXIT_BELOW in codes else max(codes, default=0)


class ConsumerVerdict(NamedTuple):
    """One consumer's probe: its row (None: not tracked) and whether `stuck` fails it."""

    queue: str
    group: str
    consumer: str
    row: ConsumerPresence | None
    stuck_fails: bool

    @property
    def ok(self) -> bool:
        row = self.row
        return (
            row is not None and row.state.value == "active" and not (self.stuck_fails and row.stuck)
        )

    def to_dict(self) -> dict[str, object]:
        row = self.row
        return {
            "queue": self.queue,
            "group": self.group,
            "consumer": self.consumer,
            "state": None if row is None else row.state.value,
            "last_seen_age_ms": None if row is None else row.last_seen_age_ms,
            "lease_count": None if row is None else row.lease_count,
            "stuck": None if row is None else row.stuck,
            "ok": self.ok,
        }

    def line(self) -> str:
        from ..render import shown

        row = self.row
        if row is None:
            what = "not tracked"
        else:
            what = f"{row.state.value}, last beat {row.last_seen_age_ms} ms ago"
            if row.stuck:
                what += f", stuck with {row.lease_count} leases"
        status = "OK  " if self.ok else "FAIL"
        return (
            f"{status} consumer {shown(self.consumer)!r} of queue {shown(self.queue)!r} "
            f"group {shown(self.group)!r}: {what}"
        )


def reachable(app: App, unreachable: str, read: Callable[[], T]) -> T:
    """`read()`; with `--unreachable ok`, Redis out of reach ends the command with exit 0
    and one line on stderr (a probe that must not restart a healthy worker)."""
    try:
        return read()
    except Exception as exc:
        errors = sys.modules.get("redis_presence.errors")
        if (
            unreachable == "ok"
            and errors is not None
            and isinstance(exc, errors.PresenceConnectionError)
        ):
            failed = translate(exc, app.url, app.timeout_s)
            click.echo(f"redis-presence: {failed.message}; --unreachable ok: exit 0", err=True)
            raise click.exceptions.Exit(0) from None
        raise


def pairs_of(
    queues: Sequence[str], groups: Sequence[str], minimums: Sequence[int]
) -> list[tuple[str, str, int | None]]:
    """`(queue, group, min_active)` from repeated options: the n-th `--queue` goes with the
    n-th `--group`; `--min-active` is given never (None: the group's declared minimum,
    else 1), once (for every pair) or per pair."""
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
        (q, g, wanted[i] if wanted else None)
        for i, (q, g) in enumerate(zip(queues, groups, strict=True))
    ]


def declared_or_one(registry: PresenceRegistry, queue: str, group: str) -> int:
    """The minimum the group was declared with (`expect`), else 1: one ``HMGET``."""
    least = registry.min_active(queue, group)
    return 1 if least is None else least


def active_per_pair(
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
    help="Active consumers wanted (default: the group's declared minimum, else 1): once "
    "for all pairs, or once per pair.",
)
@click.option(
    "--consumer",
    metavar="NAME",
    help="Check this consumer of the one --queue/--group: exit 0 when it is active.",
)
@click.option(
    "--stuck",
    is_flag=True,
    help="With --consumer: also fail when it is stuck (holding leases without progress "
    "for longer than the group's shared budget).",
)
@click.option(
    "--progress",
    is_flag=True,
    help="Also read each group's consumers for their progress: a group whose every active "
    "consumer is stuck is STALLED (exit 11), one with some stuck DEGRADED (exit 10).",
)
@click.option(
    "--below-only",
    is_flag=True,
    help="Judge the minimum alone, as before verdicts: exit 1 below it, else 0 (reads each "
    "group's active count alone).",
)
@click.option(
    "--unreachable",
    type=click.Choice(UNREACHABLE, case_sensitive=False),
    default="fail",
    show_default=True,
    help="Redis cannot be reached: fail (exit 3) or ok (exit 0, one line on stderr).",
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
    consumer: str | None,
    stuck: bool,
    progress: bool,
    below_only: bool,
    unreachable: str,
    fmt: str,
) -> None:
    """Check each named group's verdict: enough active consumers, none stale or stuck.

    One line per group on stdout: its verdict (OK, DRAINING, DEGRADED, STALLED, STOPPED)
    and why. Exit 0 when every group is OK or DRAINING, 1 when one has fewer active
    consumers than wanted, else 10 for DEGRADED (stale or stuck consumers), 11 for
    STALLED (with --progress), 12 for STOPPED; 3 when Redis cannot be reached (0 with
    --unreachable ok; 2 for bad usage, 4 for refused credentials). --below-only: the
    minimum alone (exit 0 or 1). Without --queue and --group, every declared group
    (`redis-presence expect`) is checked against its own minimum.

    With --consumer (and one --queue/--group): exit 0 when that consumer is active (and,
    with --stuck, not stuck), 1 when it is stale, expired, stuck or not tracked: a
    liveness probe for a worker, reading that consumer alone.

    \b
    Examples:
      redis-presence check --queue orders --group billing
      redis-presence check --queue orders --group billing --min-active 2
      redis-presence check --queue orders --group billing --queue emails --group sender
      redis-presence check --queue orders --group billing --format json
      redis-presence check
      redis-presence check --consumer w1 --queue orders --group billing --unreachable ok
    """
    unreachable = unreachable.lower()
    if consumer is not None:
        if progress or below_only:
            raise UsageProblem("--progress and --below-only go with group checks, not --consumer")
        probe(app, consumer, queues, groups, minimums, stuck, unreachable, fmt)
        return
    if stuck:
        raise UsageProblem("--stuck goes with --consumer only")
    if progress and below_only:
        raise UsageProblem("--progress judges the verdict, --below-only the minimum alone")
    reading = "below" if below_only else "progress" if progress else "counts"
    reachable(app, unreachable, lambda: groups_check(app, queues, groups, minimums, fmt, reading))


def probe(
    app: App,
    consumer: str,
    queues: Sequence[str],
    groups: Sequence[str],
    minimums: Sequence[int],
    stuck: bool,
    unreachable: str,
    fmt: str,
) -> None:
    """`check --consumer`: one consumer's row, read alone (one ``HMGET`` and its group's
    shared TTL and budget)."""
    if len(queues) != 1 or len(groups) != 1:
        raise UsageProblem(
            "--consumer needs exactly one --queue and one --group (got "
            f"{len(queues)} --queue and {len(groups)} --group)"
        )
    if minimums:
        raise UsageProblem("--min-active goes with group checks, not with --consumer")
    queue, group = queues[0], groups[0]

    def read() -> ConsumerPresence | None:
        row = app.registry().consumer(queue, group, consumer, now_ns=app.now_ns, ttl_ms=app.ttl_ms)
        app.note_ttl(queue, group)
        return row

    verdict = ConsumerVerdict(queue, group, consumer, reachable(app, unreachable, read), stuck)
    if fmt.lower() == "json":
        import json

        click.echo(json.dumps(verdict.to_dict(), indent=2, ensure_ascii=False))
    else:
        click.echo(verdict.line())
    if not verdict.ok:
        raise click.exceptions.Exit(1)


def groups_check(
    app: App,
    queues: Sequence[str],
    groups: Sequence[str],
    minimums: Sequence[int],
    fmt: str,
    reading: str = "counts",
) -> None:
    """`check` of named (or declared) groups: one `group()` each (its keys, no consumer);
    `reading` "progress": and its consumers' rows; "below": one `count_active` each."""
    registry = app.registry()
    if not queues and not groups:  # every declared group, each with its own minimum
        declared = registry.expected()
        if not declared:
            raise UsageProblem(
                "name each group to check as a --queue/--group pair, or declare groups "
                "with `redis-presence expect`"
            )
        if minimums:
            raise UsageProblem("--min-active goes with --queue/--group pairs only")
        named: list[tuple[str, str, int | None]] = [
            (q, g, least) for (q, g), least in declared.items()
        ]
    else:
        named = pairs_of(queues, groups, minimums)
    if reading == "below":
        wanted = [
            (q, g, least if least is not None else declared_or_one(registry, q, g))
            for q, g, least in named
        ]
        active = active_per_pair(
            registry, [(q, g) for q, g, _ in wanted], now_ns=app.now_ns, ttl_ms=app.ttl_ms
        )
        checks = [GroupCheck(q, g, n, m) for (q, g, m), n in zip(wanted, active, strict=True)]
    else:
        checks = [
            judged_group(registry, q, g, least, app.now_ns, app.ttl_ms, reading == "progress")
            for q, g, least in named
        ]
    if len({(q, g) for q, g, _ in named}) == 1:
        app.note_ttl(*named[0][:2])
    else:
        app.note_ttl(groups=[(q, g) for q, g, _ in named])
    if fmt.lower() == "json":
        import json

        click.echo(json.dumps([c.to_dict() for c in checks], indent=2, ensure_ascii=False))
    else:
        for check in checks:
            click.echo(check.line())
    code = exit_code_of(checks)
    if code:
        raise click.exceptions.Exit(code)


def judged_group(
    registry: PresenceRegistry,
    queue: str,
    group: str,
    least: int | None,
    now_ns: int | None,
    ttl_ms: int | None,
    progress: bool,
) -> GroupCheck:
    """One group's check from its row (`group()`: the minimum asked for, else its declared
    one, else 1) and, with `progress`, its consumers' stuck flags (`snapshot` of it)."""
    row = registry.group(queue, group, now_ns=now_ns, ttl_ms=ttl_ms)
    wanted = least if least is not None else row.min_active if row.min_active is not None else 1
    stuck = stuck_in_group(registry, queue, group, now_ns, ttl_ms) if progress else None
    return GroupCheck(queue, group, row.active, wanted, row, stuck)

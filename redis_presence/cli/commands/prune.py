"""`redis-presence prune`: remove the expired consumers, or list them with `--dry-run`; with
`--every`, keep removing those expired for longer than a retention (automatic removal)."""

from __future__ import annotations

import click

from redis_presence.model import DEFAULT_RETENTION_TTLS, PresenceState

from ..app import App, pass_app
from ..errors import UsageProblem
from ..options import Duration, filters, format_option
from ..reads import Selection


@click.command("prune", short_help="Remove expired consumers (--dry-run lists them).")
@filters(states=False)
@click.option("--dry-run", is_flag=True, help="List the expired consumers; remove nothing.")
@click.option(
    "--every",
    type=Duration(least_ms=100),
    metavar="DURATION",
    help="Prune now and then every DURATION (30s, 5m, 1h) until SIGTERM or Ctrl-C (exit "
    "0), one line per pass: automatic removal. Its default --retention is "
    f"{DEFAULT_RETENTION_TTLS} TTLs of each group.",
)
@click.option(
    "--retention",
    type=Duration(),
    metavar="DURATION",
    help="Remove only consumers expired for longer than this (0, the default without "
    f"--every: every expired one; with --every: {DEFAULT_RETENTION_TTLS} TTLs of each group).",
)
@format_option(
    "Output format: with --dry-run, the consumers (as ls prints them); without, how many went "
    '(json: {"pruned": N}, csv: a "pruned" column; with --every, one line per pass).'
)
@pass_app
def command(
    app: App,
    queue: str | None,
    group: str | None,
    dry_run: bool,
    every: int | None,
    retention: int | None,
    fmt: str,
) -> None:
    """Remove expired consumers (of one queue or group, with --queue / --group) and print
    how many.

    With --every, prune the whole prefix now and then every DURATION, keeping each
    consumer for --retention past its expiry, and print one line per pass, until SIGTERM
    or Ctrl-C (exit status 0). Several processes may do it at once: each consumer goes
    once, with one pruned event.

    \b
    Examples:
      redis-presence prune --dry-run
      redis-presence prune
      redis-presence prune --queue orders --format json
      redis-presence prune --every 1m
      redis-presence prune --every 5m --retention 1h --format json
    """
    fmt = fmt.lower()
    if every is not None:
        if dry_run:
            raise UsageProblem("--every and --dry-run go separately: --dry-run removes nothing")
        if queue is not None or group is not None:
            raise UsageProblem("--every prunes the whole prefix: drop --queue and --group")
        _every(app, every, retention, fmt)
        return
    if dry_run:
        if retention:
            raise UsageProblem("--dry-run lists every expired consumer: drop --retention")
        expired = Selection(queue, group, frozenset({PresenceState.EXPIRED}))
        doomed = app.consumers(expired)
        app.show_consumers(doomed, fmt, selection=expired)
        if fmt == "table":
            app.emit(f"would prune {len(doomed)} expired consumer(s)\n")
        app.note_ttl(queue, group, sorted({(row.queue, row.group) for row in doomed}))
        return
    registry = app.writer("prune")
    # Not given, --ttl-ms is each group's shared TTL: what the brokers beat under.
    removed = registry.prune_expired(
        now_ns=app.now_ns, ttl_ms=app.ttl_ms, queue=queue, group=group, retention_ms=retention or 0
    )
    ttl, source = app.note_ttl(queue, group)
    if fmt == "json":
        app.emit_json({"pruned": removed, "ttl_ms": ttl, "ttl_source": source})
    elif fmt == "csv":
        app.emit(f"pruned\n{removed}\n")
    else:
        app.emit(f"pruned {removed} expired consumer(s)\n")


def _every(app: App, every_ms: int, retention_ms: int | None, fmt: str) -> None:
    """The loop of `prune --every`: a pass, one line, a wait; SIGTERM or Ctrl-C ends it."""
    import csv
    import io
    import threading
    import time

    from redis_presence.pruning import prune_pass

    from .. import render
    from ..signals import interrupt_on_sigterm

    registry = app.writer("prune")
    kept = f"{DEFAULT_RETENTION_TTLS} TTLs" if retention_ms is None else f"{retention_ms} ms"
    if fmt == "csv":
        app.emit("at,pruned,error\n")
    stop = threading.Event()
    try:
        with interrupt_on_sigterm():
            while True:
                done = prune_pass(registry, retention_ms, app.ttl_ms)
                at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                error = "" if done.error is None else str(done.error).splitlines()[0]
                if fmt == "json":
                    app.emit(
                        render.json_line(
                            {
                                "at": at,
                                "pruned": done.removed,
                                "retention_ms": retention_ms,
                                "error": error or None,
                            }
                        )
                    )
                elif fmt == "csv":
                    line = io.StringIO()
                    csv.writer(line, lineterminator="\n").writerow(
                        [at, "" if done.removed is None else done.removed, error]
                    )
                    app.emit(line.getvalue())
                elif done.removed is None:
                    app.emit(f"{at} prune failed: {error}\n")
                else:
                    why = f" ({error})" if error else ""
                    app.emit(
                        f"{at} pruned {done.removed} consumer(s) expired for longer than "
                        f"{kept}{why}\n"
                    )
                stop.wait(every_ms / 1000)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the pass under way finished or was cut
        return

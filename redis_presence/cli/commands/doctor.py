"""`redis-presence doctor`: check a deployment and say what is wrong and what to do."""

from __future__ import annotations

import click

from ..app import App, pass_app
from ..errors import UsageProblem
from ..options import MESSAGE_FORMATS, format_option

EXIT_WARNINGS = 8
"""doctor found something that may be wrong (a warning), and nothing worse."""

EXIT_FAILURES = 9
"""doctor found something that is wrong (a failure)."""


@click.command("doctor", short_help="Check the deployment: memory, persistence, ACL, version.")
@format_option(
    "text: one line per finding, with what to do; json: the findings as objects "
    "(check, status, summary, advice, node) and the worst status.",
    MESSAGE_FORMATS,
)
@pass_app
def command(app: App, fmt: str) -> None:
    """Check the Redis deployment behind --url and print what is wrong and what to do.

    It checks the maxmemory-policy (one that may evict presence keys) and how full memory
    is, persistence (AOF, RDB), the server version against the tested ones, which of the
    ACL roles of docs/production.md (broker, reader, janitor) the current user can play and
    what it lacks for the others, a leftover index of release 0.1, latency (a few round trips) and
    replication; on a Redis Cluster, its state and each primary. It writes nothing: ACL
    rights come from ACL DRYRUN where the user may run it, else from commands sent in forms
    that change nothing. Checks the user may not run are skipped, not failed.

    Exit status: 0 when nothing is wrong, 8 for warnings only, 9 when something is wrong
    (and 3 or 4 when Redis cannot be reached or refuses the login).

    \b
    Examples:
      redis-presence doctor
      redis-presence --url redis://admin:secret@redis.internal:6379/0 doctor --format json
    """
    from redis_presence.doctor import Status, diagnose, worst

    from .. import render

    registry = app.registry()
    if not hasattr(registry, "policy_check"):
        raise UsageProblem("doctor checks a Redis deployment: this registry keeps nothing in Redis")
    findings = diagnose(registry)
    verdict = worst(findings)
    if fmt.lower() == "json":
        app.emit_json(
            {
                "where": app.where,
                "status": verdict.value,
                "findings": [finding.to_dict() for finding in findings],
            }
        )
    else:
        style = render.Styler(app.console)
        colours = {Status.FAIL: "bold red", Status.WARN: "yellow", Status.OK: "green"}
        lines = [render.wrapped(f"redis-presence doctor: {app.where}", render.LINE_WIDTH, 4)]
        width = max(len(f.check) for f in findings)
        # Summaries and advice wrap under their column: 80 columns (or a narrower terminal).
        fit = render.LINE_WIDTH
        if app.console.is_terminal:
            fit = min(fit, app.console.width)
        hang = 4 + 2 + width + 2
        for finding in findings:
            node = f"[{finding.node}] " if finding.node else ""
            label = style(f"{finding.status.value.upper():<4}", colours.get(finding.status, ""))
            text = render.wrapped(f"{node}{render.shown(finding.summary)}", fit, hang, " " * hang)
            lines.append(f"{label}  {finding.check:<{width}}  {text[hang:]}")
            if finding.advice:
                advice = render.shown(finding.advice)
                lines.append(render.wrapped(advice, fit, hang + 3, " " * hang + "-> "))
        fails, warns = (sum(f.status is s for f in findings) for s in (Status.FAIL, Status.WARN))
        tally = f"{render.plural(fails, 'failure')}, {render.plural(warns, 'warning')}"
        lines.append(tally if verdict.rank else "nothing wrong found")
        app.emit("\n".join(lines) + "\n")
    if verdict is Status.FAIL:
        app.ctx.exit(EXIT_FAILURES)
    if verdict is Status.WARN:
        app.ctx.exit(EXIT_WARNINGS)

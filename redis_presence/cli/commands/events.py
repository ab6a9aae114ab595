"""`redis-presence events`: the transitions (joined, recovered, stale, expired, left,
pruned) since a cursor, or as they happen with `--follow`; the last line is the cursor to
resume from."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

import click

from ..app import App, pass_app
from ..options import filters, format_option


@click.command("events", short_help="Who joined, went stale, expired, came back or left.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing events as they happen.")
@click.option(
    "--since",
    metavar="CURSOR|TIME",
    help="Go on from this cursor (the last line of an earlier run), or start at a time: "
    "15m, 2h (ago), 2026-12-04T22:05:00Z (UTC), at most a day back. Not given: from now.",
)
@filters(states=False)
@format_option(
    'Output format; json: one object per line (PresenceEvent fields), then {"cursor": ...}.',
    ("table", "json"),
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.05, max=3600),
    default=1.0,
    show_default=True,
    help="With --follow: seconds between reads.",
)
@pass_app
def command(
    app: App,
    follow: bool,
    since: str | None,
    queue: str | None,
    group: str | None,
    fmt: str,
    interval: float,
) -> None:
    """Print the events from --since (none, without it) up to now, then the cursor to
    resume from; with --follow, keep printing them as they happen until Ctrl-C.

    Stale and expired events use the TTL the brokers share ('redis-presence ttl').
    With --format json every line is one JSON object, flushed as it is written, and the
    last line (at the end, or on Ctrl-C, SIGTERM or SIGHUP) is {"cursor": "..."}. When the
    event log was trimmed past the cursor, --follow prints a "resync" line and goes on
    from a fresh cursor (the events in between are lost: read 'ls' again if you keep a
    state); without --follow it is an error (exit code 1).

    \b
    Examples:
      redis-presence events --follow
      redis-presence events --follow --format json | jq -r 'select(.kind == "expired") | .consumer'
      redis-presence events --since "$(cat cursor)" --format json
      redis-presence events --since 15m --queue orders
    """
    from redis_presence.events import FollowMessage, FollowSnapshot, PresenceEvent

    from .. import render
    from ..errors import UsageProblem
    from ..reads import Selection
    from ..signals import signals_call

    json_out = fmt.lower() == "json"
    registry = app.registry()
    from redis_presence.formatting import looks_like_since  # (imports the driver)

    if since is not None and looks_like_since(since):
        since = cursor_at(app, since, queue, group)
    styler = render.Styler(app.console)
    cursor = since

    def cursor_line() -> None:
        if cursor is not None:
            app.emit(render.json_line({"cursor": cursor}) if json_out else f"cursor: {cursor}\n")

    if not follow:
        with bad_cursor():
            page = registry.changes(since, now_ns=app.now_ns, queue=queue, group=group)
        events, cursor = list(page[0]), page[1]
        while getattr(page, "more", False):  # a long window, in pages: JSON as they come
            if json_out:
                app.emit("".join(map(render.event_json, events)))
                events = []
            page = registry.changes(cursor, now_ns=app.now_ns, queue=queue, group=group)
            events += page[0]
            cursor = page[1]
        if json_out:
            app.emit("".join(map(render.event_json, events)))
        elif since is None:
            app.emit("(no events before the cursor below: pass it to --since to go on)\n")
        else:
            empty = app.nothing("no events", Selection.of(queue, group))
            app.emit(render.events_table(events, styler, app.width(), empty))
        cursor_line()
        note_ttl(app, queue, group)
        return

    first = since is None
    noted = False
    owed = [False]  # events printed (or being printed) whose cursor is not yet known
    stopping = [False]  # a signal came while owed: it acts once their cursor is known

    def handle(message: FollowMessage) -> None:
        nonlocal cursor, noted, first
        if isinstance(message, PresenceEvent):
            owed[0] = True  # first: a signal from now on waits for this event's cursor
            line = render.event_json(message) if json_out else None
            app.emit(line or render.event_line(message, styler))
            return
        cursor = message.cursor
        owed[0] = False
        if stopping[0]:
            raise KeyboardInterrupt
        if not noted:  # on stderr, once following (the cursor is known)
            noted = True
            note_ttl(app, queue, group)
        if isinstance(message, FollowSnapshot):
            if first:  # the state at the start: events go on from its cursor
                first = False
                return
            reason = "the event log was trimmed past the cursor or Redis lost its data: " + (
                "events were lost"
            )
            if json_out:
                app.emit(render.json_line({"resync": reason, "cursor": cursor}))
            else:
                app.emit(f"resync: {reason}; going on from now\n")

    def on_signal(signum: int, frame: object) -> None:
        # An event printed is followed, without I/O, by the cursor that covers it: a signal
        # in between waits for that cursor (raised inside the stream, it would end the
        # stream before it, and the cursor printed last would replay the event).
        if owed[0]:
            stopping[0] = True
        else:
            raise KeyboardInterrupt

    stream = registry.follow(cursor=since, interval_s=interval, queue=queue, group=group)
    try:
        # Ctrl-C, SIGTERM (a container runtime's stop, systemd's) and SIGHUP (its terminal
        # closed, a supervisor's reload) end it with the cursor to resume from.
        with bad_cursor(), signals_call(on_signal, signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            for message in stream:
                handle(message)
    except KeyboardInterrupt:  # one of those signals: the cursor covers every event printed
        pass
    except UsageProblem:  # a bad --since: there is no cursor to resume from
        cursor = None
        raise
    finally:
        cursor_line()


@contextmanager
def bad_cursor() -> Iterator[None]:
    """A cursor the library refuses is a usage error naming `--since`."""
    from ..errors import UsageProblem

    try:
        yield
    except ValueError as exc:
        reason = str(exc)
        if "cursor" not in reason:
            raise
        if reason.startswith("cursor was returned"):  # a real cursor, of another filter
            raise UsageProblem(f"Invalid value for '--since': {reason}") from None
        raise UsageProblem(
            "Invalid value for '--since': not a cursor that 'redis-presence events' printed"
        ) from None


def cursor_at(app: App, since: str, queue: str | None, group: str | None) -> str:
    """The cursor whose events start at the time `since` names (`events.cursor_since`:
    the logs read from that millisecond on), under the epoch marker Redis holds now."""
    from redis_presence import RedisPresenceRegistry
    from redis_presence.events import cursor_since

    from ..errors import UsageProblem

    try:
        from redis_presence.formatting import parse_since  # (imports the driver)

        at = parse_since(since, app.clock_ns())
    except ValueError as exc:
        raise UsageProblem(f"Invalid value for '--since': {exc}") from None
    registry = app.registry()
    if not isinstance(registry, RedisPresenceRegistry):  # no event log to start in
        raise UsageProblem("Invalid value for '--since': a time needs a Redis registry")
    epoch = registry.execute(registry.plans.epoch())
    prefix = registry.plans.keys.prefix
    return cursor_since(at, epoch=epoch, prefix=prefix, queue=queue, group=group)


def note_ttl(app: App, queue: str | None, group: str | None) -> None:
    """Where the TTL of stale and expired events comes from, on stderr (events always use
    the shared TTL, whatever --ttl-ms says)."""
    registry = app.registry()
    one = queue is not None and group is not None
    ttl, source = registry.ttl_source(queue, group) if one else registry.ttl_source()
    words = app.ttl_words(ttl, source, queue, group)
    if app.ttl_ms is not None:
        words += f"; {app.ttl_from} is not used: events follow the shared TTL"
    app.note(f"events: {words}")

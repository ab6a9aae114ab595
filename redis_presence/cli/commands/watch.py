"""`redis-presence watch`: a live table of what changed between refreshes, which rides out
Redis outages."""

from __future__ import annotations

import time
from collections.abc import Iterator

import click

from redis_presence.model import ConsumerPresence

from ..app import App, pass_app
from ..frames import Frame, Outage, run_watch
from ..options import arrangement, filters
from ..reads import Selection, arrange


@click.command("watch", short_help="Live table marking joined, went stale, expired, left.")
@filters()
@arrangement
@click.option(
    "--interval",
    type=click.FloatRange(min=0.05, max=3600),
    default=1.0,
    show_default=True,
    help="Seconds between refreshes.",
)
@click.option("--iterations", type=click.IntRange(min=1), hidden=True)
@pass_app
def command(
    app: App,
    queue: str | None,
    group: str | None,
    states: tuple[str, ...],
    sort: str,
    limit: int | None,
    wide: bool,
    interval: float,
    iterations: int | None,
) -> None:
    """Live table that marks who joined, went stale, expired or left. Ctrl-C quits.

    The first refresh reads a snapshot; then each refresh reads only the events since the
    one before (what changed) and the rows of the active consumers it shows (their real
    age and leases), and each change stays marked, with its time, for a few refreshes.
    With --ttl-ms, every refresh reads a whole snapshot instead (events follow the shared
    TTL). When Redis cannot be reached, watch says since when, keeps the last table,
    retries with backoff and reads a fresh snapshot when Redis is back (so consumers a
    Redis restarted empty lost are shown as gone); only Ctrl-C ends it.

    \b
    Examples:
      redis-presence watch
      redis-presence watch --queue orders --sort state
      redis-presence --ttl-ms 5000 watch --interval 0.5
    """
    from redis_presence.errors import PresenceConnectionError
    from redis_presence.events import FollowMessage, FollowSnapshot, PresenceEvent
    from redis_presence.registry import RedisPresenceRegistry

    from .. import render, render_frames
    from ..errors import one_line
    from ..frames import REREAD_MAX, EventWatcher

    console = app.console
    selection = Selection.of(queue, group, states)
    heading = f"redis-presence watch  prefix {app.prefix}"
    ttl_words = [f"TTL {app.ttl_ms} ms ({app.ttl_from})"] if app.ttl_ms is not None else [""]
    title = f"{heading}  every {interval:g}s"

    def titled() -> str:
        return f"{heading}  {ttl_words[0]}  every {interval:g}s".replace("    ", "  ")

    # A fixed clock (--now-ns) or an explicit TTL cannot follow the events: full reads.
    follow = app.now_ns is None and app.ttl_ms is None
    watcher = EventWatcher()
    follower: list[Iterator[FollowMessage]] = []  # the `follow` going on, if any
    cursor: list[str] = []

    def read_changes() -> None:
        """The next batch of `follow` (its snapshot, or the events up to a cursor) into the
        watcher, then the real rows of the active consumers it holds (events carry no beat
        of an active consumer). After a failure (Redis unreachable), a new `follow` starts
        from a fresh snapshot: what Redis holds when it answers again, which may be nothing
        (a restart without persistence)."""
        registry = app.registry()
        if not follower:
            follower.append(
                registry.follow(
                    cursor=cursor[0] if cursor else None,
                    interval_s=interval,
                    queue=queue,
                    group=group,
                )
            )
        events: list[PresenceEvent] = []
        try:
            for message in follower[0]:
                if isinstance(message, PresenceEvent):
                    events.append(message)
                    continue
                cursor[:] = [message.cursor]
                if isinstance(message, FollowSnapshot):
                    watcher.start(message.rows, message.now_ns)
                    one = queue is not None and group is not None
                    ttl, source = registry.ttl_source(*((queue, group) if one else ()))
                    ttl_words[0] = app.ttl_words(ttl, source, short=True)
                    return
                watcher.apply(events, message.now_ns)
                active = sorted(watcher.active_keys())[:REREAD_MAX]
                if active and isinstance(registry, RedisPresenceRegistry):
                    now_ns, rows = registry.execute(registry.plans.rows_of(active))
                    watcher.update(rows, now_ns)
                return
        except BaseException:
            follower.clear()
            cursor.clear()
            raise

    def read_snapshot() -> list[ConsumerPresence]:
        rows = app.consumers(selection, states=False)
        if not ttl_words[0]:
            ttl_words[0] = app.ttl_words(*app.ttl_in_use(queue, group), short=True)
        return rows

    def refresh(_: None) -> Frame:
        return watcher.frame()

    empty = app.nothing("no consumers", selection)
    unreachable = "(cannot reach Redis: nothing read yet)"
    last: list[tuple[Frame, str, str]] = []  # the last frame shown, its title and time
    try:
        with render_frames.frame_sink(console, live=True) as sink:

            def view(
                frame: Frame, status: str | None = None, nothing: str | None = None
            ) -> render_frames.View:
                items = [item for item in frame.rows if selection.holds_state(item.row.state)]
                chosen = arrange(items, sort.lower(), limit, row=lambda item: item.row)
                return render_frames.View(
                    chosen,
                    width=None if wide else sink.width,
                    height=sink.height,
                    hidden=len(items) - len(chosen),
                    empty=nothing or empty,
                    status=status,
                    read=nothing is None,
                )

            def reason(error: Exception) -> str:
                return one_line(str(error))  # no password in it: never masked

            def show(frame: Frame) -> None:
                stamp = time.strftime("%H:%M:%S", time.localtime())
                last[:] = [(frame, f"{titled()}  {stamp}", stamp)]
                sink.show(frame, last[0][1], view(frame))

            def since_words(outage: Outage) -> str:
                started = time.time() - (time.monotonic() - outage.since_s)
                return time.strftime("%H:%M:%S", time.localtime(started))

            def on_outage(outage: Outage) -> None:
                read_at = f"the table is as read at {last[0][2]}" if last else "nothing read yet"
                status = (
                    f"Redis unreachable since {since_words(outage)} "
                    f"({render.plural(outage.failures, 'failed read')}): "
                    f"{reason(outage.error)}; {read_at}; retrying in {outage.retry_in_s:g}s"
                )
                if sink.live is not None:
                    if last:
                        frame, stamp, _ = last[0]
                        sink.show(frame, stamp, view(frame, status))
                    else:  # never reached: no table to show, not an empty registry
                        frame = Frame((), {}, {})
                        sink.show(frame, title, view(frame, status, unreachable))
                elif outage.failures == 1:
                    click.echo(
                        f"watch: Redis unreachable since {since_words(outage)}: "
                        f"{reason(outage.error)}; {read_at}; retrying",
                        err=True,
                    )

            def on_recovered(outage: Outage) -> None:
                if sink.live is None:
                    gone = time.monotonic() - outage.since_s
                    click.echo(
                        f"watch: Redis is back after {gone:.0f}s (unreachable since "
                        f"{since_words(outage)}): reading it again",
                        err=True,
                    )

            run_watch(
                read_changes if follow else read_snapshot,
                show,
                interval_s=interval,
                refresh=refresh if follow else None,
                paced=not follow,
                iterations=iterations,
                transient=lambda exc: isinstance(exc, PresenceConnectionError),
                on_outage=on_outage,
                on_recovered=on_recovered,
            )
    except KeyboardInterrupt:
        pass

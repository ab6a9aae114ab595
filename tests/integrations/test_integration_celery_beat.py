"""Celery beat: a real ``celery beat`` process, a consumer of group ``scheduler``."""

from __future__ import annotations

import socket

import pytest
from celery import Celery
from celery.beat import PersistentScheduler
from waiting import wait_until

from integrations.lifecycle import (
    Presence,
    event_cursor,
    events_since,
    said_draining_then_left,
    wait_one_ttl,
)
from integrations.workers import python_tool, started_workers, worker_env
from redis_presence import ConsumerPresence
from redis_presence.integrations.celery_beat import (
    SCHEDULER_GROUP,
    PresenceSchedulerMixin,
    install_beat,
)

pytestmark = [pytest.mark.redis_server, pytest.mark.slow]

PREFIX = "it-celery-beat"
INTERVAL_MS = 200
TTL_MS = 1_000
QUEUES = {"beat-a", "beat-default"}


def test_beat_is_a_consumer_of_group_scheduler(
    broker_url: str, presence_url: str, presence: Presence, tmp_path_factory: pytest.TempPathFactory
) -> None:
    logs = tmp_path_factory.mktemp("celery-beat")
    command = [
        python_tool("celery"),
        "-A",
        "celery_beat_app",
        "beat",
        "--loglevel=INFO",
        "-s",
        str(logs / "schedule"),
    ]
    env = worker_env(broker_url, presence_url, PREFIX, INTERVAL_MS)
    with started_workers({"beat": (command, env)}, logs=logs) as started:
        beat = started["beat"]
        consumer = f"{socket.gethostname()}:{beat.pid}"

        def rows() -> dict[str, ConsumerPresence]:
            return {row.queue: row for row in presence.rows(consumer=consumer, ttl_ms=TTL_MS)}

        def ready() -> dict[str, ConsumerPresence] | None:
            found = rows()
            active = all(row.state.value == "active" for row in found.values())
            return found if set(found) == QUEUES and active else None

        first = wait_until(ready, timeout_s=30, what="beat's rows", alive=beat.check_alive)
        assert {row.group for row in first.values()} == {SCHEDULER_GROUP}
        assert all(row.last_progress_ns is not None for row in first.values())  # ticks
        # Nothing is due for an hour, and beat's own loop would sleep for 300 s: the tick
        # returns within an interval, so the rows stay active.
        wait_one_ttl(presence, TTL_MS)
        later = ready()
        assert later is not None, rows()
        assert all(later[q].last_heartbeat_ns > first[q].last_heartbeat_ns for q in QUEUES)
        assert all(row.capacity is None and not row.draining for row in later.values())
        cursor = event_cursor(presence)
        assert beat.terminate(20) == 0, beat.log_tail()
        assert presence.rows(consumer=consumer) == []
        kinds = events_since(presence, cursor, consumer)
        assert set(kinds) == QUEUES, kinds
        assert all(said_draining_then_left(k) for k in kinds.values()), kinds


def test_install_beat_checks_its_arguments_where_the_app_is_defined() -> None:
    app = Celery("rp-beat-args")
    with pytest.raises(ValueError, match="interval_ms must be in"):
        install_beat(app, url="redis://h:6379/0", interval_ms=0)
    with pytest.raises(TypeError, match="scheduler must be"):
        install_beat(app, url="redis://h:6379/0", scheduler=dict)
    cls = install_beat(app, url="redis://h:6379/0", scheduler="celery.beat:PersistentScheduler")
    assert issubclass(cls, PresenceSchedulerMixin)
    assert issubclass(cls, PersistentScheduler)
    assert app.conf.beat_scheduler is cls
    with pytest.raises(ValueError, match="already installed"):
        install_beat(app, url="redis://h:6379/0", scheduler=cls)

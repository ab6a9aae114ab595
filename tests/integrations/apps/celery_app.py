"""The Celery app the integration tests run real ``celery worker`` processes of.

Configured from the environment by the test that starts the worker: ``RP_BROKER_URL``
(the test's own redis-server), ``RP_PRESENCE_URL`` (unset: no presence, for the
benchmark's baseline), ``RP_PREFIX`` and ``RP_INTERVAL_MS``.
"""

from __future__ import annotations

import os

import redis
from celery import Celery

from redis_presence.integrations.celery import install

BROKER_URL = os.environ["RP_BROKER_URL"]

app = Celery("rp-tests", broker=BROKER_URL)
app.conf.update(
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    task_default_queue="rp-default",
)
if os.environ.get("RP_PRESENCE_URL"):
    install(
        app,
        url=os.environ["RP_PRESENCE_URL"],
        prefix=os.environ.get("RP_PREFIX", "presence"),
        interval_ms=int(os.environ.get("RP_INTERVAL_MS", "200")),
    )

# No socket timeout: `hold` blocks on BLPOP for as long as the test keeps it running.
_control = redis.Redis.from_url(BROKER_URL, socket_timeout=None)


@app.task  # type: ignore[untyped-decorator]
def hold(token: str) -> None:
    """Run until the test pushes to ``rp:release:<token>`` (a long task under its control)."""
    _control.rpush(f"rp:started:{token}", 1)
    _control.blpop([f"rp:release:{token}"], timeout=60)


@app.task  # type: ignore[untyped-decorator]
def tick(key: str) -> None:
    """Count one run in ``key`` (the benchmark's task)."""
    _control.incr(key)

"""The Celery app the beat integration test runs a real ``celery beat`` process of.

Configured from the environment like ``celery_app``: ``RP_BROKER_URL``,
``RP_PRESENCE_URL`` (unset: no presence), ``RP_PREFIX`` and ``RP_INTERVAL_MS``. Its
schedule sends ``celery_app.tick`` once an hour to ``beat-a`` and to the default queue
``beat-default`` (so beat's own loop would sleep for its 300 s maximum between ticks); no
worker reads them in the test.
"""

from __future__ import annotations

import os

from celery import Celery

from redis_presence.integrations.celery_beat import install_beat

app = Celery("rp-beat", broker=os.environ["RP_BROKER_URL"])
app.conf.update(
    broker_connection_retry_on_startup=True,
    task_default_queue="beat-default",
    beat_schedule={
        "hourly-a": {
            "task": "celery_app.tick",
            "schedule": 3600.0,
            "args": ("rp:beat-a",),
            "options": {"queue": "beat-a"},
        },
        "hourly": {"task": "celery_app.tick", "schedule": 3600.0, "args": ("rp:beat-hourly",)},
    },
)
if os.environ.get("RP_PRESENCE_URL"):
    install_beat(
        app,
        url=os.environ["RP_PRESENCE_URL"],
        prefix=os.environ.get("RP_PREFIX", "presence"),
        interval_ms=int(os.environ.get("RP_INTERVAL_MS", "200")),
    )

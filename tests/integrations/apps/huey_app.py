"""The Huey instance the integration tests run real ``huey_consumer`` processes of.

Configured from the environment like ``celery_app``: ``RP_BROKER_URL`` (Redis storage),
``RP_HUEY_NAME`` (the instance's name: its queue), ``RP_PRESENCE_URL`` (unset: no
presence, the benchmark's baseline), ``RP_PREFIX`` and ``RP_INTERVAL_MS``.
"""

from __future__ import annotations

import os

import redis
from huey import RedisHuey

from redis_presence.integrations.huey import install

BROKER_URL = os.environ["RP_BROKER_URL"]

huey = RedisHuey(os.environ["RP_HUEY_NAME"], url=BROKER_URL, results=False)
if os.environ.get("RP_PRESENCE_URL"):
    install(
        huey,
        url=os.environ["RP_PRESENCE_URL"],
        prefix=os.environ.get("RP_PREFIX", "presence"),
        interval_ms=int(os.environ.get("RP_INTERVAL_MS", "200")),
    )

# No socket timeout: `hold` blocks on BLPOP for as long as the test keeps it running.
_control = redis.Redis.from_url(BROKER_URL, socket_timeout=None)


@huey.task()  # type: ignore[untyped-decorator]
def hold(token: str) -> None:
    """Run until the test pushes to ``rp:release:<token>`` (a long task under its control)."""
    _control.rpush(f"rp:started:{token}", 1)
    _control.blpop([f"rp:release:{token}"], timeout=60)


@huey.task()  # type: ignore[untyped-decorator]
def tick(key: str) -> None:
    """Count one run in ``key`` (the benchmark's task)."""
    _control.incr(key)

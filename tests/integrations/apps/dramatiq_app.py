"""The Dramatiq broker and actors the integration tests run real ``dramatiq`` workers of.

Configured from the environment like ``celery_app``: ``RP_BROKER_URL``,
``RP_PRESENCE_URL`` (unset: no presence, the benchmark's baseline), ``RP_PREFIX`` and
``RP_INTERVAL_MS``. Every queue the tests use is declared here (a Dramatiq worker reads
the declared queues its ``--queues`` names): ``hold_<queue>`` runs until the test
releases it, ``tick_<queue>`` counts one run.
"""

from __future__ import annotations

import os

import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker

from redis_presence.integrations.dramatiq import PresenceMiddleware

BROKER_URL = os.environ["RP_BROKER_URL"]
QUEUES = [f"{name}-{part}" for name in ("reader", "crash", "drain") for part in "ab"]
BENCH_QUEUES = ["bench-presence", "bench-plain"]

broker = RedisBroker(url=BROKER_URL)  # type: ignore[no-untyped-call]
if os.environ.get("RP_PRESENCE_URL"):
    broker.add_middleware(
        PresenceMiddleware(
            url=os.environ["RP_PRESENCE_URL"],
            prefix=os.environ.get("RP_PREFIX", "presence"),
            interval_ms=int(os.environ.get("RP_INTERVAL_MS", "200")),
        )
    )
dramatiq.set_broker(broker)

# No socket timeout: `hold` blocks on BLPOP for as long as the test keeps it running.
_control = redis.Redis.from_url(BROKER_URL, socket_timeout=None)


def actor_name(kind: str, queue: str) -> str:
    return f"{kind}_{queue.replace('-', '_')}"


def _hold(token: str) -> None:
    _control.rpush(f"rp:started:{token}", 1)
    _control.blpop([f"rp:release:{token}"], timeout=60)


def _tick(key: str) -> None:
    _control.incr(key)


for _queue in QUEUES:
    dramatiq.actor(actor_name=actor_name("hold", _queue), queue_name=_queue)(_hold)
for _queue in BENCH_QUEUES:
    dramatiq.actor(actor_name=actor_name("tick", _queue), queue_name=_queue)(_tick)

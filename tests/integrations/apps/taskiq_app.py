"""The Taskiq broker the integration tests run real ``taskiq worker`` processes of.

``RP_TASKIQ_BROKER`` picks taskiq-redis's ``list`` (``ListQueueBroker`` as the docs set it
up: ``socket_timeout=None``), ``list-default`` (the same with redis-py's default socket
timeout, under which idle worker processes die) or ``stream`` (``RedisStreamBroker``,
consumer group ``rp-stream-group``, consumer ``<RP_NAME>-consumer``) on
``RP_BROKER_URL``, reading the queue ``RP_NAME``; presence goes to ``RP_PRESENCE_URL``
(unset: no presence, the benchmark's baseline) under ``RP_PREFIX`` every
``RP_INTERVAL_MS``. ``scheduler`` (for ``taskiq scheduler``) sends ``scheduled`` every
second.
"""

from __future__ import annotations

import os

import redis.asyncio
from taskiq import AsyncBroker, TaskiqScheduler
from taskiq.schedule_sources import LabelScheduleSource
from taskiq_redis import ListQueueBroker, RedisStreamBroker

from redis_presence.integrations.taskiq import PresenceMiddleware

BROKER_URL = os.environ["RP_BROKER_URL"]
NAME = os.environ["RP_NAME"]
STREAM_GROUP = "rp-stream-group"

broker: AsyncBroker
if os.environ.get("RP_TASKIQ_BROKER", "list") == "stream":
    broker = RedisStreamBroker(
        BROKER_URL,
        queue_name=NAME,
        consumer_group_name=STREAM_GROUP,
        consumer_name=f"{NAME}-consumer",
        consumer_id="0",
    )
elif os.environ.get("RP_TASKIQ_BROKER") == "list-default":
    broker = ListQueueBroker(BROKER_URL, queue_name=NAME)
else:  # as docs/integrations/taskiq.md sets it up: BRPOP waits with no timeout
    broker = ListQueueBroker(BROKER_URL, queue_name=NAME, socket_timeout=None)
if os.environ.get("RP_PRESENCE_URL"):
    broker.add_middlewares(
        PresenceMiddleware(
            url=os.environ["RP_PRESENCE_URL"],
            prefix=os.environ.get("RP_PREFIX", "presence"),
            interval_ms=int(os.environ.get("RP_INTERVAL_MS", "200")),
        )
    )

# No socket timeout: `hold` blocks on BLPOP for as long as the test keeps it running.
control = redis.asyncio.Redis.from_url(BROKER_URL, socket_timeout=None)


@broker.task(task_name="hold")
async def hold(token: str) -> None:
    """Run until the test pushes to ``rp:release:<token>`` (a long task under its control)."""
    await control.rpush(f"rp:started:{token}", 1)
    await control.blpop([f"rp:release:{token}"], timeout=60)


@broker.task(task_name="tick")
async def tick(key: str) -> None:
    """Count one run in ``key`` (the benchmark's task)."""
    await control.incr(key)


@broker.task(task_name="scheduled", schedule=[{"interval": 1, "args": ["rp:taskiq-scheduled"]}])
async def scheduled(key: str) -> None:
    """What the scheduler sends every second (no worker reads its queue in the test)."""
    await control.incr(key)


scheduler = TaskiqScheduler(broker, [LabelScheduleSource(broker)])

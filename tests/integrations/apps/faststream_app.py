"""The FastStream application the integration tests run with ``faststream run``.

``RP_BROKER`` picks the broker (``redis``, ``rabbit`` or ``nats``) at ``RP_BROKER_URL``;
``RP_NAME`` names the worker, whose two subscribers read ``<name>-a`` and ``<name>-b``
(prefixed with ``RP_RUN`` on the shared RabbitMQ and NATS, so tests never meet another
run's queues); presence goes to ``RP_PRESENCE_URL`` (unset: no presence) under
``RP_PREFIX`` every ``RP_INTERVAL_MS``. Each message is a token: the handler tells
``RP_CONTROL_URL`` (a Redis) that it started, then runs until the test releases it.
"""

from __future__ import annotations

import os
from typing import Any

import redis.asyncio
from faststream import FastStream

from redis_presence.integrations.faststream import PresenceMiddleware

KIND = os.environ["RP_BROKER"]
NAME = os.environ["RP_NAME"]
RUN = os.environ.get("RP_RUN", "")
QUEUE_A, QUEUE_B = f"{RUN}{NAME}-a", f"{RUN}{NAME}-b"
STREAM_GROUP = "rp-stream-group"
NATS_QUEUE_GROUP = "rp-workers"
MAX_WORKERS = 2
"""The Redis list subscriber's (a concurrent subscriber): its row's capacity."""

middlewares: list[Any] = []
presence: PresenceMiddleware | None = None
if os.environ.get("RP_PRESENCE_URL"):
    presence = PresenceMiddleware(
        url=os.environ["RP_PRESENCE_URL"],
        prefix=os.environ.get("RP_PREFIX", "presence"),
        interval_ms=int(os.environ.get("RP_INTERVAL_MS", "200")),
    )
    middlewares.append(presence)

# No socket timeout: a handler blocks on BLPOP for as long as the test keeps it running.
control = redis.asyncio.Redis.from_url(os.environ["RP_CONTROL_URL"], socket_timeout=None)


async def hold(token: str) -> None:
    await control.rpush(f"rp:started:{token}", 1)
    await control.blpop([f"rp:release:{token}"], timeout=60)


broker: Any
if KIND == "redis":
    from faststream.redis import RedisBroker, StreamSub

    broker = RedisBroker(os.environ["RP_BROKER_URL"], middlewares=middlewares)
    # A Redis Streams consumer group: the row names the stream's own consumer.
    stream = StreamSub(QUEUE_A, group=STREAM_GROUP, consumer=f"{NAME}-consumer")
    broker.subscriber(stream=stream)(hold)
    broker.subscriber(list=QUEUE_B, max_workers=MAX_WORKERS)(hold)
elif KIND == "rabbit":
    from faststream.rabbit import RabbitBroker, RabbitQueue

    broker = RabbitBroker(os.environ["RP_BROKER_URL"], middlewares=middlewares)
    for queue in (QUEUE_A, QUEUE_B):  # auto_delete: gone from the shared server after us
        broker.subscriber(RabbitQueue(queue, auto_delete=True))(hold)
elif KIND == "nats":
    from faststream.nats import NatsBroker

    broker = NatsBroker(os.environ["RP_BROKER_URL"], middlewares=middlewares)
    for subject in (QUEUE_A, QUEUE_B):
        broker.subscriber(subject, queue=NATS_QUEUE_GROUP)(hold)
else:
    raise SystemExit(f"unknown RP_BROKER {KIND!r}")

app = FastStream(broker)
if presence is not None:
    presence.install(app)

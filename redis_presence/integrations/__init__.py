"""Presence where consumers run: one module per framework, each behind its own extra.

- `redis_presence.integrations.streams`: Redis Streams consumer groups (no extra needed):
  `StreamReader` beats on every ``XREADGROUP`` in the same round trip, and
  `reap_stream_consumers` moves a dead consumer's pending entries to a live one and only
  then removes it.
- `redis_presence.integrations.celery` (``pip install 'redis-presence[celery]'``):
  ``install(app, url=...)`` makes every Celery worker report itself.
- `redis_presence.integrations.celery_beat` (``redis-presence[celery]``):
  ``install_beat(app, url=...)`` makes ``celery beat`` a consumer of group ``scheduler``.
- `redis_presence.integrations.dramatiq` (``redis-presence[dramatiq]``): the
  ``PresenceMiddleware`` of a Dramatiq broker.
- `redis_presence.integrations.faststream` (``redis-presence[faststream]``): the
  ``PresenceMiddleware`` of a FastStream broker, with ``presence.install(app)``.
- `redis_presence.integrations.rq` (``redis-presence[rq]``): ``PresenceWorker``, an RQ
  worker class (``rq worker -w ...``, django-rq's ``RQ['WORKER_CLASS']``), and its
  scheduler with ``--with-scheduler``.
- `redis_presence.integrations.huey` (``redis-presence[huey]``): ``install(huey, url=...)``
  makes every worker of a ``huey_consumer`` report itself.
- `redis_presence.integrations.taskiq` (``redis-presence[taskiq]``): the
  ``PresenceMiddleware`` of a Taskiq broker (taskiq-redis's brokers), which wraps the
  broker's ``listen()`` so that idle workers beat too.

Importing this package imports no framework; each module imports its framework only
when it is itself imported.
"""

from __future__ import annotations

__all__: list[str] = []

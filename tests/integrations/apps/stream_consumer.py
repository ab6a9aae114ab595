"""A Redis Streams consumer loop on a `StreamReader`, run as a real process by the tests.

``RP_PRESENCE_URL`` holds both the stream and presence (under ``RP_PREFIX``); it reads
``RP_STREAM`` in group ``RP_GROUP`` as ``RP_CONSUMER``, waiting ``RP_BLOCK_MS`` per read,
acknowledges every entry it gets, and on SIGTERM finishes its read and deregisters.
"""

from __future__ import annotations

import os
import signal
from types import FrameType

import redis

from redis_presence import RedisPresenceRegistry
from redis_presence.integrations.streams import StreamReader

STREAM, GROUP = os.environ["RP_STREAM"], os.environ["RP_GROUP"]
stopping = False


def stop(signum: int, frame: FrameType | None) -> None:
    global stopping  # noqa: PLW0603 - the loop's one flag
    stopping = True


def main() -> None:
    signal.signal(signal.SIGTERM, stop)
    registry = RedisPresenceRegistry.from_url(
        os.environ["RP_PRESENCE_URL"], prefix=os.environ.get("RP_PREFIX", "presence")
    )
    try:
        registry.client.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    except redis.ResponseError as exc:  # BUSYGROUP: another consumer made it first
        if "BUSYGROUP" not in str(exc):
            raise
    reader = StreamReader(
        registry,
        STREAM,
        GROUP,
        os.environ["RP_CONSUMER"],
        block_ms=int(os.environ.get("RP_BLOCK_MS", "100")),
        ttl_ms=int(os.environ.get("RP_TTL_MS", "1000")),
    )
    print("reading", flush=True)
    while not stopping:
        for entry_id, _fields in reader.read(count=10):
            reader.ack(entry_id)
    reader.close()
    registry.close()


if __name__ == "__main__":
    main()

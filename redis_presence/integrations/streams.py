"""Redis Streams consumer groups: remove dead consumers without losing their entries.

Redis never removes a consumer of a group, and ``XGROUP DELCONSUMER`` discards the entries
it holds (redis/redis #11567, #9745, #13602), so groups whose consumers get a fresh name
on every start fill up with dead ones. Presence tells the dead from the living:
`reap_stream_consumers` moves a dead consumer's pending entries to a live consumer of the
same group and only then removes it (and deregisters it from presence). Here ``queue`` is
the stream key, ``group`` the consumer group and ``consumer`` the consumer name, the names
every integration of this package reports for a stream.

`StreamReader` (and `AsyncStreamReader`) is the read side: every ``XREADGROUP`` of a
consumer loop, empty ones included, carries the consumer's heartbeat in the same pipeline
(one round trip on a standalone server), with ``lease_count`` = the entries delivered to
it and not acknowledged through the reader's own `ack`; an `ack` that Redis took is
progress (``last_progress_ns``), carried by the next read's beat.

For the reaper, the stream's client and the presence registry are separate, so the stream
may live on another server, or another cluster node, than the presence keys.
"""

from __future__ import annotations

from ._stream_reader import DEFAULT_BLOCK_MS, AsyncStreamReader, Entry, StreamReader
from ._stream_reaper import (
    MAX_ENTRIES_PER_CALL,
    NO_TARGET,
    UNSEEN,
    ReapedConsumer,
    StreamReap,
    reap_stream_consumers,
)

__all__ = [
    "DEFAULT_BLOCK_MS",
    "MAX_ENTRIES_PER_CALL",
    "NO_TARGET",
    "UNSEEN",
    "AsyncStreamReader",
    "Entry",
    "ReapedConsumer",
    "StreamReader",
    "StreamReap",
    "reap_stream_consumers",
]

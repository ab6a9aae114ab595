"""Consumer groups on a real stream, for the Streams tests: set-up, reads, presence beats at
a fixed instant, and the no-entry-lost check."""

from __future__ import annotations

from typing import Any

from waiting import wait_until

from redis_presence import RedisPresenceRegistry

STREAMS_PREFIX = "it-streams"
STREAM = "orders"
GROUP = "billing"
TTL_MS = 100
HORIZON_MS = 2 * TTL_MS
NOW_NS = 1_796_000_000_000_000_000
MS = 1_000_000
IDLE_MARGIN_MS = 50


def make_group(client: Any, entries: int, stream: str = STREAM) -> list[bytes]:
    client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    pipe = client.pipeline(transaction=False)
    for i in range(entries):
        pipe.xadd(stream, {"n": i})
    return list(pipe.execute())


def read(client: Any, consumer: str, count: int, stream: str = STREAM) -> list[bytes]:
    """`consumer` reads `count` new entries (they become its pending entries)."""
    reply = client.xreadgroup(GROUP, consumer, {stream: ">"}, count=count)
    return [entry_id for _, entries in reply for entry_id, _ in entries]


def beat(
    registry: RedisPresenceRegistry,
    consumer: str,
    age_ms: int,
    stream: str = STREAM,
    *,
    lease_count: int = 0,
) -> None:
    """A heartbeat `age_ms` before NOW_NS, the instant the reaps judge presence at."""
    registry.heartbeat(stream, GROUP, consumer, lease_count, now_ns=NOW_NS - age_ms * MS)


def pending_of(client: Any, stream: str = STREAM) -> dict[str, set[bytes]]:
    """consumer -> ids of its pending entries; every consumer the group lists."""
    out: dict[str, set[bytes]] = {}
    for info in client.xinfo_consumers(stream, GROUP):
        name = info["name"].decode() if isinstance(info["name"], bytes) else info["name"]
        rows = client.xpending_range(stream, GROUP, "-", "+", 10_000, name)
        out[name] = {row["message_id"] for row in rows}
    return out


def assert_nothing_lost(client: Any, delivered: set[bytes], stream: str = STREAM) -> None:
    held = [entry for ids in pending_of(client, stream).values() for entry in ids]
    assert len(held) == len(set(held))  # no entry in two pending lists
    assert set(held) == delivered


def idle_past_horizon(client: Any, *consumers: str, stream: str = STREAM) -> None:
    """Wait until Redis has not seen `consumers` read for longer than the horizon, and their
    entries are older than it too (Redis stamps a consumer and the entries one read gives it
    from two clock readings, which can be a millisecond or so apart: hence the margin)."""

    def idle() -> bool:
        info = {
            (i["name"].decode() if isinstance(i["name"], bytes) else i["name"]): int(i["idle"])
            for i in client.xinfo_consumers(stream, GROUP)
        }
        return all(info[c] > HORIZON_MS + IDLE_MARGIN_MS for c in consumers)

    wait_until(idle, timeout_s=10, what=f"{consumers} idle past {HORIZON_MS} ms")

"""ConsumerPresenceRegistry: the process-local registry and the reference model."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from .model import DEFAULT_PRESENCE_TTL_MS, ConsumerPresence, PresenceState, age_ms
from .validation import (
    Beat,
    ConsumerKey,
    check_beats,
    check_consumer_key,
    check_lease_count,
    check_now_ns,
    check_ttl_ms,
)


def _state(now_ns: int, last_heartbeat_ns: int, ttl_ms: int) -> PresenceState:
    return PresenceState.classify(age_ms(now_ns, last_heartbeat_ns), ttl_ms)


class ConsumerPresenceRegistry:
    """Presence held in this process: a mutex and a dict, O(1) writes, one copy per read.

    It offers the same methods as `RedisPresenceRegistry`, with `now_ns=None` meaning
    `time.time_ns()`, and is the model every other backend is tested against.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (queue, group, consumer) -> [registered_at_ns, last_heartbeat_ns, lease_count]
        self._rows: dict[ConsumerKey, tuple[int, int, int]] = {}

    def heartbeat(
        self,
        queue: str,
        group: str,
        consumer: str,
        lease_count: int = 0,
        now_ns: int | None = None,
    ) -> None:
        """Record or refresh one consumer; the first beat fixes `registered_at_ns`."""
        key = check_consumer_key(queue, group, consumer)
        lease = check_lease_count(lease_count)
        now = check_now_ns(now_ns)
        stamp = time.time_ns() if now is None else now
        with self._lock:
            old = self._rows.get(key)
            self._rows[key] = (stamp if old is None else old[0], stamp, lease)

    def heartbeat_many(self, beats: Iterable[Beat], now_ns: int | None = None) -> int:
        """Apply many `(queue, group, consumer, lease_count)` beats; returns how many."""
        checked = check_beats(beats)
        now = check_now_ns(now_ns)
        stamp = time.time_ns() if now is None else now
        with self._lock:
            for queue, group, consumer, lease in checked:
                old = self._rows.get((queue, group, consumer))
                self._rows[(queue, group, consumer)] = (
                    stamp if old is None else old[0],
                    stamp,
                    lease,
                )
        return len(checked)

    def snapshot(
        self, now_ns: int | None = None, ttl_ms: int = DEFAULT_PRESENCE_TTL_MS
    ) -> list[ConsumerPresence]:
        """Every tracked consumer, ordered by `(queue, group, consumer)`."""
        ttl = check_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        with self._lock:
            rows = sorted(self._rows.items())
        stamp = time.time_ns() if now is None else now
        return ConsumerPresence.many(
            ((*key, *value) for key, value in rows), now_ns=stamp, ttl_ms=ttl
        )

    def count_active_by_group(
        self, now_ns: int | None = None, ttl_ms: int = DEFAULT_PRESENCE_TTL_MS
    ) -> dict[tuple[str, str], int]:
        """Active consumers per `(queue, group)`; groups with none are absent."""
        ttl = check_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        stamp = time.time_ns() if now is None else now
        counts: dict[tuple[str, str], int] = {}
        with self._lock:
            for (queue, group, _), (_, hb, _) in self._rows.items():
                if _state(stamp, hb, ttl) is PresenceState.ACTIVE:
                    counts[(queue, group)] = counts.get((queue, group), 0) + 1
        return counts

    def prune_expired(
        self, now_ns: int | None = None, ttl_ms: int = DEFAULT_PRESENCE_TTL_MS
    ) -> int:
        """Drop exactly the consumers `snapshot` would call expired; returns how many."""
        ttl = check_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        stamp = time.time_ns() if now is None else now
        with self._lock:
            doomed = [
                key
                for key, (_, hb, _) in self._rows.items()
                if _state(stamp, hb, ttl) is PresenceState.EXPIRED
            ]
            for key in doomed:
                del self._rows[key]
        return len(doomed)

    def deregister(self, queue: str, group: str, consumer: str) -> bool:
        """Forget one consumer (graceful shutdown); returns whether it was tracked."""
        key = check_consumer_key(queue, group, consumer)
        with self._lock:
            return self._rows.pop(key, None) is not None

    def __len__(self) -> int:
        with self._lock:
            return len(self._rows)

    def __repr__(self) -> str:
        return f"ConsumerPresenceRegistry(<{len(self)} consumers>)"

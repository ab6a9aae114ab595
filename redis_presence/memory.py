"""ConsumerPresenceRegistry: the process-local registry and the reference model."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator

from .model import DEFAULT_PRESENCE_TTL_MS, ConsumerPresence, PresenceState, age_ms
from .validation import (
    Beat,
    ConsumerKey,
    check_beats,
    check_consumer_key,
    check_filter,
    check_lease_count,
    check_name,
    check_now_ns,
    check_ttl_ms,
)


def _state(now_ns: int, last_heartbeat_ns: int, ttl_ms: int) -> PresenceState:
    return PresenceState.classify(age_ms(now_ns, last_heartbeat_ns), ttl_ms)


def _matches(key: ConsumerKey, queue: str | None, group: str | None) -> bool:
    return (queue is None or key[0] == queue) and (group is None or key[1] == group)


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
        self,
        now_ns: int | None = None,
        ttl_ms: int = DEFAULT_PRESENCE_TTL_MS,
        *,
        queue: str | None = None,
        group: str | None = None,
    ) -> list[ConsumerPresence]:
        """Every tracked consumer (of one queue, or one group), ordered by `(queue, group,
        consumer)`."""
        ttl = check_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        queue, group = check_filter("queue", queue), check_filter("group", group)
        with self._lock:
            rows = sorted(item for item in self._rows.items() if _matches(item[0], queue, group))
        stamp = time.time_ns() if now is None else now
        return ConsumerPresence.many(
            ((*key, *value) for key, value in rows), now_ns=stamp, ttl_ms=ttl
        )

    def iter_snapshot(
        self,
        now_ns: int | None = None,
        ttl_ms: int = DEFAULT_PRESENCE_TTL_MS,
        *,
        queue: str | None = None,
        group: str | None = None,
    ) -> Iterator[ConsumerPresence]:
        """The rows of `snapshot` (checked at once, yielded one by one)."""
        return iter(self.snapshot(now_ns, ttl_ms, queue=queue, group=group))

    def count_active_by_group(
        self,
        now_ns: int | None = None,
        ttl_ms: int = DEFAULT_PRESENCE_TTL_MS,
        *,
        queue: str | None = None,
        group: str | None = None,
    ) -> dict[tuple[str, str], int]:
        """Active consumers per `(queue, group)`; groups with none are absent."""
        ttl = check_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        queue, group = check_filter("queue", queue), check_filter("group", group)
        stamp = time.time_ns() if now is None else now
        counts: dict[tuple[str, str], int] = {}
        with self._lock:
            for key, (_, hb, _) in self._rows.items():
                if _matches(key, queue, group) and _state(stamp, hb, ttl) is PresenceState.ACTIVE:
                    counts[key[:2]] = counts.get(key[:2], 0) + 1
        return counts

    def count_active(
        self,
        queue: str,
        group: str,
        now_ns: int | None = None,
        ttl_ms: int = DEFAULT_PRESENCE_TTL_MS,
    ) -> int:
        """Active consumers of one group (0 when it has none)."""
        queue, group = check_name("queue", queue), check_name("group", group)
        found = self.count_active_by_group(now_ns, ttl_ms, queue=queue, group=group)
        return found.get((queue, group), 0)

    def prune_expired(
        self,
        now_ns: int | None = None,
        ttl_ms: int = DEFAULT_PRESENCE_TTL_MS,
        *,
        queue: str | None = None,
        group: str | None = None,
    ) -> int:
        """Drop exactly the consumers `snapshot` would call expired; returns how many."""
        ttl = check_ttl_ms(ttl_ms)
        now = check_now_ns(now_ns)
        queue, group = check_filter("queue", queue), check_filter("group", group)
        stamp = time.time_ns() if now is None else now
        with self._lock:
            doomed = [
                key
                for key, (_, hb, _) in self._rows.items()
                if _matches(key, queue, group) and _state(stamp, hb, ttl) is PresenceState.EXPIRED
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

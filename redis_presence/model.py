"""The presence contract: states, rows and the one classification rule."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, fields

DEFAULT_PRESENCE_TTL_MS = 30_000
"""Default heartbeat budget: a consumer is active for this long after its last beat."""

NS_PER_MS = 1_000_000
NS_PER_US = 1_000


class PresenceState(str, enum.Enum):
    """Lifecycle bucket derived from a consumer's age against the heartbeat budget."""

    ACTIVE = "active"
    STALE = "stale"
    EXPIRED = "expired"

    @classmethod
    def classify(cls, age_ms: int, ttl_ms: int) -> PresenceState:
        """`age_ms <= ttl_ms` is active, `<= 2 * ttl_ms` is stale, anything older is expired."""
        if age_ms <= ttl_ms:
            return cls.ACTIVE
        if age_ms <= 2 * ttl_ms:
            return cls.STALE
        return cls.EXPIRED

    @staticmethod
    def horizons_ns(now_ns: int, ttl_ms: int) -> tuple[int, int]:
        """`(active_after_ns, expired_at_ns)`: at `now_ns`, `classify` calls a heartbeat at
        `hb` active iff `hb > active_after_ns`, expired iff `hb <= expired_at_ns`, else stale.

        With `age = max(0, now - hb) // 1 ms`: `age <= ttl` iff `now - hb < (ttl + 1) ms`,
        and `age > 2 ttl` iff `now - hb >= (2 ttl + 1) ms` (a future beat is active). The
        Lua scripts use the same two horizons; tests check them against `classify`.
        """
        return now_ns - (ttl_ms + 1) * NS_PER_MS, now_ns - (2 * ttl_ms + 1) * NS_PER_MS

    def __str__(self) -> str:
        return self.value


def age_ms(now_ns: int, last_heartbeat_ns: int) -> int:
    """Whole milliseconds since the last beat; a beat from the reader's future has age 0."""
    return max(0, now_ns - last_heartbeat_ns) // NS_PER_MS


@dataclass(frozen=True, slots=True)
class ConsumerPresence:
    """One tracked consumer as seen at one instant."""

    queue: str
    group: str
    consumer: str
    registered_at_ns: int
    last_heartbeat_ns: int
    last_seen_age_ms: int
    lease_count: int
    state: PresenceState

    @classmethod
    def at(
        cls,
        queue: str,
        group: str,
        consumer: str,
        registered_at_ns: int,
        last_heartbeat_ns: int,
        lease_count: int,
        *,
        now_ns: int,
        ttl_ms: int,
    ) -> ConsumerPresence:
        """Build the row for a stored consumer, deriving age and state at `now_ns`."""
        age = age_ms(now_ns, last_heartbeat_ns)
        return cls(
            queue,
            group,
            consumer,
            registered_at_ns,
            last_heartbeat_ns,
            age,
            lease_count,
            PresenceState.classify(age, ttl_ms),
        )

    @classmethod
    def many(
        cls, stored: Iterable[StoredConsumer], *, now_ns: int, ttl_ms: int
    ) -> list[ConsumerPresence]:
        """The rows `at` builds, one per stored consumer, in order; without `at`'s per-row
        calls (ages and states from the two `PresenceState.horizons_ns`, fields set directly)."""
        active_after, expired_at = PresenceState.horizons_ns(now_ns, ttl_ms)
        active, stale, expired = PresenceState.ACTIVE, PresenceState.STALE, PresenceState.EXPIRED
        new = object.__new__
        q_, g_, c_, reg_, hb_, age_, lease_, state_ = _SETTERS
        rows: list[ConsumerPresence] = []
        append = rows.append
        for queue, group, consumer, registered, heartbeat, lease in stored:
            row = new(cls)
            q_(row, queue)
            g_(row, group)
            c_(row, consumer)
            reg_(row, registered)
            hb_(row, heartbeat)
            age_(row, (now_ns - heartbeat) // NS_PER_MS if heartbeat < now_ns else 0)
            lease_(row, lease)
            if heartbeat > active_after:
                state_(row, active)
            elif heartbeat > expired_at:
                state_(row, stale)
            else:
                state_(row, expired)
            append(row)
        return rows

    @property
    def key(self) -> tuple[str, str, str]:
        """The identity of the consumer: `(queue, group, consumer)`."""
        return (self.queue, self.group, self.consumer)

    def to_dict(self) -> dict[str, object]:
        """Plain JSON-ready mapping with the field names of this class."""
        return {
            "queue": self.queue,
            "group": self.group,
            "consumer": self.consumer,
            "registered_at_ns": self.registered_at_ns,
            "last_heartbeat_ns": self.last_heartbeat_ns,
            "last_seen_age_ms": self.last_seen_age_ms,
            "lease_count": self.lease_count,
            "state": self.state.value,
        }


StoredConsumer = tuple[str, str, str, int, int, int]
"""What is stored of one consumer: `(queue, group, consumer, registered_at_ns,
last_heartbeat_ns, lease_count)`."""

# The slot descriptors of the frozen row: `many` fills a row through them, which costs about
# half of the dataclass `__init__` (eight `object.__setattr__` calls in a Python frame).
# `many` unpacks them in declaration order: queue, group, consumer, registered_at_ns,
# last_heartbeat_ns, last_seen_age_ms, lease_count, state.
_SETTERS = tuple(getattr(ConsumerPresence, f.name).__set__ for f in fields(ConsumerPresence))

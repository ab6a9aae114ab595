"""The presence contract: states, rows and the one classification rule."""

from __future__ import annotations

import enum
from dataclasses import dataclass

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

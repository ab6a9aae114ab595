"""`PresenceRegistry`: the methods every synchronous registry of the package offers.

Type against it to accept `RedisPresenceRegistry` and `ConsumerPresenceRegistry` alike
(the CLI, the demo brokers and the test suite do); it is `runtime_checkable`, so
`isinstance` checks that the methods exist (not their signatures).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol, runtime_checkable

from .events import FollowMessage, PresenceEvent
from .model import ConsumerPresence, GroupPresence
from .validation import Beat

__all__ = ["PresenceRegistry"]


@runtime_checkable
class PresenceRegistry(Protocol):
    """Heartbeat, snapshot (whole or streamed), counts, prune and deregister, the shared TTL
    and the events, metadata, the progress budget and declared groups, with the contract's
    signatures; `queue` / `group` filter a read to one
    queue or one group, and `ttl_ms` None is the shared TTL."""

    def heartbeat(
        self,
        queue: str,
        group: str,
        consumer: str,
        lease_count: int = 0,
        now_ns: int | None = None,
        *,
        progressed: bool = False,
    ) -> None: ...

    def heartbeat_many(self, beats: Iterable[Beat], now_ns: int | None = None) -> int: ...

    def clock_ns(self) -> int: ...

    def snapshot(
        self,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        queue: str | None = None,
        group: str | None = None,
        stuck_after_ms: int | None = None,
        with_meta: bool = False,
    ) -> list[ConsumerPresence]: ...

    def iter_snapshot(
        self,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        queue: str | None = None,
        group: str | None = None,
        stuck_after_ms: int | None = None,
        with_meta: bool = False,
    ) -> Iterator[ConsumerPresence]: ...

    def count_active_by_group(
        self,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        queue: str | None = None,
        group: str | None = None,
    ) -> dict[tuple[str, str], int]: ...

    def count_active(
        self,
        queue: str,
        group: str,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
    ) -> int: ...

    def consumer(
        self,
        queue: str,
        group: str,
        consumer: str,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        stuck_after_ms: int | None = None,
    ) -> ConsumerPresence | None: ...

    def prune_expired(
        self,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        queue: str | None = None,
        group: str | None = None,
    ) -> int: ...

    def deregister(
        self, queue: str, group: str, consumer: str, now_ns: int | None = None
    ) -> bool: ...

    def describe(self, queue: str, group: str, consumer: str, meta: dict[str, str]) -> bool: ...

    def expect(self, queue: str, group: str, min_active: int = 1) -> None: ...

    def unexpect(self, queue: str, group: str) -> bool: ...

    def expected(self) -> dict[tuple[str, str], int]: ...

    def min_active(self, queue: str, group: str) -> int | None: ...

    def groups(
        self, now_ns: int | None = None, ttl_ms: int | None = None, *, details: bool = False
    ) -> list[GroupPresence]: ...

    def set_stuck_after(
        self, stuck_after_ms: int | None, *, queue: str | None = None, group: str | None = None
    ) -> None: ...

    def stuck_after(self, queue: str | None = None, group: str | None = None) -> int: ...

    def stuck_after_source(
        self, queue: str | None = None, group: str | None = None
    ) -> tuple[int, str]: ...

    def set_ttl(
        self, ttl_ms: int | None, *, queue: str | None = None, group: str | None = None
    ) -> None: ...

    def ttl(self, queue: str | None = None, group: str | None = None) -> int: ...

    def ttl_source(self, queue: str | None = None, group: str | None = None) -> tuple[int, str]: ...

    def ttl_sources(
        self, groups: Iterable[tuple[str, str]]
    ) -> dict[tuple[str, str], tuple[int, str]]: ...

    def changes(
        self,
        cursor: str | None = None,
        *,
        now_ns: int | None = None,
        queue: str | None = None,
        group: str | None = None,
    ) -> tuple[list[PresenceEvent], str]: ...

    def follow(
        self,
        *,
        cursor: str | None = None,
        interval_s: float = ...,
        queue: str | None = None,
        group: str | None = None,
    ) -> Iterator[FollowMessage]: ...

    def __len__(self) -> int: ...

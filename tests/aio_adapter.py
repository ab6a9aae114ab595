"""Run an `AsyncRedisPresenceRegistry` from synchronous tests, on a private event loop.

`SyncAdapter(make)` builds the async registry inside its own loop (so the asyncio client's
connections belong to that loop) and turns every coroutine method into a plain call;
``len()`` awaits `size()`. The contract suite then runs unchanged against the async
registry.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, TypeVar

from redis_presence import AsyncRedisPresenceRegistry

T = TypeVar("T")


async def _collect(rows: AsyncIterator[T]) -> list[T]:
    return [row async for row in rows]


class SyncAdapter:
    """The registry `make()` returns, with its coroutines run to completion on each call."""

    def __init__(self, make: Callable[[], AsyncRedisPresenceRegistry]) -> None:
        self._loop = asyncio.new_event_loop()
        self.registry: AsyncRedisPresenceRegistry = self.run(self._make(make))

    @staticmethod
    async def _make(make: Callable[[], AsyncRedisPresenceRegistry]) -> AsyncRedisPresenceRegistry:
        return make()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run one coroutine on the adapter's loop and return its result."""
        return self._loop.run_until_complete(coroutine)

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.registry, name)
        if name == "iter_snapshot":  # an async iterator: collected on the adapter's loop
            return lambda *args, **kwargs: iter(self.run(_collect(attribute(*args, **kwargs))))
        if not inspect.iscoroutinefunction(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            return self.run(attribute(*args, **kwargs))

        return call

    def __len__(self) -> int:
        return self.run(self.registry.size())

    def close(self) -> None:
        """Close the registry's client (whoever opened it) and the loop."""
        if self._loop.is_closed():
            return
        self.run(self.registry.client.aclose())
        self._loop.close()

    def __repr__(self) -> str:
        return f"SyncAdapter({self.registry!r})"

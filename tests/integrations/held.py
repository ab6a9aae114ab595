"""What the RQ, Huey and Taskiq tests share: waiting for one TTL to pass while a job runs."""

from __future__ import annotations

from waiting import wait_until

from integrations.workers import Presence


def wait_one_ttl(presence: Presence, ttl_ms: int) -> None:
    """Wait until one TTL has passed on the presence server's clock (so a row that was
    not beaten meanwhile would be stale now)."""
    start_ns = presence.server_now_ns()
    wait_until(
        lambda: presence.server_now_ns() - start_ns > ttl_ms * 1_000_000,
        timeout_s=ttl_ms / 1000 + 10,
        what="one TTL to pass",
    )

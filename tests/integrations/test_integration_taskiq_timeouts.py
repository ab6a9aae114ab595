"""Taskiq: the middleware's check of a broker's client, for every taskiq-redis broker that
reads with a blocking command (no server needed: building a broker connects nothing).

A blocking read that outlasts the client's ``socket_timeout`` makes every idle worker
process die of a ``TimeoutError`` and taskiq restart it; the real worker processes that do
so are in test_integration_taskiq.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from taskiq_redis import (
    ListQueueBroker,
    ListQueueClusterBroker,
    ListQueueSentinelBroker,
    PubSubBroker,
    RedisStreamBroker,
    RedisStreamClusterBroker,
    RedisStreamSentinelBroker,
)

from redis_presence.integrations.taskiq import _restart_risk

URL = "redis://127.0.0.1:1/0"  # never connected to
SENTINELS = [("127.0.0.1", 1)]


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda: ListQueueBroker(URL), "ListQueueBroker die of a TimeoutError"),
        (lambda: ListQueueBroker(URL, socket_timeout=30), "wait 30 s for a task"),
        (lambda: ListQueueBroker(URL + "?socket_timeout=30"), "socket_timeout is 30 s"),
        (lambda: ListQueueClusterBroker(URL), "its BRPOP waits with no timeout"),
        (lambda: ListQueueSentinelBroker(SENTINELS, "m"), "its BRPOP waits with no timeout"),
        (
            lambda: RedisStreamBroker(URL, xread_block=10_000),
            "xread_block=10000 ms, and its client's socket_timeout is 5 s; create the broker "
            "with socket_timeout=None (or at least 11 s), or a shorter xread_block",
        ),
        (lambda: RedisStreamBroker(URL, xread_block=4_500), "(or at least 5.5 s)"),
        (lambda: RedisStreamBroker(URL, xread_block=0), "blocks with no timeout"),
        (lambda: RedisStreamClusterBroker(URL), "xread_block=10000 ms"),  # its default
        (lambda: RedisStreamSentinelBroker(SENTINELS, "m"), "xread_block=10000 ms"),
    ],
    ids=[
        "list",
        "list-30s",
        "list-url-30s",
        "list-cluster",
        "list-sentinel",
        "stream-10s",
        "stream-no-margin",
        "stream-block-0",
        "stream-cluster",
        "stream-sentinel",
    ],
)
def test_a_read_that_outlasts_the_socket_timeout_is_named_with_its_setting(
    make: Any, says: str
) -> None:
    risk = _restart_risk(make())
    assert risk is not None
    assert says in risk
    assert "socket_timeout=None" in risk


@pytest.mark.parametrize(
    "make",
    [
        lambda: ListQueueBroker(URL, socket_timeout=None),  # as the docs set it up
        lambda: ListQueueClusterBroker(URL, socket_timeout=None),
        lambda: ListQueueSentinelBroker(SENTINELS, "m", socket_timeout=None),
        lambda: RedisStreamBroker(URL),  # 2 s reads under 5 s
        lambda: RedisStreamBroker(URL, xread_block=4_000),
        lambda: RedisStreamClusterBroker(URL, socket_timeout=11),
        lambda: RedisStreamSentinelBroker(SENTINELS, "m", socket_timeout=None),
        lambda: PubSubBroker(URL),  # not checked: redis-py 8.2 reads pub/sub with no timeout
        object,  # a broker it does not know
    ],
    ids=[
        "list",
        "list-cluster",
        "list-sentinel",
        "stream-default",
        "stream-4s",
        "stream-cluster-11s",
        "stream-sentinel",
        "pubsub",
        "unknown",
    ],
)
def test_a_read_within_the_socket_timeout_is_fine(make: Any) -> None:
    assert _restart_risk(make()) is None

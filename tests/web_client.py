"""The web service under Starlette's test client, for the web tests: `make_client` (a
Host the service answers to, no read cache), the app's `Clock` (every read is aged at it,
never by sleeping), the `clock`, `writer` and `client` fixtures on the session's
redis-server, and the helpers that read a route's path and a scrape's samples.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from prometheus_client.parser import text_string_to_metric_families

with warnings.catch_warnings():
    # Starlette 1.x prefers the httpx2 fork for its test client; httpx, the well-known
    # project, still works and is what the test extra installs.
    warnings.filterwarnings("ignore", "Using `httpx` with `starlette.testclient`")
    from starlette.testclient import TestClient

from redis_presence import RedisPresenceRegistry
from redis_presence.web import WebConfig, create_app

__all__ = [
    "BASE_URL",
    "HOSTILE",
    "MS",
    "ODD",
    "T0",
    "TTL_MS",
    "Clock",
    "TestClient",
    "client",
    "clock",
    "group_path",
    "make_client",
    "metric_samples",
    "writer",
]

TTL_MS = 10_000
MS = 1_000_000
T0 = 1_796_000_000_000 * MS
HOSTILE = "<img src=x onerror=alert(1)>"
ODD = [("a/b", "c d"), ("50%", "line\ntwo"), ("é ü", HOSTILE), ("..", ".")]


class Clock:
    """The app's clock, moved by hand."""

    def __init__(self, start_ns: int = T0) -> None:
        self.now_ns = start_ns

    def __call__(self) -> int:
        return self.now_ns

    def advance_ms(self, ms: int) -> None:
        self.now_ns += ms * MS


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def writer(redis_url: str) -> Iterator[RedisPresenceRegistry]:
    registry = RedisPresenceRegistry.from_url(redis_url, max_future_ms=None)
    try:
        yield registry
    finally:
        registry.close()


BASE_URL = "http://127.0.0.1"


def make_client(
    url: str, clock: Clock | None = None, *, ttl_ms: int | None = TTL_MS, **options: object
) -> TestClient:
    """A test client of the app (`ttl_ms` None: the shared TTL, as without ``--ttl-ms``)."""
    config = WebConfig(url=url, ttl_ms=ttl_ms, read_cache_s=0, **options)  # type: ignore[arg-type]
    # A Host the service answers to (the test client's default, ``testserver``, gets 421).
    return TestClient(
        create_app(config, clock=clock), base_url=BASE_URL, raise_server_exceptions=False
    )


@pytest.fixture
def client(redis_url: str, clock: Clock) -> Iterator[TestClient]:
    with make_client(redis_url, clock) as test_client:
        yield test_client


def group_path(queue: str, group: str) -> str:
    return f"/api/v1/groups/{quote(queue, safe='')}/{quote(group, safe='')}"


def metric_samples(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    return {
        family.name: {tuple(sorted(s.labels.items())): s.value for s in family.samples}
        for family in text_string_to_metric_families(text)
    }

"""Running the `redis-presence` command in tests: click's runner with a clean environment
(`invoke`, failing on any traceback), the one-error-line rule, and the `backend` fixture
(the same data on fakeredis and on a real server, with the registry the test seeds).

Time is controlled with the hidden global `--now-ns`; rows are written with explicit
`now_ns` (`seed` writes four at `NOW`), so ages and states are exact.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from click.testing import CliRunner, Result

from redis_presence import ConsumerPresence, RedisPresenceRegistry
from redis_presence.cli import cli
from redis_presence.cli.app import RegistryFactory
from redis_presence.contract import PresenceRegistry

S = 1_000_000_000
NOW = 1_750_000_000 * S
DEFAULT_TTL_NOTE = "TTL 30000 ms (the default; 'redis-presence ttl set' stores one)"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
COLOUR = re.compile(r"\x1b\[[0-9;]*(3[0-7]|38;|9[0-7])[0-9;]*m")
CLEAN_ENV: dict[str, str | None] = dict.fromkeys(
    (
        "REDIS_PRESENCE_URL",
        "REDIS_URL",
        "REDIS_PRESENCE_PREFIX",
        "REDIS_PRESENCE_TTL_MS",
        "REDIS_PRESENCE_READ_ONLY",
        "NO_COLOR",
        "FORCE_COLOR",
        "COLUMNS",
        "TTY_COMPATIBLE",
        "TTY_INTERACTIVE",
    )
)


def invoke(
    args: Sequence[str], obj: RegistryFactory | None = None, env: dict[str, str] | None = None
) -> Result:
    """Run the CLI; a Python exception escaping it (a traceback) fails the test."""
    result = CliRunner(env={**CLEAN_ENV, **(env or {})}).invoke(cli, list(args), obj=obj)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"traceback from {args}: {result.exception!r}\n{result.output}")
    assert "Traceback" not in result.output
    return result


def one_error_line(result: Result) -> str:
    """The single `Error: ...` line a failing command must print on stderr (and nothing else)."""
    assert result.exit_code != 0
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("Error: ")
    return lines[0]


@dataclass
class Backend:
    """A registry to seed and inspect, and how the CLI reaches the same data."""

    name: str
    url: str
    registry: RedisPresenceRegistry
    factory: RegistryFactory
    obj: RegistryFactory | None  # None: the CLI's own default factory opens `url`

    def run(self, *args: str, obj: RegistryFactory | None = None, **kw: Any) -> Result:
        return invoke(["--url", self.url, *args], obj=obj or self.obj, **kw)

    def at_now(self, *args: str, **kw: Any) -> Result:
        return self.run("--now-ns", str(NOW), *args, **kw)


@pytest.fixture(
    params=[
        pytest.param("fakeredis"),
        pytest.param("redis-server", marks=pytest.mark.redis_server),
    ]
)
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    if request.param == "fakeredis":
        client = request.getfixturevalue("fake_client")

        def fake_factory(url: str, prefix: str, read_only: bool) -> PresenceRegistry:
            return RedisPresenceRegistry(client, prefix=prefix, read_only=read_only)

        registry = RedisPresenceRegistry(client)
        yield Backend("fakeredis", "redis://fake.invalid:1/0", registry, fake_factory, fake_factory)
        return
    url = request.getfixturevalue("redis_url")

    def real_factory(url: str, prefix: str, read_only: bool) -> PresenceRegistry:
        return RedisPresenceRegistry.from_url(url, prefix=prefix, read_only=read_only)

    with RedisPresenceRegistry.from_url(url) as registry:
        yield Backend("redis-server", url, registry, real_factory, None)


def seed(registry: RedisPresenceRegistry) -> None:
    """Four consumers at NOW with the default 30 s TTL: two active, one stale, one expired."""
    registry.heartbeat("orders", "billing", "fresh", lease_count=2, now_ns=NOW - 1 * S)
    registry.heartbeat("orders", "billing", "quiet", now_ns=NOW - 45 * S)
    registry.heartbeat("orders", "shipping", "gone", lease_count=7, now_ns=NOW - 300 * S)
    registry.heartbeat("emails", "sender", "mailer", now_ns=NOW - 2 * S)


def snapshot_dicts(registry: RedisPresenceRegistry) -> list[dict[str, object]]:
    return [row.to_dict() for row in registry.snapshot(now_ns=NOW)]


class Scripted:
    """Wraps a registry: runs `hooks[n]` just before the n-th snapshot (0-based)."""

    def __init__(self, inner: PresenceRegistry, hooks: dict[int, Callable[[], None]]) -> None:
        self.inner = inner
        self.hooks = hooks
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def snapshot(
        self,
        now_ns: int | None = None,
        ttl_ms: int | None = None,
        *,
        queue: str | None = None,
        group: str | None = None,
        stuck_after_ms: int | None = None,
        with_meta: bool = False,
    ) -> list[ConsumerPresence]:
        hook = self.hooks.get(self.reads)
        self.reads += 1
        if hook is not None:
            hook()
        return self.inner.snapshot(
            now_ns=now_ns,
            ttl_ms=ttl_ms,
            queue=queue,
            group=group,
            stuck_after_ms=stuck_after_ms,
            with_meta=with_meta,
        )

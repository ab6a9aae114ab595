"""`redis-presence streams reap` through click's runner, on real redis-servers: the stream
on one, presence on another (``--stream-url`` and ``--url``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result
from servers import free_port

from integrations.stream_groups import (
    GROUP,
    NOW_NS,
    STREAM,
    STREAMS_PREFIX,
    TTL_MS,
    beat,
    idle_past_horizon,
    make_group,
    pending_of,
    read,
)
from redis_presence import RedisPresenceRegistry
from redis_presence.cli import cli

pytestmark = pytest.mark.redis_server

PREFIX = STREAMS_PREFIX

CLEAN_ENV: dict[str, str | None] = dict.fromkeys(
    ("REDIS_PRESENCE_URL", "REDIS_URL", "REDIS_PRESENCE_STREAM_URL", "REDIS_PRESENCE_READ_ONLY")
)


def url_of(client: redis.Redis) -> str:
    kwargs = client.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/{kwargs.get('db', 0)}"


def reap(
    presence: redis.Redis, stream: redis.Redis, *args: str, glob: Sequence[str] = ()
) -> Result:
    argv = ["--url", url_of(presence), "--prefix", PREFIX, "--ttl-ms", str(TTL_MS)]
    argv += ["--now-ns", str(NOW_NS), *glob, "streams", "reap", "--stream-url", url_of(stream)]
    argv += ["--stream", STREAM, "--group", GROUP, *args]
    result = CliRunner(env=CLEAN_ENV).invoke(cli, argv)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


@pytest.fixture
def dead_and_live(
    stream_client: redis.Redis,
    registry: RedisPresenceRegistry,
) -> set[bytes]:
    make_group(stream_client, 6)
    delivered = set(read(stream_client, "dead", 3)) | set(read(stream_client, "live", 1))
    beat(registry, "dead", 10 * TTL_MS)
    beat(registry, "live", 0)
    idle_past_horizon(stream_client, "dead")
    return delivered


def test_dry_run_as_json_changes_nothing(
    redis_client: redis.Redis,
    stream_client: redis.Redis,
    dead_and_live: set[bytes],
) -> None:
    before = pending_of(stream_client)
    result = reap(redis_client, stream_client, "--dry-run", "--format", "json")
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    assert result.stderr == "redis-presence: TTL 100 ms (--ttl-ms)\n"  # where the TTL came from
    assert data["dry_run"] is True
    assert (data["stream"], data["group"], data["target"]) == (STREAM, GROUP, "live")
    assert (data["moved"], data["removed"]) == (3, ["dead"])
    dead = next(c for c in data["consumers"] if c["consumer"] == "dead")
    assert dead["presence"] == "expired"
    assert dead["idle_ms"] > 2 * TTL_MS
    assert pending_of(stream_client) == before


def test_reap_prints_a_table_and_a_summary(
    redis_client: redis.Redis,
    stream_client: redis.Redis,
    registry: RedisPresenceRegistry,
    dead_and_live: set[bytes],
) -> None:
    result = reap(redis_client, stream_client)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["CONSUMER", "PRESENCE", "IDLE", "PENDING", "MOVED", "ACTION"]
    assert lines[1].split()[:2] == ["dead", "expired"]
    assert lines[1].split()[-3:] == ["3", "3", "remove"]
    assert lines[2].split()[:2] == ["live", "active"]
    assert "keep: presence calls it active" in lines[2]
    assert (
        lines[3]
        == "stream 'orders', group 'billing': move 3 entries to 'live', remove 1 consumer(s)"
    )
    assert pending_of(stream_client) == {"live": dead_and_live}
    assert [row.consumer for row in registry.snapshot(now_ns=NOW_NS)] == ["live"]


def test_read_only_allows_the_dry_run_only(
    redis_client: redis.Redis,
    stream_client: redis.Redis,
    dead_and_live: set[bytes],
) -> None:
    assert reap(redis_client, stream_client, "--dry-run", glob=["--read-only"]).exit_code == 0
    refused = reap(redis_client, stream_client, glob=["--read-only"])
    assert refused.exit_code == 6
    assert "streams reap writes to Redis, but --read-only" in refused.output
    assert "dead" in pending_of(stream_client)


def test_failures_are_one_line_with_their_exit_code(
    redis_client: redis.Redis,
    stream_client: redis.Redis,
) -> None:
    result = reap(redis_client, stream_client)  # no such group
    assert result.exit_code == 1
    assert result.output == f"Error: stream {STREAM!r} has no consumer group {GROUP!r}\n"
    unreachable = redis.Redis(host="127.0.0.1", port=free_port())
    result = reap(redis_client, unreachable)
    assert result.exit_code == 3
    assert result.output.startswith("Error: cannot reach Redis")
    assert len(result.output.splitlines()) == 1


@pytest.mark.parametrize(
    ("claim_to", "why"),
    [
        ("nobody", "claim_to must name a consumer active in presence: 'nobody' is unseen"),
        ("dead", "claim_to must name a consumer active in presence: 'dead' is expired"),
    ],
)
def test_a_claim_to_that_is_not_an_active_member_is_one_line_and_changes_nothing(
    redis_client: redis.Redis,
    stream_client: redis.Redis,
    registry: RedisPresenceRegistry,
    dead_and_live: set[bytes],
    claim_to: str,
    why: str,
) -> None:
    before = pending_of(stream_client), registry.snapshot(now_ns=NOW_NS)
    result = reap(redis_client, stream_client, "--claim-to", claim_to)
    assert result.exit_code == 2
    assert result.output.startswith(f"Error: {why} ")
    assert len(result.output.splitlines()) == 1
    assert (pending_of(stream_client), registry.snapshot(now_ns=NOW_NS)) == before

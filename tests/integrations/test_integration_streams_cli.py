"""`redis-presence streams reap` through click's runner, on real redis-servers: the stream
on one, presence on another (``--stream-url`` and ``--url``); and a real run of the
command next to a real reader process (``apps/stream_consumer.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result
from servers import free_port
from waiting import wait_until

from integrations.lifecycle import Presence
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
from integrations.workers import ROOT, WorkerProcess, python_tool
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


def test_the_summary_counts_every_action_of_the_table(
    redis_client: redis.Redis,
    stream_client: redis.Redis,
    registry: RedisPresenceRegistry,
    dead_and_live: set[bytes],
) -> None:
    beat(registry, "ghost", 10 * TTL_MS)  # expired, and only presence knew it
    for args, would in ((["--dry-run"], "would "), ([], "")):
        result = reap(redis_client, stream_client, *args)
        assert result.exit_code == 0, result.output
        lines = result.stdout.splitlines()
        assert lines[1].endswith(f"{would}remove")
        assert lines[2].split()[:2] == ["ghost", "expired"]
        assert lines[2].endswith(f"{would}deregister")
        assert lines[4] == (
            f"stream 'orders', group 'billing': {would}move 3 entries to 'live', "
            f"{would}remove 1 consumer(s), {would}deregister 1 only presence knew"
        )
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


READER_TTL_MS = 1_000


def reap_process(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """A real ``redis-presence streams reap`` run, judging presence on the server's clock."""
    argv = [python_tool("redis-presence"), "--url", url, "--prefix", PREFIX]
    argv += ["--ttl-ms", str(READER_TTL_MS), "streams", "reap", "--stream", STREAM]
    argv += ["--group", GROUP, *args]
    env = {k: v for k, v in os.environ.items() if k not in CLEAN_ENV}
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**env, "PYTHONPATH": str(ROOT)},
    )


def table_of(stdout: str) -> dict[str, list[str]]:
    """consumer -> its row's cells, from the table `reap` prints above its summary."""
    lines = stdout.splitlines()
    assert lines[0].split()[0] == "CONSUMER", stdout
    return {line.split()[0]: line.split() for line in lines[1:] if not line.startswith("stream ")}


def test_a_live_reader_that_has_received_nothing_yet_takes_the_entries(
    stream_client: redis.Redis, broker_url: str, tmp_path: Path
) -> None:
    """A reader that beats but has not received an entry yet has no pending list (Redis
    7.0 does not even list it in the group): it is alive, and a valid target, and the
    summary names it as the table shows it."""
    make_group(stream_client, 3)
    delivered = set(read(stream_client, "dead", 3))  # every entry: none left for the reader
    reader = WorkerProcess(
        [sys.executable, "stream_consumer.py"],
        env={
            "RP_PRESENCE_URL": broker_url,
            "RP_PREFIX": PREFIX,
            "RP_STREAM": STREAM,
            "RP_GROUP": GROUP,
            "RP_CONSUMER": "fresh",
            "RP_TTL_MS": str(READER_TTL_MS),
            "RP_BLOCK_MS": "100",
        },
        log=tmp_path / "reader.log",
    )
    with reader:
        presence = Presence(stream_client, PREFIX)

        def reading() -> bool:
            rows = presence.rows(consumer="fresh", ttl_ms=READER_TTL_MS)
            return [row.state.value for row in rows] == ["active"]

        wait_until(reading, timeout_s=30, what="the reader's row", alive=reader.check_alive)

        def dead_past_horizon() -> bool:
            idle = {
                _name(info["name"]): int(info["idle"])
                for info in stream_client.xinfo_consumers(STREAM, GROUP)
            }
            return idle["dead"] > 2 * READER_TTL_MS + 50

        wait_until(dead_past_horizon, timeout_s=20, what="'dead' idle past the horizon")

        done = reap_process(broker_url)

        assert (done.returncode, done.stderr) == (
            0,
            f"redis-presence: TTL {READER_TTL_MS} ms (--ttl-ms)\n",
        )
        table = table_of(done.stdout)
        assert table["fresh"][1] == "active"
        assert table["dead"][-3:] == ["3", "3", "remove"]
        summary = done.stdout.splitlines()[len(table) + 1]
        assert summary == (
            "stream 'orders', group 'billing': move 3 entries to 'fresh', remove 1 consumer(s)"
        )
        assert "no active consumer" not in done.stdout
        assert pending_of(stream_client) == {"fresh": delivered}
        reader.check_alive()


def _name(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value

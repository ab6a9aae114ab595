"""`redis-presence counts` needs no progress budget (issue 30, loose end).

Counts are active consumers per group; a spoilt progress budget (``P:stuck``, or a group's
``P:{q}:g:stuck``) concerns only what judges `stuck` (docs/protocol.md, section 8). Before,
`counts` read a snapshot to list the tracked groups with 0 active, and that snapshot needed
the budget: a spoilt ``P:stuck`` made `counts` exit 5, and a group's own spoilt budget left
that group out (with a warning) when it had no active consumer. On a real redis-server.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from cli_invoke import invoke

from redis_presence import RedisPresenceRegistry
from redis_presence.keys import Keyspace

pytestmark = [pytest.mark.redis_server, pytest.mark.timeout(60)]

MS = 1_000_000
T0 = 1_796_000_000_123_456_000
KEYS = Keyspace("presence")


def counts(url: str) -> tuple[int, Any, str]:
    result = invoke(["--url", url, "--now-ns", str(T0), "counts", "--format", "json"])
    out = json.loads(result.stdout) if result.exit_code == 0 else result.stdout
    return result.exit_code, out, result.stderr


@pytest.mark.parametrize(
    "spoilt", [KEYS.stuck, KEYS.group("q", "idle").stuck], ids=["prefix", "group"]
)
def test_counts_read_on_past_a_spoilt_progress_budget(
    redis_url: str, redis_client: Any, spoilt: str
) -> None:
    registry = RedisPresenceRegistry(redis_client)
    registry.heartbeat("q", "busy", "a", 1, now_ns=T0)
    registry.heartbeat("q", "idle", "b", 1, now_ns=T0 - 60_000 * MS)  # stale: 0 active
    registry.expect("q", "declared", 2)
    redis_client.set(spoilt, "5 min")
    code, out, err = counts(redis_url)
    assert code == 0, (out, err)
    assert [(c["group"], c["active"], c["min_active"]) for c in out] == [
        ("busy", 1, None),
        ("declared", 0, 2),
        ("idle", 0, None),
    ]
    assert "warning" not in err, err

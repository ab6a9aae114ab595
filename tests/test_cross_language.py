"""One fleet, two languages (issue 23, item 4): Node.js workers on the repository's client
(clients/node, built with ``npm ci && npm run build``) beat into the test's redis-server and
the Python registry, the CLI, ``/metrics`` and the dashboard read them; Python workers beat
and the Node client reads, counts and prunes them the same. Without node or the built client
the test is skipped locally and fails in CI (``REDIS_PRESENCE_REQUIRE_SERVERS=1``)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from binaries import missing
from cli_invoke import invoke
from servers import RedisServer
from web_client import make_client

from redis_presence import RedisPresenceRegistry
from redis_presence.keys import encode_meta
from redis_presence.scripts import SCRIPT_NAMES, script

ROOT = Path(__file__).resolve().parent.parent
NODE_CLIENT = ROOT / "clients" / "node"
BUILT = NODE_CLIENT / "dist" / "index.js"
IOREDIS = NODE_CLIENT / "node_modules" / "ioredis" / "built" / "index.js"
MS = 1_000_000

pytestmark = [pytest.mark.redis_server, pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def node() -> str:
    path = shutil.which("node")
    if path is None:
        missing("'node' is not on PATH", "install Node.js 20 to run the cross-language test")
    if not BUILT.is_file() or not IOREDIS.is_file():
        missing(
            f"the Node.js client is not built ({BUILT})",
            "run 'npm ci && npm run build' in clients/node",
        )
    return path


def run_node(node: str, tmp_path: Path, server: RedisServer, body: str) -> Any:
    """Run an ES module with `presence` (the built client) and `redis` (an ioredis client of
    `server`) in scope; what it prints (JSON) is the answer."""
    program = tmp_path / "program.mjs"
    program.write_text(
        f"import * as presence from {json.dumps(BUILT.as_uri())};\n"
        f"import Redis from {json.dumps(IOREDIS.as_uri())};\n"
        f"const redis = new Redis({{ host: {json.dumps(server.host)}, port: {server.port} }});\n"
        "const registry = new presence.PresenceRegistry(redis);\n"
        "const out = await (async () => {\n" + body + "\n})();\n"
        "redis.disconnect();\n"
        "console.log(JSON.stringify(out, (k, v) => (typeof v === 'bigint' ? v.toString() : v)));\n",
        encoding="utf-8",
    )
    done = subprocess.run(
        [node, str(program)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_node_workers_are_read_by_the_python_registry_cli_metrics_and_dashboard(
    node: str, tmp_path: Path, redis_server: RedisServer, redis_client: Any
) -> None:
    shas = run_node(
        node,
        tmp_path,
        redis_server,
        """
        await registry.heartbeat("x!y", "it's (a)*", "node-1", 2);
        await registry.heartbeatMany([["mail", "send", "node-2", 1], ["mail", "send", "😀", 0]]);
        await registry.describe("mail", "send", "node-2", { lang: "node", région: "é" });
        return Object.fromEntries(presence.SCRIPT_NAMES.map((n) => [n, presence.script(n).sha]));
        """,
    )
    assert shas == {name: script(name).sha for name in SCRIPT_NAMES}  # the very same scripts
    registry = RedisPresenceRegistry(redis_client)
    rows = registry.snapshot(with_meta=True)
    assert [(r.queue, r.group, r.consumer, r.lease_count, r.state.value) for r in rows] == [
        ("mail", "send", "node-2", 1, "active"),
        ("mail", "send", "😀", 0, "active"),
        ("x!y", "it's (a)*", "node-1", 2, "active"),
    ]
    assert dict(rows[0].meta) == {"lang": "node", "région": "é"}
    assert redis_client.exists("presence:{x%21y}:it%27s%20%28a%29%2A:c")
    assert redis_client.get("presence:protocol") == b"2"
    result = invoke(["--url", redis_server.url, "ls", "--format", "json"])
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    assert {(r["queue"], r["consumer"]) for r in listed} == {
        ("mail", "node-2"),
        ("mail", "😀"),
        ("x!y", "node-1"),
    }
    assert "warning" not in result.stderr  # nothing set aside: the Node client spells names right
    with make_client(redis_server.url, ttl_ms=None) as web:
        metrics = web.get("/metrics").text
        assert 'redis_presence_group_active{group="send",queue="mail"} 2.0' in metrics
        assert 'redis_presence_group_active{group="it\'s (a)*",queue="x!y"} 1.0' in metrics
        page = web.get("/")
        assert page.status_code == 200
        assert "x!y" in page.text
        assert "node-2" in web.get("/consumers").text


def test_python_workers_are_read_counted_and_pruned_by_node(
    node: str, tmp_path: Path, redis_server: RedisServer, redis_client: Any
) -> None:
    registry = RedisPresenceRegistry(redis_client)
    now = registry.clock_ns()
    registry.heartbeat("x!y", "g", "py-1", 3, now_ns=now - 100 * MS)
    registry.heartbeat("x!y", "g", "py-old", 1, now_ns=now - 5_000 * MS)
    registry.heartbeat_many([("é", "😀", "py-2", 0)], now_ns=now)
    registry.describe("é", "😀", "py-2", {"lang": "python"})
    expected = [
        {
            "queue": r.queue,
            "group": r.group,
            "consumer": r.consumer,
            "leaseCount": r.lease_count,
            "state": r.state.value,
            "registeredAtNs": str(r.registered_at_ns),
            "lastHeartbeatNs": str(r.last_heartbeat_ns),
            "meta": dict(r.meta),
        }
        for r in registry.snapshot(now_ns=now, ttl_ms=1_000, with_meta=True)
    ]
    seen = run_node(
        node,
        tmp_path,
        redis_server,
        f"""
        const now = "{now}";
        const rows = await registry.snapshot({{ nowNs: now, ttlMs: 1000, withMeta: true }});
        const counts = await registry.countActiveByGroup({{ nowNs: now, ttlMs: 1000 }});
        const pruned = await registry.pruneExpired({{ nowNs: now, ttlMs: 1000 }});
        const gone = await registry.deregister("x!y", "g", "py-1");
        return {{ rows, counts, pruned, gone }};
        """,
    )
    keep = ("queue", "group", "consumer", "leaseCount", "state", "registeredAtNs")
    assert [{k: r[k] for k in (*keep, "lastHeartbeatNs", "meta")} for r in seen["rows"]] == expected
    assert seen["counts"] == [
        {"queue": "x!y", "group": "g", "active": 1},
        {"queue": "é", "group": "😀", "active": 1},
    ]
    assert (seen["pruned"], seen["gone"]) == (1, True)  # py-old expired, py-1 left
    assert [(r.queue, r.consumer) for r in registry.snapshot(now_ns=now)] == [("é", "py-2")]


def test_what_node_stores_python_reads_and_what_python_refuses_node_refuses(
    node: str, tmp_path: Path, redis_server: RedisServer, redis_client: Any
) -> None:
    """Issue 30 item 10: names that join to the same string with a NUL land in their own
    groups; a minimum Python refuses is refused by Node (0 by both: issue 35 item 2);
    metadata keys that look like integers, or are `__proto__`, are stored in Python's
    spelling, from an object or a Map; an array or a Map is never taken for another mapping."""
    registry = RedisPresenceRegistry(redis_client)
    registry.expect("py", "one", 1)
    with pytest.raises(ValueError, match=r"^min_active"):
        registry.expect("py", "none", 0)
    meta = {"b": "1", "10": "2", "9": "3", "__proto__": "4"}
    seen = run_node(
        node,
        tmp_path,
        redis_server,
        f"""
        const spelled = {json.dumps(json.dumps(meta))};
        const skipped = [];
        const onSkipped = (s) => skipped.push(s);
        const reader = new presence.PresenceRegistry(redis, {{ onSkipped }});
        const pythons = await reader.expected();
        await registry.heartbeat("a\\0b", "c", "first");
        await registry.heartbeat("a", "b\\0c", "second");
        const refused = [];
        for (const least of [0, 1e7, 1_000_001, -1, "2"]) {{
          await registry.expect("node", "bad", least).catch((e) => refused.push(e.name));
        }}
        await registry.expect("node", "one", 1);
        await registry.expect("node", "most", 1_000_000);
        await registry.describe("a", "b\\0c", "second", JSON.parse(spelled));
        const entries = Object.entries(JSON.parse(spelled));
        await registry.describe("a\\0b", "c", "first", new Map(entries));
        for (const wrong of [["x"], "x=1", null]) {{
          await registry.describe("a\\0b", "c", "first", wrong).catch((e) => refused.push(e.name));
        }}
        return {{ pythons, skipped, refused }};
        """,
    )
    assert seen == {
        "pythons": [["py", "one", 1]],
        "skipped": [],
        "refused": ["RangeError"] * 4 + ["TypeError"] + ["TypeError"] * 3,
    }
    assert registry.expected() == {
        ("node", "most"): 1_000_000,
        ("node", "one"): 1,
        ("py", "one"): 1,
    }
    rows = registry.snapshot(with_meta=True)
    assert [(r.queue, r.group, r.consumer, dict(r.meta)) for r in rows] == [
        ("a", "b\x00c", "second", meta),
        ("a\x00b", "c", "first", meta),
    ]
    stored = encode_meta(meta).encode()  # Python's spelling, byte for byte
    assert redis_client.hget("presence:{a}:b%00c:m", "second") == stored
    assert redis_client.hget("presence:{a%00b}:c:m", "first") == stored
    result = invoke(["--url", redis_server.url, "check", "--format", "json"])
    assert result.exit_code == 1, result.output  # node/most is below its minimum
    assert "warning" not in result.stderr  # no minimum set aside
    assert [
        (c["queue"], c["group"], c["min_active"], c["ok"]) for c in json.loads(result.stdout)
    ] == [
        ("node", "most", 1_000_000, False),
        ("node", "one", 1, False),
        ("py", "one", 1, False),
    ]


def test_version_2_fields_cross_both_ways(
    node: str, tmp_path: Path, redis_server: RedisServer, redis_client: Any
) -> None:
    """Protocol version 2 between the clients: what a Node worker says (capacity, draining,
    its instance token) Python reads; a drain Python requests reaches a Node worker's beat
    and its draining beat acknowledges it; what Python beats Node reads, in one group."""
    registry = RedisPresenceRegistry(redis_client, instance="py-proc")
    now = registry.clock_ns()
    registry.heartbeat("mail", "send", "py-1", 1, now_ns=now, capacity=3)
    seen = run_node(
        node,
        tmp_path,
        redis_server,
        f"""
        const beats = new presence.PresenceRegistry(redis, {{ instance: "node-proc" }});
        const at = {{ nowNs: "{now}" }};
        await beats.heartbeat("mail", "send", "node-1", 2, {{ ...at, capacity: 4 }});
        const two = {{ queue: "mail", group: "send", consumer: "node-2" }};
        await beats.heartbeatMany([{{ ...two, capacity: 1, draining: true }}], at);
        const rows = await beats.snapshot({{ nowNs: "{now}" }});
        const [group] = await beats.groups({{ nowNs: "{now}" }});
        return {{ rows: rows.map((r) => [r.consumer, r.capacity, r.draining, r.instance]), group }};
        """,
    )
    assert seen["rows"] == [
        ["node-1", 4, False, "node-proc"],
        ["node-2", 1, True, "node-proc"],
        ["py-1", 3, False, "py-proc"],
    ]
    group = seen["group"]
    assert (group["capacity"], group["free"], group["draining"]) == (8, 5, 1)
    rows = registry.snapshot(now_ns=now)
    assert [(r.consumer, r.capacity, r.draining, r.instance) for r in rows] == [
        ("node-1", 4, False, "node-proc"),
        ("node-2", 1, True, "node-proc"),
        ("py-1", 3, False, "py-proc"),
    ]
    assert registry.request_drain("mail", "send", "node-1", now_ns=now + MS)
    seen = run_node(
        node,
        tmp_path,
        redis_server,
        f"""
        const beats = new presence.PresenceRegistry(redis, {{ instance: "node-proc" }});
        const beat = (nowNs, draining) =>
          beats.heartbeat("mail", "send", "node-1", 2, {{ nowNs, draining }});
        const asked = await beat("{now + 2 * MS}");
        const acked = await beat("{now + 3 * MS}", true);
        return [asked.drainRequested, acked.drainRequested];
        """,
    )
    assert seen == [True, False]
    (row,) = registry.snapshot(now_ns=now + 3 * MS, queue="mail", group="send")[:1]
    assert (row.consumer, row.draining, row.drain_requested) == ("node-1", True, False)

"""Case 14: the Node.js client's heartbeat (issue 23). One ``heartbeat()`` of the client in
clients/node is one ``EVALSHA`` of the same heartbeat.lua, as Python's is: its median
against a bare ``PING`` from the same ioredis client, interleaved in one Node process, and
against the same ``EVALSHA`` sent by hand (the floor: the script's own server time, which a
PING from a client as fast as ioredis does not hide as redis-py's slower PING does)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from .server import BenchServer
from .stats import CaseResult, Check, Measure

ROOT = Path(__file__).resolve().parent.parent
NODE_CLIENT = ROOT / "clients" / "node"
BUILT = NODE_CLIENT / "dist" / "index.js"
IOREDIS = NODE_CLIENT / "node_modules" / "ioredis" / "built" / "index.js"
TARGET = 1.3
"""Node heartbeat median / PING median, on the same client."""

PROGRAM = """
import * as presence from %(built)s;
import Redis from %(ioredis)s;
const redis = new Redis({ host: "127.0.0.1", port: %(port)d });
const registry = new presence.PresenceRegistry(redis, { prefix: "bench-node" });
const calls = %(calls)d;
await registry.heartbeat("queue-00", "group-00", "hot", 1);
const gk = registry.keys.group("queue-00", "group-00");
const sha = presence.script("heartbeat").sha;
const space = registry.keys;
const keys = [gk.hb, gk.data, gk.mark, gk.events, gk.meta];
keys.push(space.groups, space.events, space.epoch, space.protocol, space.newest, space.oldest);
const variants = {
  heartbeat: () => registry.heartbeat("queue-00", "group-00", "hot", 1),
  // The floor: the same EVALSHA with its arguments ready, sent by hand.
  "EVALSHA by hand": () =>
    redis.evalsha(
      sha, keys.length, ...keys,
      30000, 10000, 86400000, 10000, "", "hot", 1, "", "", registry.instance,
    ),
  PING: () => redis.ping(),
};
for (let i = 0; i < 200; i++) for (const run of Object.values(variants)) await run();
const samples = Object.fromEntries(Object.keys(variants).map((name) => [name, []]));
for (let i = 0; i < calls; i++) {
  for (const [name, run] of Object.entries(variants)) {
    const started = process.hrtime.bigint();
    await run();
    samples[name].push(Number(process.hrtime.bigint() - started) / 1000);
  }
}
await redis.flushall();
redis.disconnect();
console.log(JSON.stringify({ samples, node: process.version }));
"""


def case_node(server: BenchServer, sizes: Any) -> CaseResult:
    """The Node client's heartbeat against a PING on the same ioredis client."""
    result = CaseResult("node", "14. The Node.js client: heartbeat against PING")
    node = shutil.which("node")
    if node is None or not BUILT.is_file() or not IOREDIS.is_file():
        result.skipped = (
            "Node.js or the built client is missing (npm ci && npm run build in clients/node)"
        )
        return result
    calls = max(500, sizes.latency_calls // 2)
    with tempfile.TemporaryDirectory(prefix="redis-presence-bench-node-") as folder:
        program = Path(folder) / "bench.mjs"
        program.write_text(
            PROGRAM
            % {
                "built": json.dumps(BUILT.as_uri()),
                "ioredis": json.dumps(IOREDIS.as_uri()),
                "port": server.port,
                "calls": calls,
            },
            encoding="utf-8",
        )
        done = subprocess.run(
            [node, str(program)], capture_output=True, text=True, timeout=300, check=False
        )
    if done.returncode != 0:
        raise RuntimeError(f"the Node benchmark failed: {done.stderr[-2000:]}")
    answer = json.loads(done.stdout)
    for name, values in answer["samples"].items():
        result.measures.append(Measure(f"Node {name}", "us", values))
    beat = result.measure("Node heartbeat").median
    ratio = beat / result.measure("Node PING").median
    result.checks.append(
        Check(
            "Node heartbeat / PING",
            ratio,
            "<=",
            TARGET,
            "Node heartbeat() median / PING median, interleaved on one ioredis client",
        )
    )
    result.checks.append(
        Check(
            "Node heartbeat / the same EVALSHA by hand",
            beat / result.measure("Node EVALSHA by hand").median,
            "<=",
            TARGET,
            "Node heartbeat() median / median of heartbeat.lua's EVALSHA with ready arguments",
        )
    )
    result.facts["node"] = {"version": answer["node"]}
    result.facts["the script's floor: EVALSHA by hand / PING"] = {
        "ratio": round(
            result.measure("Node EVALSHA by hand").median / result.measure("Node PING").median, 2
        )
    }
    result.notes.append(
        f"{calls} interleaved calls of each in one Node process on one ioredis connection; "
        "the heartbeat's shared TTL is cached (re-read every 10 s, as in Python)."
    )
    return result

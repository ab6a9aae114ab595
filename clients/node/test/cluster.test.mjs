// The client on a Redis Cluster of three masters of the test's own (harness.mjs,
// `startCluster`): the scripts get no standalone tail, batches go one queue (one slot) a
// call, this client keeps the index of groups by docs/protocol.md section 14 (with the re-check
// of an unlist, and of the declared queues' index), the event index, the epoch marker and
// the protocol claim; groups on many slots are all found; a real BullMQ worker is tracked;
// and the Python package's cluster registry reads what this client writes, and this client
// what it writes, the same.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { dirname, join } from "node:path";
import { after, before, beforeEach, test } from "node:test";
import { fileURLToPath } from "node:url";
import { Queue, Worker } from "bullmq";
import Redis from "ioredis";
import * as presence from "../dist/index.js";
import { NO_PYTHON, PYTHON, startCluster } from "./harness.mjs";

const T0 = 1_796_000_000_000_000_000n;
const MS = 1_000_000n;
const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

let cluster;
let client;
const opened = [];
before(async () => {
  cluster = await startCluster();
  client = cluster.client();
});
after(async () => {
  for (const r of opened) r.redis.disconnect();
  client?.disconnect();
  await cluster?.stop();
});
beforeEach(async () => {
  await cluster.flushall();
});

function registry(options = {}, redis = cluster.client()) {
  const r = new presence.PresenceRegistry(redis, { maxFutureMs: null, onSkipped: () => undefined, ...options });
  opened.push(r);
  return r;
}


/** Run `body` (Python statements that set `out`) with `registry`, a RedisPresenceRegistry of
 * this cluster (this checkout's package), and `rows(...)`/`counts(...)` to spell answers as
 * this file's `rows`/`counts` do; what it prints (JSON) is the answer. */
function python(body) {
  const program = [
    "import json",
    "from redis.cluster import ClusterNode, RedisCluster",
    "from redis_presence import BeatSpec, RedisPresenceRegistry",
    `client = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", p) for p in ${JSON.stringify(cluster.ports)}])`,
    "registry = RedisPresenceRegistry(client, max_future_ms=None, instance='py')",
    "def rows(found):",
    "    return [[r.queue, r.group, r.consumer, str(r.registered_at_ns), str(r.last_heartbeat_ns), r.lease_count, r.state.value, r.capacity, r.draining, r.drain_requested, r.instance, dict(r.meta)] for r in found]",
    "def counts(found):",
    "    return [[q, g, n] for (q, g), n in sorted(found.items())]",
    "out = None",
    body,
    "client.close()",
    "print(json.dumps(out))",
  ].join("\n");
  return new Promise((resolve, reject) =>
    execFile(PYTHON, ["-c", program], { cwd: root, env: { ...process.env, PYTHONPATH: root }, timeout: 60_000 }, (error, stdout, stderr) =>
      error ? reject(new Error(`python failed: ${error.message}\n${stderr}`)) : resolve(JSON.parse(stdout)),
    ),
  );
}

const rows = (found) =>
  found.map((r) => [r.queue, r.group, r.consumer, String(r.registeredAtNs), String(r.lastHeartbeatNs), r.leaseCount, r.state, r.capacity, r.draining, r.drainRequested, r.instance, r.meta]);
const counts = (found) => found.map((c) => [c.queue, c.group, c.active]);

/** Each master's own connection (DBSIZE, SCRIPT FLUSH: commands of one node). */
function masters() {
  return cluster.ports.map((port) => new Redis({ port, host: "127.0.0.1" }));
}

test("an ioredis Cluster is detected; `clustered` says so, or overrides it", () => {
  assert.equal(registry().clustered, true);
  const standalone = new Redis({ lazyConnect: true });
  assert.equal(new presence.PresenceRegistry(standalone).clustered, false);
  assert.equal(new presence.PresenceRegistry(standalone, { clustered: true }).clustered, true);
  assert.throws(() => new presence.PresenceRegistry(standalone, { clustered: "yes" }), { name: "TypeError", message: /clustered must be a boolean/ });
  standalone.disconnect();
});

test("a beat on a cluster: no standalone tail; this client lists the group and its log, marks the epoch and claims the prefix", async () => {
  const r = registry({ instance: "tok-1" });
  assert.deepStrictEqual(await r.heartbeat("q", "g", "c", 2, { nowNs: T0 }), { drainRequested: false });
  assert.equal(await client.hget("presence:{q}:g:c", "c"), `${T0} ${T0} 2 0 0 0 0 tok-1 -`);
  assert.equal(await client.get("presence:protocol"), "2");
  assert.deepStrictEqual(await client.zrange("presence:groups", 0, -1, "WITHSCORES"), ["presence:{q}:g:c", "0"]);
  const [log, ms] = await client.zrange("presence:events", 0, -1, "WITHSCORES");
  assert.equal(log, "presence:{q}:events");
  const [[id]] = await client.xrange("presence:{q}:events", "-", "+");
  assert.equal(ms, id.split("-")[0]);
  assert.match(await client.get("presence:{presence:events}:epoch"), /^[0-9a-f]{32}$/);
  assert.equal(await client.exists("presence:{q}:g:ix"), 1); // the group's index mark
  // The fleet indexes are a standalone server's: a cluster's scripts never see them.
  assert.deepStrictEqual([await client.exists("presence:newest"), await client.exists("presence:oldest")], [0, 0]);
  // A second beat of a marked group lists nothing again (the mark says it is listed).
  await client.zrem("presence:groups", "presence:{q}:g:c");
  await r.heartbeat("q", "g", "c", 1, { nowNs: T0 + MS });
  assert.equal(await client.zcard("presence:groups"), 0);
  await r.heartbeat("q", "g", "d", 1, { nowNs: T0 + MS }); // a new consumer: the mark stays
  assert.equal(await client.zcard("presence:groups"), 0);
  await client.del("presence:{q}:g:ix"); // the mark expired: the next beat lists it again
  await r.heartbeat("q", "g", "c", 1, { nowNs: T0 + 2n * MS });
  assert.equal(await client.zcard("presence:groups"), 1);
});

test("groups on many slots of every master are all written, found, counted and pruned", async () => {
  const r = registry();
  const queues = Array.from({ length: 40 }, (_, i) => `queue-${i}`);
  const beats = queues.flatMap((q, i) => [
    [q, "g", "a", i % 3],
    [q, "h", "b", 1],
  ]);
  // One queue with more beats than one call takes (250): two calls of its slot.
  for (let i = 0; i < 300; i++) beats.push(["big", "g", `c${String(i).padStart(3, "0")}`, 0]);
  assert.deepStrictEqual(await r.heartbeatManyWithDrains(beats, { nowNs: T0 }), { count: beats.length, drainRequested: [] });
  const nodes = masters();
  try {
    const sizes = await Promise.all(nodes.map((node) => node.dbsize()));
    assert.ok(
      sizes.every((n) => n > 0),
      `keys on every master: ${sizes}`,
    );
  } finally {
    for (const node of nodes) node.disconnect();
  }
  const groups = [...queues.flatMap((q) => [`${q}/g`, `${q}/h`]), "big/g"];
  assert.equal(await client.zcard("presence:groups"), groups.length);
  assert.equal(await client.zcard("presence:events"), queues.length + 1);
  const snap = await r.snapshot({ nowNs: T0 + MS });
  assert.equal(snap.length, beats.length);
  assert.deepStrictEqual(new Set(snap.map((row) => `${row.queue}/${row.group}`)), new Set(groups));
  assert.ok(snap.every((row) => row.state === "active"));
  const active = await r.countActiveByGroup({ nowNs: T0 + MS });
  assert.deepStrictEqual(active.length, groups.length);
  assert.equal(active.find((c) => c.queue === "big").active, 300);
  assert.equal(await r.size(), beats.length);
  const summary = await r.groups({ nowNs: T0 + MS });
  assert.equal(summary.length, groups.length);
  assert.deepStrictEqual((await r.snapshot({ nowNs: T0 + MS, queue: "queue-7" })).map((row) => row.consumer), ["a", "b"]);
  // A prune a day later takes every consumer, and every emptied group leaves the index.
  assert.equal(await r.pruneExpired({ nowNs: T0 + 86_400_000n * MS }), beats.length);
  assert.equal(await client.zcard("presence:groups"), 0);
  assert.equal(await r.size(), 0);
  assert.deepStrictEqual([...(await r.snapshot())], []);
});

test("the last consumer's deregister unlists its group; a prune of an emptied group too", async () => {
  const r = registry();
  await r.heartbeat("q", "g", "a", 0, { nowNs: T0 });
  await r.heartbeat("q", "g", "b", 0, { nowNs: T0 });
  assert.equal(await r.deregister("q", "g", "a"), true);
  assert.equal(await client.zcard("presence:groups"), 1);
  assert.equal(await r.deregister("q", "g", "b"), true);
  assert.equal(await client.zcard("presence:groups"), 0);
  assert.deepStrictEqual([await client.exists("presence:{q}:g:ix"), await client.exists("presence:{q}:g:hb")], [0, 0]);
  assert.equal(await r.deregister("q", "g", "b"), false);
  // An empty group left listed (a first beat's ZADD after the deregister's re-check) goes
  // with the next prune.
  await client.zadd("presence:groups", 0, "presence:{q}:g:c");
  assert.equal(await r.pruneExpired({ nowNs: T0 }), 0);
  assert.equal(await client.zcard("presence:groups"), 0);
});

test("the unlist re-check: a deregister racing a first beat of the same group keeps it listed", async () => {
  const beater = registry();
  // The deregister's connection: between its script (which empties the group) and its
  // ZREM of the index, a first beat of the same group runs whole (its script sets the mark
  // and its ZADD lists the group), so the ZREM takes a live group out of the index; only
  // the re-check that follows can put it back.
  const target = cluster.client();
  let atRecheck = null;
  let raced = false;
  const racing = new Proxy(target, {
    get(object, name) {
      const value = Reflect.get(object, name, object);
      if (name === "zrem") {
        return async (key, ...members) => {
          if (key === "presence:groups" && !raced) {
            raced = true;
            await beater.heartbeat("q", "g", "new", 1, { nowNs: T0 + MS });
            assert.equal(await client.zscore("presence:groups", "presence:{q}:g:c"), "0"); // listed by the beat
          }
          const removed = await object.zrem(key, ...members);
          atRecheck = await client.zscore("presence:groups", "presence:{q}:g:c");
          return removed;
        };
      }
      return typeof value === "function" ? value.bind(object) : value;
    },
  });
  const leaver = registry({}, racing);
  assert.equal(leaver.clustered, true);
  await beater.heartbeat("q", "g", "old", 0, { nowNs: T0 });
  assert.equal(await leaver.deregister("q", "g", "old", { nowNs: T0 + MS }), true);
  assert.equal(raced, true);
  assert.equal(atRecheck, null, "the ZREM took the live group out of the index");
  assert.equal(await client.zscore("presence:groups", "presence:{q}:g:c"), "0", "the re-check listed it again");
  assert.deepStrictEqual(
    (await beater.snapshot({ nowNs: T0 + MS })).map((row) => row.consumer),
    ["new"],
  );
});

test("the same re-check for declarations: an unexpect racing an expect of the same queue keeps it listed", async () => {
  const declarer = registry();
  const target = cluster.client();
  let atRecheck;
  const racing = new Proxy(target, {
    get(object, name) {
      const value = Reflect.get(object, name, object);
      if (name === "zrem") {
        return async (key, ...members) => {
          if (key === "presence:expects") await declarer.expect("q", "h", 2); // its HSET and ZADD whole
          const removed = await object.zrem(key, ...members);
          atRecheck = await client.zscore("presence:expects", "presence:{q}:expect");
          return removed;
        };
      }
      return typeof value === "function" ? value.bind(object) : value;
    },
  });
  const forgetter = registry({}, racing);
  await declarer.expect("q", "g");
  assert.equal(await forgetter.unexpect("q", "g"), true);
  assert.equal(atRecheck, null, "the ZREM took the declared queue out of the index");
  assert.deepStrictEqual(await declarer.expected(), [["q", "h", 2]]);
});

test("the protocol version on a cluster: another version is refused, a prefix in mode 1 is written in version 1", async () => {
  await client.set("presence:protocol", "9");
  const r = registry();
  await assert.rejects(r.heartbeat("q", "g", "c"), { name: "PresenceProtocolError" });
  await assert.rejects(r.heartbeatMany([["q", "g", "c", 0]]), { name: "PresenceProtocolError" });
  await assert.rejects(registry().deregister("q", "g", "c"), { name: "PresenceProtocolError" });
  await assert.rejects(registry().setTtl(5_000), { name: "PresenceProtocolError" });
  await assert.rejects(registry().expect("q", "g"), { name: "PresenceProtocolError" });
  await assert.rejects(registry().snapshot(), { name: "PresenceProtocolError" });
  assert.equal(await client.exists("presence:{q}:g:c"), 0);
  await client.set("presence:protocol", "1");
  const v1 = registry({ instance: "w" });
  await v1.heartbeat("q", "g", "c", 2, { nowNs: T0 });
  await v1.heartbeatMany([["q", "g", "d", 1]], { nowNs: T0 });
  assert.deepStrictEqual(await client.hgetall("presence:{q}:g:c"), { c: `${T0} ${T0} 2`, d: `${T0} ${T0} 1` });
  await assert.rejects(v1.requestDrain("q", "g", "c"), { name: "PresenceProtocolError", message: /still says protocol version 1/ });
  assert.equal(await client.get("presence:protocol"), "1"); // the claim is SET NX
});

test("drain requests, descriptions, shared settings and declared groups on a cluster", async () => {
  const r = registry({ instance: "w" });
  await r.heartbeat("q", "g", "c", 1, { nowNs: T0 });
  assert.equal(await r.requestDrain("q", "g", "c", { nowNs: T0 + MS }), true);
  assert.equal(await r.requestDrain("q", "g", "nobody"), false);
  assert.deepStrictEqual(await r.heartbeat("q", "g", "c", 1, { nowNs: T0 + 2n * MS }), { drainRequested: true });
  assert.deepStrictEqual(await r.heartbeatManyWithDrains([["q", "g", "c", 1]], { nowNs: T0 + 3n * MS }), { count: 1, drainRequested: [["q", "g", "c"]] });
  assert.equal(await r.describe("q", "g", "c", { host: "h1" }), true);
  assert.equal(await r.describe("q", "g", "ghost", { host: "h1" }), false);
  assert.deepStrictEqual((await r.snapshot({ nowNs: T0 + 3n * MS, withMeta: true }))[0].meta, { host: "h1" });
  await r.setTtl(5_000);
  await r.setTtl(7_000, { queue: "q", group: "g" });
  assert.deepStrictEqual(await r.ttlSource(), [5_000, "prefix"]);
  assert.deepStrictEqual(await r.ttlSource({ queue: "q", group: "g" }), [7_000, "group"]);
  await r.expect("q", "g", 2);
  await r.expect("other", "x");
  assert.deepStrictEqual(await r.expected(), [
    ["other", "x", 1],
    ["q", "g", 2],
  ]);
  const [row] = (await r.groups({ nowNs: T0 + 3n * MS })).filter((g) => g.queue === "q");
  assert.deepStrictEqual([row.active, row.minActive, row.below], [1, 2, true]);
  assert.equal(await r.unexpect("other", "x"), true);
  assert.equal(await r.unexpect("other", "x"), false);
  assert.deepStrictEqual(await client.zrange("presence:expects", 0, -1), ["presence:{q}:expect"]);
});

test("scripts are loaded on each master after a SCRIPT FLUSH (NOSCRIPT reloads them)", async () => {
  const r = registry();
  await r.heartbeatMany(
    Array.from({ length: 30 }, (_, i) => [`q${i}`, "g", "c", 0]),
    { nowNs: T0 },
  );
  const nodes = masters();
  try {
    await Promise.all(nodes.map((node) => node.script("FLUSH")));
    await r.heartbeatMany(
      Array.from({ length: 30 }, (_, i) => [`q${i}`, "g", "d", 0]),
      { nowNs: T0 },
    );
    assert.equal(await r.deregister("q3", "g", "c"), true);
    assert.equal(await r.size(), 59);
    const sha = presence.script("heartbeat_many").sha;
    assert.deepStrictEqual(
      await Promise.all(nodes.map(async (node) => (await node.script("EXISTS", sha))[0])),
      nodes.map(() => 1),
    );
  } finally {
    for (const node of nodes) node.disconnect();
  }
});

test("a BullMQ worker on a cluster (BullMQ's hash-tagged prefix): present with its job, asked to drain, gone once closed", async () => {
  const connection = cluster.client({ redisOptions: { maxRetriesPerRequest: null } });
  const r = registry();
  const queue = new Queue("mail", { connection, prefix: "{bull}" });
  const releases = [];
  const worker = new Worker("mail", () => new Promise((resolve) => releases.push(resolve)), { connection, prefix: "{bull}", concurrency: 3, lockDuration: 600 });
  const stop = presence.trackBullMQWorker(worker, r, { queue: "mail", group: "send", consumer: "w1", idleBeatMs: 50 });
  const row = async () => (await r.snapshot({ queue: "mail" }))[0];
  const until = async (what, check) => {
    const deadline = Date.now() + 10_000;
    while (!(await check())) {
      assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  };
  try {
    await queue.add("a", {});
    await until("an active job", async () => releases.length === 1);
    await until("a beat with the job", async () => (await row())?.leaseCount === 1);
    assert.equal((await row()).capacity, 3);
    assert.equal(await client.zscore("presence:groups", "presence:{mail}:send:c"), "0");
    assert.equal(await r.requestDrain("mail", "send", "w1"), true);
    await until("the draining beat", async () => (await row())?.draining === true);
    releases[0]("done");
    await until("the deregister once closed", async () => (await row()) === undefined);
    assert.equal(await client.zcard("presence:groups"), 0);
  } finally {
    await stop();
    await worker.close();
    await queue.close();
    connection.disconnect();
  }
});

test("what this client writes on a cluster the Python package reads the same", { skip: NO_PYTHON }, async () => {
  const r = registry({ instance: "node-1" });
  await r.heartbeat("x!y", "it's (a)*", "n1", 2, { nowNs: T0, capacity: 4 });
  await r.heartbeatMany(
    [
      ["mail", "send", "n2", 1],
      { queue: "mail", group: "send", consumer: "😀", leaseCount: 0, draining: true },
      ...Array.from({ length: 20 }, (_, i) => [`q${i}`, "g", "c", i]),
    ],
    { nowNs: T0 + 10_000n * MS },
  );
  await r.describe("mail", "send", "n2", { lang: "node" });
  await r.requestDrain("mail", "send", "n2", { nowNs: T0 + 10_000n * MS });
  await r.deregister("q3", "g", "c");
  const at = T0 + 40_000n * MS;
  const mine = {
    rows: rows(await r.snapshot({ nowNs: at, withMeta: true })),
    counts: counts(await r.countActiveByGroup({ nowNs: at })),
    size: await r.size(),
    groups: (await r.groups({ nowNs: at })).map((g) => [g.queue, g.group, g.active, g.stale, g.expired]),
  };
  const theirs = await python(`
at = ${at}
out = {
    "rows": rows(registry.snapshot(now_ns=at, with_meta=True)),
    "counts": counts(registry.count_active_by_group(now_ns=at)),
    "size": len(registry),
    "groups": [[g.queue, g.group, g.active, g.stale, g.expired] for g in registry.groups(now_ns=at)],
}`);
  assert.deepStrictEqual(theirs, mine);
  assert.equal(mine.rows.length, 22);
  assert.deepStrictEqual(
    mine.rows.filter((row) => row[0] === "mail").map((row) => [row[2], row[6], row[8], row[9]]),
    [
      ["n2", "active", false, true],
      ["😀", "active", true, false],
    ],
  );
});

test("what the Python package writes on a cluster this client reads the same, and prunes", { skip: NO_PYTHON }, async () => {
  const at = T0 + 40_000n * MS;
  const theirs = await python(`
t0 = ${T0}
registry.heartbeat("x!y", "it's (a)*", "p1", 2, now_ns=t0, capacity=4)
registry.heartbeat_many(
    [("mail", "send", "p2", 1), BeatSpec("mail", "send", "😀", 0, draining=True)]
    + [(f"q{i}", "g", "c", i) for i in range(20)],
    now_ns=t0 + 10_000 * 1_000_000,
)
registry.describe("mail", "send", "p2", {"lang": "python"})
registry.request_drain("mail", "send", "p2", now_ns=t0 + 10_000 * 1_000_000)
registry.deregister("q3", "g", "c")
registry.expect("mail", "send", 3)
at = ${at}
out = {
    "rows": rows(registry.snapshot(now_ns=at, with_meta=True)),
    "counts": counts(registry.count_active_by_group(now_ns=at)),
    "size": len(registry),
    "groups": [[g.queue, g.group, g.active, g.stale, g.expired, g.min_active] for g in registry.groups(now_ns=at)],
}`);
  const r = registry();
  const mine = {
    rows: rows(await r.snapshot({ nowNs: at, withMeta: true })),
    counts: counts(await r.countActiveByGroup({ nowNs: at })),
    size: await r.size(),
    groups: (await r.groups({ nowNs: at })).map((g) => [g.queue, g.group, g.active, g.stale, g.expired, g.minActive]),
  };
  assert.deepStrictEqual(mine, theirs);
  assert.equal(mine.rows.length, 22);
  // This client prunes what Python wrote (65 s on, x!y's consumer alone is expired under
  // the default TTL), and Python then reads what is left.
  const later = T0 + 65_000n * MS;
  assert.equal(await r.pruneExpired({ nowNs: later }), 1);
  const left = await python(`out = [[g.queue, g.group] for g in registry.groups(now_ns=${later})]`);
  assert.equal(left.length, 20); // q0..q19 but q3 (deregistered), and mail/send
  assert.ok(!left.some(([queue]) => queue === "x!y"), JSON.stringify(left));
  assert.equal(await client.zscore("presence:groups", "presence:{x%21y}:it%27s%20%28a%29%2A:c"), null);
});

test("changes() on a cluster: the events of many slots, from a cursor Python made, the same as Python's", { skip: NO_PYTHON }, async () => {
  const r = registry({ instance: "node-1" });
  const start = await python(`out = registry.changes().cursor`); // the server's now
  await r.heartbeatMany(Array.from({ length: 12 }, (_, i) => [`q${i}`, "g", "c", i]));
  await r.deregister("q3", "g", "c");
  await r.requestDrain("q5", "g", "c");
  const mine = await r.changes({ cursor: start });
  const seen = mine.events.map((e) => `${e.kind} ${e.queue}/${e.group}/${e.consumer}`);
  assert.equal(seen.filter((e) => e.startsWith("joined ")).length, 12);
  assert.ok(seen.includes("left q3/g/c") && seen.includes("drain_requested q5/g/c"), seen.join(", "));
  const theirs = await python(`
page = registry.changes(${JSON.stringify(start)}, now_ns=${mine.events.at(-1).atNs + 1n})
out = [f"{e.kind.value} {e.queue}/{e.group}/{e.consumer}" for e in page.events]`);
  assert.deepStrictEqual(theirs, seen);
  // Node goes on from its own cursor: nothing new yet, then the next event only.
  await r.heartbeat("q3", "g", "c", 0);
  const next = await r.changes({ cursor: mine.cursor });
  assert.deepStrictEqual(
    next.events.map((e) => `${e.kind} ${e.queue}/${e.group}/${e.consumer}`),
    ["joined q3/g/c"],
  );
});

// The repository's language-neutral conformance cases (conformance/*.json, the same files
// the Python suite runs) against this client and a redis-server of the test's own, and again
// on a Redis Cluster of three masters of its own (as the Python suite's cluster backend:
// index marks and the fleet indexes, which only one of the two keeps, left out of a store).
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import * as presence from "../dist/index.js";
import { startCluster, startRedis } from "./harness.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const folder = join(here, "..", "..", "..", "conformance");
const files = readdirSync(folder).filter((name) => name.endsWith(".json")).sort();

let server;
let cluster;
/** Each backend: its store's client, and how to make another. */
const backends = {};
before(async () => {
  [server, cluster] = await Promise.all([startRedis(), startCluster()]);
  backends.standalone = { client: server.client(), connect: () => server.client(), flushall: (c) => c.flushall() };
  backends.cluster = { client: cluster.client(), connect: () => cluster.client(), flushall: () => cluster.flushall() };
});
after(async () => {
  for (const backend of Object.values(backends)) backend.client.disconnect();
  await Promise.all([server?.stop(), cluster?.stop()]);
});

/** `P:newest`, `P:oldest` and `P:ttls`, which only a standalone server keeps: a store step on a
 * cluster leaves them out (as tests/conformance_runner.py does). */
const FLEET_INDEXES = ["newest", "oldest", "ttls"];

const ARGUMENT_ERRORS = { ValueError: RangeError, TypeError };
const camel = (name) => name.replace(/_([a-z])/g, (_, c) => c.toUpperCase());

const ns = (value) => (value === null || value === undefined ? null : String(value));

function neutralRow(row) {
  return {
    queue: row.queue,
    group: row.group,
    consumer: row.consumer,
    registered_at_ns: ns(row.registeredAtNs),
    last_heartbeat_ns: ns(row.lastHeartbeatNs),
    last_seen_age_ms: row.lastSeenAgeMs,
    lease_count: row.leaseCount,
    state: row.state,
    last_progress_ns: ns(row.lastProgressNs),
    stuck: row.stuck,
    meta: row.meta,
    capacity: row.capacity,
    draining: row.draining,
    drain_requested: row.drainRequested,
    conflict: row.conflict,
    instance: row.instance,
  };
}

/** A beat of `heartbeat_many`: a `[queue, group, consumer, lease_count]` list, or an object
 * of the Python `BeatSpec`'s fields. */
function beat(b) {
  if (Array.isArray(b)) return b;
  return { queue: b.queue, group: b.group, consumer: b.consumer, leaseCount: b.lease_count, capacity: b.capacity, draining: b.draining };
}

function read(args) {
  const out = {};
  if (args.now_ns !== undefined) out.nowNs = args.now_ns;
  if (args.ttl_ms !== undefined && args.ttl_ms !== null) out.ttlMs = args.ttl_ms;
  if (args.queue !== undefined && args.queue !== null) out.queue = args.queue;
  if (args.group !== undefined && args.group !== null) out.group = args.group;
  if (args.with_meta) out.withMeta = true;
  if (args.retention_ms !== undefined) out.retentionMs = args.retention_ms;
  return out;
}

const where = (args) => (args.queue === undefined ? {} : { queue: args.queue, group: args.group });

/** One operation of a case, as the Python registry's method of the same name. */
const OPS = {
  heartbeat: async (r, a) => ({ drain_requested: (await r.heartbeat(a.queue, a.group, a.consumer, a.lease_count ?? 0, { nowNs: a.now_ns, capacity: a.capacity, draining: a.draining })).drainRequested }),
  // The count, and (a step's `drain_requested`) the beats whose consumer has a drain request.
  heartbeat_many: async (r, a) => {
    const written = await r.heartbeatManyWithDrains(a.beats.map(beat), { nowNs: a.now_ns });
    return Object.assign(new Number(written.count), { drainRequested: written.drainRequested });
  },
  request_drain: (r, a) => r.requestDrain(a.queue, a.group, a.consumer, { nowNs: a.now_ns }),
  deregister: (r, a) => r.deregister(a.queue, a.group, a.consumer, { nowNs: a.now_ns }),
  describe: (r, a) => r.describe(a.queue, a.group, a.consumer, a.meta),
  snapshot: async (r, a) => (await r.snapshot(read(a))).map(neutralRow),
  count_active_by_group: async (r, a) => (await r.countActiveByGroup(read(a))).map((c) => [c.queue, c.group, c.active]),
  count_active: async (r, a) => (await r.countActiveByGroup(read(a))).reduce((n, c) => n + c.active, 0),
  prune_expired: (r, a) => r.pruneExpired(read(a)),
  len: (r) => r.size(),
  set_ttl: async (r, a) => (await r.setTtl(a.ttl_ms, where(a))) ?? null,
  ttl_source: (r, a) => r.ttlSource(where(a)),
  expect: async (r, a) => (await r.expect(a.queue, a.group, a.min_active ?? 1)) ?? null,
  unexpect: (r, a) => r.unexpect(a.queue, a.group),
  expected: (r) => r.expected(),
  groups: async (r, a) =>
    (await r.groups(read(a))).map((g) => ({
      queue: g.queue,
      group: g.group,
      active: g.active,
      stale: g.stale,
      expired: g.expired,
      min_active: g.minActive,
      below: g.below,
      capacity: g.capacity,
      free: g.free,
      draining: g.draining,
      conflicts: g.conflicts,
    })),
};

function subset(expected, actual) {
  if (Array.isArray(expected) && Array.isArray(actual) && expected.length === actual.length) {
    return expected.map((e, i) => subset(e, actual[i]));
  }
  if (expected && actual && typeof expected === "object" && typeof actual === "object" && !Array.isArray(expected)) {
    return Object.fromEntries(Object.keys(expected).map((k) => [k, k in actual ? actual[k] : "<missing>"]));
  }
  return actual;
}

/** The keys of every node of `client` (each master of a cluster) matching `pattern`. */
async function keysOf(client, pattern) {
  if (!client.isCluster) return client.keys(pattern);
  const masters = client.nodes("master");
  return (await Promise.all(masters.map((node) => node.keys(pattern)))).flat().sort();
}

async function store(client, prefix) {
  const out = {};
  for (const key of await keysOf(client, `${prefix}:*`)) {
    if (key.endsWith(":ix")) continue;
    if (client.isCluster && FLEET_INDEXES.some((index) => key === `${prefix}:${index}`)) continue;
    const type = await client.type(key);
    let value;
    if (type === "zset") {
      const flat = await client.zrange(key, 0, -1, "WITHSCORES");
      value = [];
      for (let i = 0; i < flat.length; i += 2) value.push([flat[i], Number(flat[i + 1]).toFixed(0)]);
    } else if (type === "hash") {
      value = await client.hgetall(key);
    } else if (type === "stream") {
      value = (await client.xrange(key, "-", "+")).map(([, fields]) => {
        const entry = {};
        for (let i = 0; i < fields.length; i += 2) entry[fields[i]] = fields[i + 1];
        return entry;
      });
    } else if (type === "set") {
      value = (await client.smembers(key)).sort();
    } else {
      value = await client.get(key);
    }
    out[key] = { type, value };
  }
  return out;
}

function storeView(keys, found, partial) {
  const names = partial ? Object.keys(keys) : [...new Set([...Object.keys(found), ...Object.keys(keys)])];
  const actual = {};
  const expected = {};
  for (const key of names) {
    const spec = keys[key];
    let have = found[key] ?? null;
    if (have && spec && "members" in spec && have.type === "zset") have = { type: "zset", value: have.value.map(([m]) => m).sort() };
    else if (have && spec && spec.present) have = { type: have.type, present: true };
    actual[key] = have;
    expected[key] = spec === undefined || spec === null ? null : "members" in spec ? { type: spec.type, value: [...spec.members].sort() } : spec.present ? { type: spec.type, present: true } : { type: spec.type, value: spec.value };
  }
  return [actual, expected];
}

const runs = [
  ["standalone", "conformance"],
  ["cluster", "conformance on a cluster"],
].flatMap(([backend, title]) => files.map((file) => [backend, title, file]));

for (const [backend, title, file] of runs) {
  const c = JSON.parse(readFileSync(join(folder, file), "utf8"));
  test(`${title} ${file}`, async () => {
    assert.equal(c.protocol_version, presence.PROTOCOL_VERSION);
    const { client, connect, flushall } = backends[backend];
    await flushall(client);
    const prefix = c.prefix ?? "presence";
    let skipped = [];
    // One registry per instance token (the case's, and any a step names: another process
    // on the same store).
    const registries = new Map();
    const registryOf = (instance) => {
      if (!registries.has(instance)) {
        const options = { prefix, onSkipped: (item) => skipped.push(item) };
        if (instance !== undefined) options.instance = instance;
        registries.set(instance, new presence.PresenceRegistry(connect(), options));
      }
      return registries.get(instance);
    };
    try {
      for (const [number, step] of c.steps.entries()) {
        const label = `${c.name} step ${number + 1} (${step.op})`;
        const registry = registryOf(step.instance ?? c.instance);
        if (step.op === "redis") {
          for (const command of step.commands) await client.call(...command);
          continue;
        }
        if (step.op === "store") {
          const keys = client.isCluster ? Object.fromEntries(Object.entries(step.keys).filter(([key]) => !FLEET_INDEXES.some((index) => key === `${prefix}:${index}`))) : step.keys;
          const [actual, expected] = storeView(keys, await store(client, prefix), step.partial);
          assert.deepStrictEqual(actual, expected, label);
          continue;
        }
        const op = OPS[step.op];
        assert.ok(op, `${label}: no such operation`);
        skipped = [];
        if ("error" in step) {
          // The client's errors, or an argument refused (Python's ValueError is this client's
          // RangeError) whose message starts with the argument's name, in camelCase.
          const error = presence[step.error] ?? ARGUMENT_ERRORS[step.error];
          assert.ok(error, `${label}: no such error ${step.error}`);
          await assert.rejects(op(registry, step.args ?? {}), (thrown) => {
            assert.ok(thrown instanceof error, `${label}: ${thrown}`);
            if ("argument" in step) assert.ok(thrown.message.startsWith(camel(step.argument)), `${label}: ${thrown.message}`);
            if ("completed" in step) assert.equal(thrown.completed, step.completed, `${label}: completed`);
            if ("refused" in step) assert.deepStrictEqual(thrown.refused.map((r) => [...r]).sort(), [...step.refused].sort(), `${label}: refused`);
            return true;
          });
          continue;
        }
        const answer = await op(registry, step.args ?? {});
        const reply = answer instanceof Number ? answer.valueOf() : answer;
        if ("reply" in step) assert.deepStrictEqual(subset(step.reply, reply), step.reply, label);
        if ("drain_requested" in step) {
          const order = (a, b) => (JSON.stringify(a) < JSON.stringify(b) ? -1 : 1);
          assert.deepStrictEqual(answer.drainRequested.map((d) => [...d]).sort(order), [...step.drain_requested].sort(order), `${label}: drain_requested`);
        }
        // The keys set aside, in the order reported (docs/protocol.md, section 9), once each.
        assert.deepStrictEqual(
          skipped.map((s) => s.key),
          step.skipped ?? [],
          `${label}: skipped`,
        );
      }
    } finally {
      for (const registry of registries.values()) registry.redis.disconnect();
    }
  });
}

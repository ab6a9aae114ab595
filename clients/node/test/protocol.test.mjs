// A prefix written by another protocol version (docs/protocol.md, section 1): every write
// of this client refuses it with nothing written (issue 30, item 4), also a write of a
// registry that read version 1 a moment ago (its cache of shared settings still fresh): the
// script that writes checks the version in the same call.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import * as presence from "../dist/index.js";
import { startRedis } from "./harness.mjs";

const T0 = 1_796_000_000_000_000_000n;
const MS = 1_000_000n;

let server;
let client;
before(async () => {
  server = await startRedis();
  client = server.client();
});
after(async () => {
  client.disconnect();
  await server.stop();
});

/** Every key with its type and content: equal dumps, an unchanged store. */
async function dump() {
  const out = {};
  for (const key of (await client.keys("*")).sort()) {
    const type = await client.type(key);
    if (type === "zset") out[key] = await client.zrange(key, 0, -1, "WITHSCORES");
    else if (type === "hash") out[key] = await client.hgetall(key);
    else if (type === "stream") out[key] = await client.xrange(key, "-", "+");
    else if (type === "set") out[key] = (await client.smembers(key)).sort();
    else out[key] = await client.get(key);
    out[key] = [type, out[key], await client.pttl(key) > 0];
  }
  return out;
}

const WRITES = {
  heartbeat: (r) => r.heartbeat("q", "g", "c", 2, { nowNs: T0 + MS }),
  "heartbeat (server clock)": (r) => r.heartbeat("q", "g", "c", 2),
  "heartbeat (new group)": (r) => r.heartbeat("q", "new", "c", 0, { nowNs: T0 + MS }),
  heartbeatMany: (r) => r.heartbeatMany([["q", "g", "c", 1], ["r", "h", "d", 0]], { nowNs: T0 }),
  deregister: (r) => r.deregister("q", "g", "c"),
  describe: (r) => r.describe("q", "g", "c", { host: "b" }),
  "describe (remove)": (r) => r.describe("q", "g", "c", {}),
  setTtl: (r) => r.setTtl(5_000),
  "setTtl (group)": (r) => r.setTtl(5_000, { queue: "q", group: "g" }),
  "setTtl (forget)": (r) => r.setTtl(null, { queue: "q", group: "g" }),
  expect: (r) => r.expect("q", "other", 2),
  "expect (again)": (r) => r.expect("q", "g", 3),
  unexpect: (r) => r.unexpect("q", "g"),
  pruneExpired: (r) => r.pruneExpired({ nowNs: T0 + 10n ** 15n }),
  "pruneExpired (ttlMs)": (r) => r.pruneExpired({ nowNs: T0 + 10n ** 15n, ttlMs: 1_000 }),
};

/** A store with something for every write to change, then claimed by another (unknown)
 * version; returns the registry that wrote it (its version read a moment ago). */
async function seed() {
  await client.flushall();
  const registry = new presence.PresenceRegistry(server.client());
  await registry.heartbeat("q", "g", "c", 1, { nowNs: T0 });
  await registry.heartbeat("q", "g", "old", 1, { nowNs: T0 - 10n ** 14n });
  await registry.describe("q", "g", "c", { host: "a" });
  await registry.setTtl(20_000, { queue: "q", group: "g" });
  await registry.expect("q", "g", 1);
  await client.set("presence:protocol", "3");
  return registry;
}

for (const [name, write] of Object.entries(WRITES)) {
  for (const fresh of [false, true]) {
    test(`${name} refuses another version with nothing written (${fresh ? "a new registry" : "the registry that wrote"})`, async () => {
      const writer = await seed();
      const registry = fresh ? new presence.PresenceRegistry(server.client()) : writer;
      const before = await dump();
      try {
        await assert.rejects(write(registry), (error) => {
          assert.ok(error instanceof presence.PresenceProtocolError, `${error.name}: ${error.message}`);
          assert.match(error.message, /written by protocol version "3"/);
          return true;
        });
        assert.deepStrictEqual(await dump(), before);
      } finally {
        writer.redis.disconnect();
        if (fresh) registry.redis.disconnect();
      }
    });
  }
}

// Readers too (docs/protocol.md, section 1): with the first page of the index of groups, or
// of declared groups, a reader reads the version, and refuses another one.
const READS = {
  size: (r) => r.size(),
  expected: (r) => r.expected(),
  "snapshot (ttlMs)": (r) => r.snapshot({ nowNs: T0, ttlMs: 1_000, stuckAfterMs: 1_000 }),
  "countActiveByGroup (ttlMs)": (r) => r.countActiveByGroup({ nowNs: T0, ttlMs: 1_000 }),
  "groups (ttlMs)": (r) => r.groups({ nowNs: T0, ttlMs: 1_000 }),
};

for (const [name, read] of Object.entries(READS)) {
  test(`${name} refuses another version`, async () => {
    const writer = await seed();
    writer.redis.disconnect();
    const registry = new presence.PresenceRegistry(server.client());
    try {
      await assert.rejects(read(registry), (error) => {
        assert.ok(error instanceof presence.PresenceProtocolError, `${error.name}: ${error.message}`);
        assert.match(error.message, /written by protocol version "3"/);
        return true;
      });
    } finally {
      registry.redis.disconnect();
    }
  });
}

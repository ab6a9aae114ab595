// Protocol version 2 against a redis-server of the test's own and the repository's scripts:
// the claim, the nine-field value and the fleet indexes, capacity and draining, drain
// requests and their acknowledgement, instance tokens (a restart, a duplicate), a prefix
// still in version 1 (mode 1), and version 1 and 2 values read together.
import assert from "node:assert/strict";
import { after, before, beforeEach, test } from "node:test";
import * as presence from "../dist/index.js";
import { startRedis } from "./harness.mjs";

const T0 = 1_796_000_000_000_000_000n;
const MS = 1_000_000n;

let server;
let client;
const opened = [];
before(async () => {
  server = await startRedis();
  client = server.client();
});
after(async () => {
  for (const r of opened) r.redis.disconnect();
  client.disconnect();
  await server.stop();
});
beforeEach(async () => {
  await client.flushall();
});

function registry(options = {}) {
  const r = new presence.PresenceRegistry(server.client(), { maxFutureMs: null, onSkipped: () => undefined, ...options });
  opened.push(r);
  return r;
}

/** The kinds of the entries of queue `q`'s event log, in order. */
async function kinds(queue = "q") {
  return (await client.xrange(`presence:{${queue}}:events`, "-", "+")).map(([, fields]) => fields[fields.indexOf("k") + 1]);
}

test("a fresh prefix is claimed for version 2; a beat stores nine fields and feeds P:newest and P:oldest", async () => {
  const r = registry({ instance: "tok-1" });
  assert.deepStrictEqual(await r.heartbeat("q", "g", "c", 2, { nowNs: T0 }), { drainRequested: false });
  assert.equal(await client.get("presence:protocol"), "2");
  assert.equal(await client.hget("presence:{q}:g:c", "c"), `${T0} ${T0} 2 0 0 0 0 tok-1 -`);
  await r.heartbeat("q", "g", "d", 0, { nowNs: T0 + 5n * MS, capacity: 4 });
  assert.deepStrictEqual(await client.zrange("presence:newest", 0, -1, "WITHSCORES"), ["presence:{q}:g:c", String((T0 + 5n * MS) / 1000n)]);
  assert.deepStrictEqual(await client.zrange("presence:oldest", 0, -1, "WITHSCORES"), ["presence:{q}:g:c", String(T0 / 1000n)]);
  assert.equal(await r.deregister("q", "g", "c"), true);
  assert.equal(await r.deregister("q", "g", "d"), true);
  assert.deepStrictEqual([await client.zcard("presence:newest"), await client.zcard("presence:oldest")], [0, 0]);
});

test("capacity and draining show in rows and group rows; '' keeps them", async () => {
  const r = registry({ instance: "w" });
  await r.heartbeat("q", "g", "a", 3, { nowNs: T0, capacity: 4 });
  await r.heartbeat("q", "g", "b", 1, { nowNs: T0, capacity: 2, draining: true });
  await r.heartbeat("q", "g", "c", 1, { nowNs: T0 });
  await r.heartbeat("q", "g", "a", 2, { nowNs: T0 + MS }); // capacity kept
  const rows = await r.snapshot({ nowNs: T0 + MS });
  assert.deepStrictEqual(
    rows.map((x) => [x.consumer, x.capacity, x.draining, x.drainRequested, x.conflict, x.instance]),
    [
      ["a", 4, false, false, false, "w"],
      ["b", 2, true, false, false, "w"],
      ["c", null, false, false, false, "w"],
    ],
  );
  const [group] = await r.groups({ nowNs: T0 + MS });
  assert.deepStrictEqual(
    { capacity: group.capacity, free: group.free, draining: group.draining, conflicts: group.conflicts },
    { capacity: 6, free: 3, draining: 1, conflicts: 0 },
  );
  assert.deepStrictEqual(await kinds(), ["joined", "joined", "draining", "joined"]);
  await r.heartbeat("q", "g", "b", 1, { nowNs: T0 + 2n * MS, draining: false });
  assert.equal((await r.snapshot({ nowNs: T0 + 2n * MS, queue: "q", group: "g" })).find((x) => x.consumer === "b").draining, false);
  // Stale consumers count as draining, expired ones do not; only active ones give capacity.
  const later = await r.groups({ nowNs: T0 + 40_000n * MS, ttlMs: 30_000 });
  assert.deepStrictEqual([later[0].stale, later[0].capacity, later[0].free], [3, null, null]);
});

test("a drain request: the next beats say so until a draining beat acknowledges it", async () => {
  const r = registry();
  await r.heartbeat("q", "g", "c", 1, { nowNs: T0 });
  assert.equal(await r.requestDrain("q", "g", "c", { nowNs: T0 + MS }), true);
  assert.equal(await r.requestDrain("q", "g", "nobody", { nowNs: T0 + MS }), false);
  assert.equal(await client.hexists("presence:{q}:g:c", "nobody"), 0);
  const [row] = await r.snapshot({ nowNs: T0 + MS });
  assert.deepStrictEqual([row.drainRequested, row.draining], [true, false]);
  assert.deepStrictEqual(await r.heartbeat("q", "g", "c", 1, { nowNs: T0 + 2n * MS }), { drainRequested: true });
  assert.deepStrictEqual(await r.heartbeat("q", "g", "c", 1, { nowNs: T0 + 3n * MS, draining: false }), { drainRequested: true });
  assert.deepStrictEqual(await r.heartbeat("q", "g", "c", 1, { nowNs: T0 + 4n * MS, draining: true }), { drainRequested: false });
  const [acknowledged] = await r.snapshot({ nowNs: T0 + 4n * MS });
  assert.deepStrictEqual([acknowledged.drainRequested, acknowledged.draining], [false, true]);
  assert.deepStrictEqual(await kinds(), ["joined", "drain_requested", "draining"]);
});

test("heartbeatManyWithDrains names the written beats whose consumer was asked to drain", async () => {
  const r = registry();
  await r.heartbeatMany([["q", "g", "a"], { queue: "q", group: "h", consumer: "b", leaseCount: 2, capacity: 3 }], { nowNs: T0 });
  await r.requestDrain("q", "h", "b");
  const written = await r.heartbeatManyWithDrains([["q", "g", "a", 1], { queue: "q", group: "h", consumer: "b", leaseCount: 1 }], { nowNs: T0 + MS });
  assert.deepStrictEqual(written, { count: 2, drainRequested: [["q", "h", "b"]] });
  const rows = await r.snapshot({ nowNs: T0 + MS });
  assert.deepStrictEqual(rows.map((x) => [x.group, x.consumer, x.leaseCount, x.capacity, x.drainRequested]), [
    ["g", "a", 1, null, false],
    ["h", "b", 1, 3, true],
  ]);
  assert.equal(await r.heartbeatMany([{ queue: "q", group: "h", consumer: "b", draining: true }], { nowNs: T0 + 2n * MS }), 1);
  assert.deepStrictEqual((await r.heartbeatManyWithDrains([["q", "h", "b"]], { nowNs: T0 + 3n * MS })).drainRequested, []);
});

test("instance tokens: another process under the same name is a restart; two taking turns are a conflict", async () => {
  const first = registry({ instance: "first" });
  const second = registry({ instance: "second" });
  await first.heartbeat("q", "g", "c", 0, { nowNs: T0 });
  await second.heartbeat("q", "g", "c", 0, { nowNs: T0 + MS }); // a restart: first is gone
  let [row] = await second.snapshot({ nowNs: T0 + MS });
  assert.deepStrictEqual([row.instance, row.conflict], ["second", false]);
  await first.heartbeat("q", "g", "c", 0, { nowNs: T0 + 2n * MS }); // first again: a duplicate
  [row] = await first.snapshot({ nowNs: T0 + 2n * MS });
  assert.deepStrictEqual([row.instance, row.conflict], ["first", true]);
  assert.equal((await first.groups({ nowNs: T0 + 2n * MS }))[0].conflicts, 1);
  assert.deepStrictEqual(await kinds(), ["joined", "restarted", "conflict"]);
  // The conflict ends with the TTL (the active rule on conflict_ns).
  [row] = await first.snapshot({ nowNs: T0 + 2n * MS + 30_001n * MS, ttlMs: 30_000 });
  assert.equal(row.conflict, false);
});

test("a prefix that still says 1: v1 values written, its claim kept, drain requests refused", async () => {
  await client.set("presence:protocol", "1");
  const r = registry();
  assert.deepStrictEqual(await r.heartbeat("q", "g", "c", 2, { nowNs: T0, capacity: 8, draining: true }), { drainRequested: false });
  assert.equal(await r.heartbeatMany([{ queue: "q", group: "g", consumer: "d", capacity: 3 }], { nowNs: T0 }), 1);
  assert.equal(await client.hget("presence:{q}:g:c", "c"), `${T0} ${T0} 2`);
  assert.equal(await client.hget("presence:{q}:g:c", "d"), `${T0} ${T0} 0`);
  assert.equal(await client.get("presence:protocol"), "1");
  await assert.rejects(r.requestDrain("q", "g", "c"), (error) => {
    assert.ok(error instanceof presence.PresenceProtocolError, `${error.name}: ${error.message}`);
    assert.match(error.message, /migrate/);
    return true;
  });
  const rows = await r.snapshot({ nowNs: T0 });
  assert.deepStrictEqual(rows.map((x) => [x.consumer, x.capacity, x.draining]), [["c", null, false], ["d", null, false]]);
});

test("version 1 and 2 values in one group are read together; spoilt ones of either are set aside", async () => {
  const r = registry({ instance: "new" });
  await r.heartbeat("q", "g", "v2", 1, { nowNs: T0, capacity: 5 });
  await client.hset("presence:{q}:g:c", "v1", `${T0} ${T0} 2`, "v1p", `${T0} ${T0} 0 ${T0}`, "bad2", `${T0} ${T0} 0 0 0 0 0 x`, "bad1", `${T0} ${T0}`);
  await client.zadd("presence:{q}:g:hb", String(T0 / 1000n), "v1", String(T0 / 1000n), "v1p", String(T0 / 1000n), "bad2", String(T0 / 1000n), "bad1");
  const said = [];
  const reader = registry({ onSkipped: (item) => said.push(item) });
  const rows = await reader.snapshot({ nowNs: T0 });
  assert.deepStrictEqual(rows.map((x) => [x.consumer, x.leaseCount, x.capacity, x.instance, x.lastProgressNs]), [
    ["v1", 2, null, null, null],
    ["v1p", 0, null, null, T0],
    ["v2", 1, 5, "new", null],
  ]);
  assert.deepStrictEqual(rows.skipped.map((s) => s.consumer), ["bad1", "bad2"]);
  assert.equal(said.length, 1);
  // A beat rewrites a version 1 value as version 2.
  await r.heartbeat("q", "g", "v1", 2, { nowNs: T0 + MS });
  assert.equal(await client.hget("presence:{q}:g:c", "v1"), `${T0} ${T0 + MS} 2 0 0 0 0 new -`);
  const [group] = await reader.groups({ nowNs: T0 + MS });
  assert.deepStrictEqual([group.active, group.capacity, group.free], [5, 5, 4]);
});

test("setTtl keeps P:ttls: a group's own TTL scored by its ms, gone when forgotten; the prefix's is no group's", async () => {
  const r = registry();
  await r.setTtl(30_000);
  await r.setTtl(5_000, { queue: "q", group: "a" });
  await r.setTtl(2_000, { queue: "q", group: "b" });
  assert.deepEqual(await client.zrange("presence:ttls", 0, -1, "WITHSCORES"), ["presence:{q}:b:c", "2000", "presence:{q}:a:c", "5000"]);
  await r.setTtl(90_000, { queue: "q", group: "b" });
  await r.setTtl(null, { queue: "q", group: "a" });
  assert.deepEqual(await client.zrange("presence:ttls", 0, -1, "WITHSCORES"), ["presence:{q}:b:c", "90000"]);
});

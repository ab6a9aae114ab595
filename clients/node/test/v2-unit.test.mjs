// Protocol version 2 without a server: the stored values this client reads (version 1's
// three or four fields and version 2's nine, in one group), the rows derived from them, the
// new arguments' checks, and the KEYS and ARGV the scripts receive (a stand-in for ioredis
// records the calls), as /work's V2SPEC and docs/protocol.md spell them.
import assert from "node:assert/strict";
import { test } from "node:test";
import * as presence from "../dist/index.js";
import { parseStored, row } from "../dist/replies.js";

const keys = new presence.Keyspace("presence");
const gk = keys.group("q", "g");
const T = 1_796_000_000_000_000_000n;
const MS = 1_000_000n;

test("a version-1 value reads as no capacity, no flags, no conflict, no instance", () => {
  assert.deepStrictEqual(parseStored(gk, "c", "1 2 3"), { registered: 1n, heartbeat: 2n, lease: 3, progress: null, capacity: 0, flags: 0, conflict: 0n, instance: null, previous: null });
  assert.deepStrictEqual(parseStored(gk, "c", "1 2 3 4"), { registered: 1n, heartbeat: 2n, lease: 3, progress: 4n, capacity: 0, flags: 0, conflict: 0n, instance: null, previous: null });
});

test("a version-2 value: nine fields, progress 0 is none, '-' is no token", () => {
  assert.deepStrictEqual(parseStored(gk, "c", "1 2 3 0 8 3 7 0123456789abcdef -"), {
    registered: 1n,
    heartbeat: 2n,
    lease: 3,
    progress: null,
    capacity: 8,
    flags: 3,
    conflict: 7n,
    instance: "0123456789abcdef",
    previous: null,
  });
  const full = parseStored(gk, "c", "1796000000000000000 1796000000000000001 4294967295 1796000000000000002 4294967295 4294967295 1796000000000000003 A.b_c-9 x");
  assert.equal(full.progress, 1796000000000000002n);
  assert.equal(full.capacity, 4294967295);
  assert.equal(full.flags, 4294967295);
  assert.equal(full.conflict, 1796000000000000003n);
  assert.equal(full.previous, "x");
});

test("spoilt values of either version are data errors", () => {
  const spoilt = [
    "",
    "1 2",
    "1 2 3 4 5",
    "1 2 3 4 5 6",
    "1 2 3 4 5 6 7",
    "1 2 3 4 5 6 7 a",
    "1 2 3 4 5 6 7 a b c",
    "1 2 3 4 5 6 7 a b ",
    " 1 2 3 4 5 6 7 a b",
    "1 2 3 4 5  6 7 a b",
    "1 2 3 0 4294967296 0 0 - -", // capacity above 2^32-1
    "1 2 4294967296 0 0 0 0 - -", // lease above 2^32-1
    "1 2 3 0 0 12345678901 0 - -", // flags of 11 digits
    "1 2 3 0 0 4294967296 0 - -", // flags above 2^32-1
    "1 2 3 0 0 0 12345678901234567890 - -", // conflict of 20 digits
    "1 2 3 0 0 0 0 a/b -", // a token of another alphabet
    "1 2 3 0 0 0 0 " + "a".repeat(33) + " -", // a token of 33 characters
    "1 2 3 0 0 0 0 - " + "b".repeat(33),
    "1 2 3 0 -1 0 0 - -",
    "1 2 3 0 0 0 0 a b\n",
  ];
  for (const value of spoilt) {
    assert.throws(() => parseStored(gk, "c", value), presence.PresenceDataError, JSON.stringify(value));
  }
});

test("rows say capacity (null for 0), draining, drainRequested, conflict under the TTL rule, instance", () => {
  const at = (value, now = T, ttl = 1_000) => row(gk, "c", parseStored(gk, "c", value), now, ttl, 300_000, {});
  const old = at(`${T - MS} ${T - MS} 2`);
  assert.deepStrictEqual(
    [old.capacity, old.draining, old.drainRequested, old.conflict, old.instance, old.state],
    [null, false, false, false, null, "active"],
  );
  const v2 = at(`${T - MS} ${T - MS} 2 0 4 1 0 abc -`);
  assert.deepStrictEqual([v2.capacity, v2.draining, v2.drainRequested, v2.conflict, v2.instance], [4, true, false, false, "abc"]);
  assert.deepStrictEqual([at(`${T} ${T} 2 0 0 2 0 - -`).draining, at(`${T} ${T} 2 0 0 2 0 - -`).drainRequested], [false, true]);
  assert.equal(at(`${T} ${T} 2 0 0 0 0 - -`).capacity, null);
  // Unknown bits are ignored: 4 | 1 is draining, 8 is nothing.
  assert.deepStrictEqual([at(`${T} ${T} 0 0 0 5 0 - -`).draining, at(`${T} ${T} 0 0 0 8 0 - -`).draining], [true, false]);
  // conflict_ns is active as a beat is: after now - (ttl + 1) ms.
  const ttl = 1_000n;
  const edge = T - (ttl + 1n) * MS;
  assert.equal(at(`${T} ${T} 0 0 0 0 ${edge + 1n} a b`).conflict, true);
  assert.equal(at(`${T} ${T} 0 0 0 0 ${edge} a b`).conflict, false);
  assert.equal(at(`${T} ${T} 0 0 0 0 0 a b`, T, 1_000).conflict, false);
  // Progress 0 of a version-2 value is none: a lease held since registration is stuck.
  const stuck = row(gk, "c", parseStored(gk, "c", `${T - 400_000n * MS} ${T} 1 0 0 0 0 - -`), T, 30_000, 300_000, {});
  assert.deepStrictEqual([stuck.lastProgressNs, stuck.stuck], [null, true]);
});

test("the new arguments are checked before anything is written", () => {
  assert.equal(presence.checkCapacity(undefined), null);
  assert.equal(presence.checkCapacity(null), null);
  assert.equal(presence.checkCapacity(0), 0);
  assert.equal(presence.checkCapacity(2 ** 32 - 1), 2 ** 32 - 1);
  for (const bad of [-1, 2 ** 32, 1.5, NaN]) assert.throws(() => presence.checkCapacity(bad), { name: "RangeError", message: /^capacity/ });
  assert.throws(() => presence.checkCapacity("4"), { name: "TypeError", message: /^capacity/ });
  assert.equal(presence.checkDraining(undefined), null);
  assert.equal(presence.checkDraining(true), true);
  assert.throws(() => presence.checkDraining(1), { name: "TypeError", message: /^draining/ });
  assert.equal(presence.checkInstance("a-B_9.z"), "a-B_9.z");
  for (const bad of ["", "a b", "x".repeat(33), "é"]) assert.throws(() => presence.checkInstance(bad), { name: "RangeError", message: /^instance/ });
  assert.throws(() => presence.checkInstance(7), { name: "TypeError", message: /^instance/ });
  assert.throws(() => new presence.PresenceRegistry({}, { instance: "no spaces" }), RangeError);
});

test("one instance token per process: 16 hex digits, the registries' default", () => {
  const token = presence.processInstance();
  assert.match(token, /^[0-9a-f]{16}$/);
  assert.equal(presence.processInstance(), token);
  assert.equal(new presence.PresenceRegistry({}).instance, token);
  assert.equal(new presence.PresenceRegistry({}, { instance: "mine" }).instance, "mine");
  assert.equal(presence.PROTOCOL_VERSION, "2");
  assert.deepStrictEqual([...presence.ACCEPTED_VERSIONS], ["1", "2"]);
});

/** A stand-in for ioredis: no settings stored, every script call recorded and answered by
 * `answer(name, keys, args)`. */
function recorder(answer) {
  const calls = [];
  const sets = [];
  const redis = {
    get: async () => null,
    set: async (...args) => {
      sets.push(args);
      return "OK";
    },
    evalsha: async (sha, count, ...rest) => {
      const name = presence.SCRIPT_NAMES.find((n) => presence.script(n).sha === sha);
      const call = { name, keys: rest.slice(0, count), args: rest.slice(count).map(String) };
      calls.push(call);
      return answer(call);
    },
  };
  return { redis, calls, sets };
}

const TAIL = ["presence:groups", "presence:events", "presence:{presence:events}:epoch", "presence:protocol", "presence:newest", "presence:oldest"];

test("heartbeat: KEYS end with the protocol, newest and oldest; ARGV carry capacity, draining and the token", async () => {
  const { redis, calls, sets } = recorder(({ args }) => (args[5] === "asked" ? 1 : 0));
  const registry = new presence.PresenceRegistry(redis, { instance: "tok" });
  assert.deepStrictEqual(await registry.heartbeat("q", "g", "c", 2, { nowNs: T }), { drainRequested: false });
  assert.deepStrictEqual(await registry.heartbeat("q", "g", "asked", 0, { capacity: 8, draining: true }), { drainRequested: true });
  await registry.heartbeat("q", "g", "c", 1, { capacity: 0, draining: false });
  assert.deepStrictEqual(calls[0].keys, [gk.hb, gk.data, gk.mark, gk.events, gk.meta, ...TAIL]);
  assert.deepStrictEqual(calls[0].args, ["30000", "10000", "86400000", "10000", String(T), "c", "2", "", "", "tok"]);
  assert.deepStrictEqual(calls[1].args.slice(4), ["", "asked", "0", "8", "1", "tok"]);
  assert.deepStrictEqual(calls[2].args.slice(7), ["0", "0", "tok"]);
  assert.deepStrictEqual(sets, [["presence:protocol", "2", "NX"]]);
});

test("heartbeatMany: 7-tuples after the token and the mode; drains come back by (group, consumer)", async () => {
  const { redis, calls } = recorder(() => [1, 0, [2, "c2", 1, "c1"]]);
  const registry = new presence.PresenceRegistry(redis, { instance: "tok" });
  const beats = [
    ["q", "g", "c1", 1],
    { queue: "r", group: "h", consumer: "c2", leaseCount: 3, capacity: 5, draining: true },
    { queue: "q", group: "g", consumer: "c3", draining: false },
  ];
  const written = await registry.heartbeatManyWithDrains(beats, { nowNs: T });
  assert.deepStrictEqual(written, { count: 3, drainRequested: [["q", "g", "c1"], ["r", "h", "c2"]] });
  const hk = keys.group("r", "h");
  assert.deepStrictEqual(calls[0].keys, [gk.hb, gk.data, gk.mark, gk.events, gk.meta, hk.hb, hk.data, hk.mark, hk.events, hk.meta, ...TAIL]);
  assert.deepStrictEqual(calls[0].args, [String(T), "60000", "10000", "86400000", "10000", "tok", "", "30000", "30000", "1", "c1", "1", "0", "", "", "", "2", "c2", "3", "0", "", "5", "1", "1", "c3", "0", "0", "", "", "0"]);
  assert.equal(await registry.heartbeatMany(beats, { nowNs: T }), 3);
  await assert.rejects(registry.heartbeatMany([{ queue: "q", group: "g", consumer: "c", capacity: -1 }]), { name: "RangeError", message: /^capacity/ });
  await assert.rejects(registry.heartbeatMany([null]), { name: "TypeError", message: /^beats/ });
  await assert.rejects(registry.heartbeatMany(["q"]), { name: "TypeError", message: /^beats/ });
  await assert.rejects(registry.heartbeatMany([{ queue: "q", group: "g", consumer: "c", draining: "yes" }]), { name: "TypeError", message: /^draining/ });
  // A consumer beaten twice in one batch is named once.
  const one = new presence.PresenceRegistry(recorder(() => [1, 0, [1, "c1", 1, "c1"]]).redis);
  const twice = await one.heartbeatManyWithDrains([["q", "g", "c1"], ["q", "g", "c1", 2]], { nowNs: T });
  assert.deepStrictEqual(twice.drainRequested, [["q", "g", "c1"]]);
});

test("heartbeatMany: a refused group's beats are not drains; the batch error carries the others'", async () => {
  const { redis } = recorder(() => [2, 0, [1, "c1", 2, "c2"], 2, "", "PRESENCEDATA spoilt"]);
  const registry = new presence.PresenceRegistry(redis);
  await assert.rejects(registry.heartbeatManyWithDrains([["q", "g", "c1"], ["r", "h", "c2"]]), (error) => {
    assert.ok(error instanceof presence.PresenceBatchError);
    assert.deepStrictEqual(error.refused, [["r", "h", "c2"]]);
    assert.deepStrictEqual(error.drainRequested, [["q", "g", "c1"]]);
    return true;
  });
});

test("requestDrain: drain.lua with the consumer, the instant and the log's bounds", async () => {
  const { redis, calls } = recorder(({ args }) => [args[0] === "c" ? 1 : 0, 0]);
  const registry = new presence.PresenceRegistry(redis);
  assert.equal(await registry.requestDrain("q", "g", "c", { nowNs: T }), true);
  assert.equal(await registry.requestDrain("q", "g", "gone"), false);
  assert.deepStrictEqual(calls.map((c) => c.name), ["drain", "drain"]);
  assert.deepStrictEqual(calls[0].keys, [gk.hb, gk.data, gk.mark, gk.events, gk.meta, ...TAIL]);
  assert.deepStrictEqual(calls[0].args, ["c", String(T), "10000", "86400000"]);
  assert.deepStrictEqual(calls[1].args[1], "");
  await assert.rejects(registry.requestDrain("q", "g", ""), RangeError);
});

// What the client refuses and what it stores (issue 30, item 10), against a redis-server of
// the test's own: the per-group cache of a beat's keys tells every pair of names apart and
// checks them as the uncached path does; a declared minimum is Python's range; metadata is a
// plain object or a Map of strings, stored in Python's spelling, and nothing else.
import assert from "node:assert/strict";
import { after, before, beforeEach, test } from "node:test";
import * as presence from "../dist/index.js";
import { startRedis } from "./harness.mjs";

const T0 = 1_700_000_000_000_000_000n;

let server;
let client;
let registry;
before(async () => {
  server = await startRedis();
  client = server.client();
});
after(async () => {
  client.disconnect();
  await server.stop();
});
beforeEach(async () => {
  await client.flushall();
  registry?.redis.disconnect();
  registry = new presence.PresenceRegistry(server.client(), { maxFutureMs: null });
});
after(() => registry?.redis.disconnect());

/** Every key under the prefix with its content, to show that a refusal wrote nothing. */
async function store() {
  const out = {};
  for (const key of (await client.keys("presence:*")).sort()) {
    const type = await client.type(key);
    if (type === "hash") out[key] = await client.hgetall(key);
    else if (type === "zset") out[key] = await client.zrange(key, 0, -1, "WITHSCORES");
    else if (type === "string") out[key] = await client.get(key);
    else out[key] = type;
  }
  return out;
}

const where = (rows) => rows.map((r) => [r.queue, r.group, r.consumer]);

// -- the cache of a beat's keys ---------------------------------------------------------

test("two pairs of names that join to the same string beat into their own groups", async () => {
  await registry.heartbeat("a\0b", "c", "first", 0, { nowNs: T0 });
  await registry.heartbeat("a", "b\0c", "second", 0, { nowNs: T0 });
  await registry.heartbeat("a\0", "b\0c", "third", 0, { nowNs: T0 });
  await registry.heartbeat("a", "\0b\0c", "fourth", 0, { nowNs: T0 });
  assert.deepStrictEqual(where(await registry.snapshot({ nowNs: T0 })), [
    ["a", "\0b\0c", "fourth"],
    ["a", "b\0c", "second"],
    ["a\0", "b\0c", "third"],
    ["a\0b", "c", "first"],
  ]);
  assert.deepStrictEqual(Object.keys(await client.hgetall("presence:{a}:b%00c:c")), ["second"]);
});

// Each case first beats a pair (`seed`) whose cache entry the old key (`queue + "\0" + group`)
// would also find for the bad names.
for (const [label, seed, args, error, argument] of [
  ["a queue that is an array", ["q", "g"], [["q"], "g", "w"], TypeError, "queue"],
  ["a group that stringifies to the cached one", ["q", "g"], ["q", { toString: () => "g" }, "w"], TypeError, "group"],
  ["an empty queue", ["\0q", "g"], ["", "q\0g", "w"], RangeError, "queue"],
  ["an empty group", ["q", "\0"], ["q\0", "", "w"], RangeError, "group"],
  ["a group over 512 bytes", ["q", "g"], ["q", "g".repeat(513), "w"], RangeError, "group"],
  ["a lone surrogate", ["q", "g"], ["q", "\ud800", "w"], RangeError, "group"],
]) {
  test(`the cached path refuses ${label} as the first beat does, writing nothing`, async () => {
    await registry.heartbeat(...seed, "w", 0, { nowNs: T0 }); // the pair is cached now
    const before = await store();
    const refused = (e) => e instanceof error && e.message.startsWith(argument);
    await assert.rejects(registry.heartbeat(...args, 0, { nowNs: T0 + 1n }), refused);
    assert.deepStrictEqual(await store(), before);
    const fresh = new presence.PresenceRegistry(server.client(), { maxFutureMs: null });
    try {
      await assert.rejects(fresh.heartbeat(...args, 0, { nowNs: T0 + 1n }), refused);
    } finally {
      fresh.redis.disconnect();
    }
    assert.deepStrictEqual(await store(), before);
  });
}

test("a lease count, TTL or instant of the wrong type is a TypeError, one out of range a RangeError", async () => {
  await registry.heartbeat("q", "g", "w", 0, { nowNs: T0 });
  const before = await store();
  const cases = [
    [() => registry.heartbeat("q", "g", "w", "1"), TypeError, "leaseCount"],
    [() => registry.heartbeat("q", "g", "w", 2 ** 32), RangeError, "leaseCount"],
    [() => registry.heartbeat("q", "g", "w", 0, { nowNs: 1 }), TypeError, "nowNs"],
    [() => registry.heartbeat("q", "g", "w", 0, { nowNs: "-1" }), RangeError, "nowNs"],
    [() => registry.setTtl("1000"), TypeError, "ttlMs"],
    [() => registry.setTtl(0), RangeError, "ttlMs"],
    [() => registry.snapshot({ stuckAfterMs: 1n }), TypeError, "stuckAfterMs"],
    [() => registry.pruneExpired({ nowNs: T0 + 10n ** 15n, retentionMs: "1000" }), TypeError, "retentionMs"],
    [() => registry.pruneExpired({ nowNs: T0 + 10n ** 15n, retentionMs: -1 }), RangeError, "retentionMs"],
  ];
  for (const [call, error, argument] of cases) {
    await assert.rejects(call(), (e) => e instanceof error && e.message.startsWith(argument), argument);
  }
  assert.deepStrictEqual(await store(), before);
});

// -- declared minimums ------------------------------------------------------------------

test("a declared minimum is an integer in [1, 1000000], as Python's", async () => {
  assert.equal(presence.MAX_MIN_ACTIVE, 1_000_000);
  await registry.expect("q", "least", 1);
  await registry.expect("q", "most", 1_000_000);
  assert.deepStrictEqual(await store(), {
    "presence:expects": ["presence:{q}:expect", "0"],
    "presence:{q}:expect": { least: "1", most: "1000000" },
  });
  const skipped = [];
  const reader = new presence.PresenceRegistry(server.client(), { onSkipped: (s) => skipped.push(s) });
  try {
    assert.deepStrictEqual(await reader.expected(), [
      ["q", "least", 1],
      ["q", "most", 1_000_000],
    ]);
    const groups = await reader.groups({ nowNs: T0 });
    assert.deepStrictEqual(
      groups.map((g) => [g.group, g.minActive, g.below]),
      [
        ["least", 1, true],
        ["most", 1_000_000, true],
      ],
    );
  } finally {
    reader.redis.disconnect();
  }
  assert.deepStrictEqual(skipped, []);
});

for (const [label, value, error] of [
  ["0 (unexpect stops declaring a group)", 0, RangeError],
  ["above the most", 1_000_001, RangeError],
  ["1e7", 1e7, RangeError],
  ["negative", -1, RangeError],
  ["a fraction", 1.5, RangeError],
  ["NaN", NaN, RangeError],
  ["Infinity", Infinity, RangeError],
  ["a string", "2", TypeError],
  ["a bigint", 2n, TypeError],
  ["a boolean", true, TypeError],
  ["null", null, TypeError],
]) {
  test(`expect refuses a minimum that is ${label}, writing nothing`, async () => {
    await assert.rejects(registry.expect("q", "g", value), (e) => e instanceof error && e.message.startsWith("minActive"));
    assert.deepStrictEqual(await store(), {});
  });
}

test("a stored minimum that is not canonical digits from 1 to 1000000 is set aside by the reader, as Python does", async () => {
  const spoilt = ["0", "02", "+5", " 5", "5 ", "1_0", "1e3", "5.0", "٥", "1000001", "10000000", "-1", ""];
  await client.hset("presence:{q}:expect", "ok", "3", ...spoilt.flatMap((value, i) => [`v${i}`, value]));
  await client.zadd("presence:expects", 0, "presence:{q}:expect");
  const skipped = [];
  const reader = new presence.PresenceRegistry(server.client(), { onSkipped: (s) => skipped.push(s) });
  try {
    assert.deepStrictEqual(await reader.expected(), [["q", "ok", 3]]);
    assert.deepStrictEqual(
      (await reader.groups({ nowNs: T0 })).map((g) => [g.group, g.minActive]),
      [["ok", 3]],
    );
  } finally {
    reader.redis.disconnect();
  }
  assert.deepStrictEqual(
    skipped.map((s) => s.key),
    ["presence:{q}:expect", "presence:{q}:expect"],
  );
});

// -- metadata ---------------------------------------------------------------------------

async function storedMeta(consumer = "w") {
  return client.hget("presence:{q}:g:m", consumer);
}

test("describe stores a Map as the object of the same entries", async () => {
  await registry.heartbeat("q", "g", "w", 0, { nowNs: T0 });
  await registry.describe("q", "g", "w", { old: "1" });
  assert.equal(
    await registry.describe(
      "q",
      "g",
      "w",
      new Map([
        ["zone", "b"],
        ["host", "a"],
      ]),
    ),
    true,
  );
  assert.equal(await storedMeta(), '{"host":"a","zone":"b"}');
  await registry.describe("q", "g", "w", new Map());
  assert.equal(await storedMeta(), null); // an empty Map removes it, as an empty object does
});

test("describe stores keys in code-point order, integer-like keys included", async () => {
  await registry.heartbeat("q", "g", "w", 0, { nowNs: T0 });
  await registry.describe("q", "g", "w", { b: "x", 10: "y", 9: "z" });
  assert.equal(await storedMeta(), '{"10":"y","9":"z","b":"x"}'); // json.dumps(sort_keys=True)
  const [row] = await registry.snapshot({ nowNs: T0, withMeta: true });
  assert.deepStrictEqual(row.meta, { 10: "y", 9: "z", b: "x" });
});

test("describe stores a __proto__ key as any other", async () => {
  await registry.heartbeat("q", "g", "w", 0, { nowNs: T0 });
  await registry.describe("q", "g", "w", { ["__proto__"]: "x", host: "h" });
  assert.equal(await storedMeta(), '{"__proto__":"x","host":"h"}');
  await registry.describe("q", "g", "w", JSON.parse('{"__proto__":"only"}'));
  assert.equal(await storedMeta(), '{"__proto__":"only"}');
  await registry.describe("q", "g", "w", new Map([["__proto__", "m"]]));
  assert.equal(await storedMeta(), '{"__proto__":"m"}');
  const [row] = await registry.snapshot({ nowNs: T0, withMeta: true });
  assert.deepStrictEqual(Object.entries(row.meta), [["__proto__", "m"]]);
  assert.equal(Object.getPrototypeOf(row.meta), Object.prototype);
});

test("describe accepts an object without a prototype", async () => {
  await registry.heartbeat("q", "g", "w", 0, { nowNs: T0 });
  const meta = Object.create(null);
  meta.host = "h";
  await registry.describe("q", "g", "w", meta);
  assert.equal(await storedMeta(), '{"host":"h"}');
});

class Settings {
  host = "h";
}

for (const [label, meta, error, argument] of [
  ["an array", ["a"], TypeError, "meta"],
  ["an empty array", [], TypeError, "meta"],
  ["a Set", new Set(["a"]), TypeError, "meta"],
  ["an instance of a class", new Settings(), TypeError, "meta"],
  ["a Date", new Date(0), TypeError, "meta"],
  ["a string", "host=h", TypeError, "meta"],
  ["null", null, TypeError, "meta"],
  ["undefined", undefined, TypeError, "meta"],
  ["a number value", { pid: 42 }, TypeError, 'meta["pid"]'],
  ["a null value", { pid: null }, TypeError, 'meta["pid"]'],
  ["a Map with a number key", new Map([[1, "a"]]), TypeError, "meta key"],
  ["a Map with a number value", new Map([["pid", 42]]), TypeError, 'meta["pid"]'],
  ["a symbol key", { host: "h", [Symbol("s")]: "x" }, TypeError, "meta"],
  ["a hidden key", Object.defineProperty({ host: "h" }, "pid", { value: "42", enumerable: false }), TypeError, "meta"],
  ["an empty key", { "": "x" }, RangeError, "meta key"],
  ["17 keys", Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, "v"])), RangeError, "meta"],
  ["a Map of 17 keys", new Map(Array.from({ length: 17 }, (_, i) => [`k${i}`, "v"])), RangeError, "meta"],
  ["a value over 512 bytes", { k: "v".repeat(513) }, RangeError, 'meta["k"]'],
  ["over 1024 bytes in all", { a: "v".repeat(500), b: "v".repeat(500), c: "v".repeat(30) }, RangeError, "meta"],
]) {
  test(`describe refuses ${label}, writing nothing`, async () => {
    await registry.heartbeat("q", "g", "w", 0, { nowNs: T0 });
    await registry.describe("q", "g", "w", { kept: "1" });
    const before = await store();
    await assert.rejects(registry.describe("q", "g", "w", meta), (e) => e instanceof error && e.message.startsWith(argument));
    assert.deepStrictEqual(await store(), before);
  });
}

test("encodeMeta spells a mapping as Python's json.dumps(sort_keys=True, separators, ensure_ascii=False)", () => {
  assert.equal(presence.encodeMeta({ b: "1", 10: "2", 9: "3", é: "q\"\\\n\x01\x7f😀", ["__proto__"]: "p" }), '{"10":"2","9":"3","__proto__":"p","b":"1","é":"q\\"\\\\\\n\\u0001\x7f😀"}');
  assert.equal(presence.encodeMeta(new Map([["z", "1"], ["a", "2"]])), '{"a":"2","z":"1"}');
});

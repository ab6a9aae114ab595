// Bad data costs only what it spoils (docs/protocol.md, sections 8 and 9; issue 30, items 2
// and 3), in every read of this client, as in the Python package: a group whose own shared
// setting is spoilt (text, a key of another type) is set aside by a read of many groups and
// raises for a read of that one group; a spoilt progress budget concerns the snapshots only;
// the prefix's spoilt setting fails every read that needs it, naming it; a consumer whose
// stored value is spoilt is set aside alone, by the counts too. The conformance cases 12, 14
// and 16 hold the common path; these hold the rest, against a redis-server of the test's own.
import assert from "node:assert/strict";
import { after, before, beforeEach, test } from "node:test";
import * as presence from "../dist/index.js";
import { startRedis } from "./harness.mjs";

const T0 = 1_700_000_000_000_000_000n;
const MS = 1_000_000n;

let server;
let client;
let said;
let registry;
before(async () => {
  server = await startRedis();
  client = server.client();
});
after(async () => {
  registry?.redis.disconnect();
  client.disconnect();
  await server.stop();
});
beforeEach(async () => {
  await client.flushall();
  registry?.redis.disconnect();
  said = [];
  registry = new presence.PresenceRegistry(server.client(), { maxFutureMs: null, onSkipped: (item) => said.push(item) });
  await registry.heartbeat("q", "g", "a", 1, { nowNs: T0 });
  await registry.heartbeat("q", "bad", "v", 1, { nowNs: T0 });
  // A new registry: nothing of the settings cached (the spoilt keys come after the beats).
  registry.redis.disconnect();
  registry = new presence.PresenceRegistry(server.client(), { maxFutureMs: null, onSkipped: (item) => said.push(item) });
});

const groupsOf = (answer) => answer.map((item) => `${item.queue}/${item.group}`);
const keysSaid = () => said.map((item) => item.key);

/** Every read of many groups this client has, each with whether it needs the progress budget. */
const FLEET = {
  snapshot: [(r) => r.snapshot({ nowNs: T0 }), true],
  "snapshot of a queue": [(r) => r.snapshot({ nowNs: T0, queue: "q" }), true],
  countActiveByGroup: [(r) => r.countActiveByGroup({ nowNs: T0 }), false],
  groups: [(r) => r.groups({ nowNs: T0 }), false],
};

for (const [label, plant, kind] of [
  ["its TTL, a hash", () => client.hset("presence:{q}:bad:ttl", "a", "b"), "ttl"],
  ["its TTL, 0", () => client.set("presence:{q}:bad:ttl", "0"), "ttl"],
  ["its progress budget, text", () => client.set("presence:{q}:bad:stuck", "5 min"), "stuck"],
  ["its progress budget, a list", () => client.rpush("presence:{q}:bad:stuck", "x"), "stuck"],
]) {
  test(`a group whose own setting is spoilt (${label}) is set aside by the reads that need it, and read by the others`, async () => {
    await plant();
    for (const [name, [read, needsStuck]] of Object.entries(FLEET)) {
      said = [];
      const answer = await read(registry);
      if (kind === "ttl" || needsStuck) {
        assert.deepStrictEqual(groupsOf(answer), ["q/g"], name);
        assert.deepStrictEqual(keysSaid(), ["presence:{q}:bad:c"], name);
        assert.deepStrictEqual(
          answer.skipped.map((s) => [s.key, s.queue, s.group, s.consumer]),
          [["presence:{q}:bad:c", "q", "bad", undefined]],
          name,
        );
        assert.match(answer.skipped[0].reason, new RegExp(`presence:\\{q\\}:bad:${kind}`), name);
      } else {
        assert.deepStrictEqual(groupsOf(answer), ["q/bad", "q/g"], name);
        assert.deepStrictEqual([keysSaid(), answer.skipped], [[], []], name);
      }
    }
    // That one group: its data error (never a driver's ReplyError), where it needs the setting.
    const one = { nowNs: T0, queue: "q", group: "bad" };
    await assert.rejects(registry.snapshot(one), presence.PresenceDataError);
    if (kind === "ttl") {
      await assert.rejects(registry.countActiveByGroup(one), presence.PresenceDataError);
      await assert.rejects(registry.heartbeat("q", "bad", "v", 2, { nowNs: T0 }), presence.PresenceDataError);
      await assert.rejects(registry.ttlSource({ queue: "q", group: "bad" }), presence.PresenceDataError);
    } else {
      assert.deepStrictEqual(groupsOf(await registry.countActiveByGroup(one)), ["q/bad"]);
      assert.deepStrictEqual(groupsOf(await registry.snapshot({ ...one, stuckAfterMs: 1_000 })), ["q/bad"]);
    }
  });
}

for (const [key, kind] of [
  ["presence:ttl", "ttl"],
  ["presence:stuck", "stuck"],
]) {
  test(`the prefix's spoilt ${kind} fails every read that needs it, naming it, and no other`, async () => {
    await client.hset(key, "a", "b"); // a key of another type
    for (const [name, [read, needsStuck]] of Object.entries(FLEET)) {
      if (kind === "stuck" && !needsStuck) {
        assert.deepStrictEqual(groupsOf(await read(registry)), ["q/bad", "q/g"], name);
        continue;
      }
      await assert.rejects(read(registry), (error) => {
        assert.ok(error instanceof presence.PresenceDataError, `${name}: ${error.name}: ${error.message}`);
        assert.ok(error.message.includes(key), error.message);
        assert.match(error.message, /the prefix's shared/);
        return true;
      });
    }
    // Given the setting, or with one of its own, a group does not need the prefix's.
    const given = kind === "ttl" ? { ttlMs: 1_000 } : { stuckAfterMs: 1_000 };
    assert.deepStrictEqual(groupsOf(await registry.snapshot({ nowNs: T0, ...given })), ["q/bad", "q/g"]);
    if (kind === "ttl") {
      await client.set("presence:{q}:bad:ttl", "60000");
      const own = new presence.PresenceRegistry(server.client());
      try {
        assert.deepStrictEqual(groupsOf(await own.countActiveByGroup({ nowNs: T0, queue: "q", group: "bad" })), ["q/bad"]);
        await assert.rejects(own.heartbeat("q", "g", "b", 0, { nowNs: T0 }), /the prefix's shared/);
      } finally {
        own.redis.disconnect();
      }
    }
    assert.deepStrictEqual(said, []);
  });
}

test("a batch and a prune refuse a group whose TTL is a key of another type, and do the rest", async () => {
  await client.hset("presence:{q}:bad:ttl", "a", "b");
  await assert.rejects(
    registry.heartbeatMany(
      [
        ["q", "g", "a", 2],
        ["q", "bad", "v", 2],
      ],
      { nowNs: T0 },
    ),
    (error) => {
      assert.ok(error instanceof presence.PresenceBatchError, `${error.name}: ${error.message}`);
      assert.deepStrictEqual([...error.failed.keys()], ["q/bad"]);
      assert.ok(error.failed.get("q/bad") instanceof presence.PresenceDataError);
      assert.deepStrictEqual([error.completed, error.refused], [1, [["q", "bad", "v"]]]);
      return true;
    },
  );
  assert.equal(await client.hget("presence:{q}:g:c", "a"), `${T0} ${T0} 2 0 0 0 0 ${registry.instance} -`);
  assert.equal(await client.hget("presence:{q}:bad:c", "v"), `${T0} ${T0} 1 0 0 0 0 ${registry.instance} -`);
  await assert.rejects(registry.pruneExpired({ nowNs: T0 + 10n ** 15n }), (error) => {
    assert.ok(error instanceof presence.PresenceBatchError, `${error.name}: ${error.message}`);
    assert.deepStrictEqual([[...error.failed.keys()], error.completed], [["q/bad"], 1]);
    return true;
  });
  assert.equal(await client.exists("presence:{q}:g:c"), 0);
  assert.equal(await client.hget("presence:{q}:bad:c", "v"), `${T0} ${T0} 1 0 0 0 0 ${registry.instance} -`);
});

test("consumers whose stored values are spoilt are set aside one by one, with one report for their group", async () => {
  await client.hset("presence:{q}:bad:c", "w", "garbage", "x", "1 2 x");
  await client.zadd("presence:{q}:bad:hb", String(T0 / 1000n), "w", String(T0 / 1000n), "x");
  for (const options of [{ nowNs: T0 }, { nowNs: T0, queue: "q", group: "bad" }]) {
    said = [];
    const rows = await registry.snapshot(options);
    assert.deepStrictEqual(
      rows.map((r) => `${r.group}/${r.consumer}`),
      options.group ? ["bad/v"] : ["bad/v", "g/a"],
    );
    assert.deepStrictEqual(
      rows.skipped.map((s) => [s.key, s.group, s.consumer]),
      [
        ["presence:{q}:bad:c", "bad", "w"],
        ["presence:{q}:bad:c", "bad", "x"],
      ],
    );
    assert.deepStrictEqual(keysSaid(), ["presence:{q}:bad:c"]);
    assert.match(said[0].reason, /^2 consumers, read the group's others: /);
  }
});

test("a consumer on the horizon's microsecond whose stored value is spoilt is left out of the count, not its group", async () => {
  const ttlMs = 1_000;
  const edge = (T0 - BigInt(ttlMs + 1) * MS) / 1000n; // the active horizon's microsecond
  await client.hset("presence:{q}:bad:c", "w", "garbage");
  await client.zadd("presence:{q}:bad:hb", String(edge), "w");
  for (const options of [{}, { queue: "q", group: "bad" }]) {
    said = [];
    const counts = await registry.countActiveByGroup({ nowNs: T0, ttlMs, ...options });
    assert.deepStrictEqual(
      counts.map((c) => [c.group, c.active]),
      options.group ? [["bad", 1]] : [["bad", 1], ["g", 1]],
    );
    assert.deepStrictEqual(
      counts.skipped.map((s) => [s.key, s.consumer]),
      [["presence:{q}:bad:c", "w"]],
    );
    assert.deepStrictEqual(keysSaid(), ["presence:{q}:bad:c"]);
  }
  const groups = await registry.groups({ nowNs: T0, ttlMs });
  assert.deepStrictEqual(
    groups.map((g) => [g.group, g.active, g.stale, g.expired]),
    [
      ["bad", 1, 1, 0],
      ["g", 1, 0, 0],
    ],
  );
});

test("a declared group set aside is left out of groups(), never shown without consumers", async () => {
  await registry.expect("q", "bad", 1);
  await registry.expect("q", "g", 1);
  await client.hset("presence:{q}:bad:ttl", "a", "b");
  const groups = await registry.groups({ nowNs: T0 });
  assert.deepStrictEqual(
    groups.map((g) => [g.group, g.active, g.minActive, g.below]),
    [["g", 1, 1, false]],
  );
  assert.deepStrictEqual(keysSaid(), ["presence:{q}:bad:c"]);
  // A key of the group of another type, likewise (a new registry: the spoilt TTL is gone).
  await client.del("presence:{q}:bad:ttl", "presence:{q}:bad:hb");
  await client.set("presence:{q}:bad:hb", "x");
  said = [];
  const fresh = new presence.PresenceRegistry(server.client(), { onSkipped: (item) => said.push(item) });
  try {
    assert.deepStrictEqual(groupsOf(await fresh.groups({ nowNs: T0 })), ["q/g"]);
  } finally {
    fresh.redis.disconnect();
  }
  assert.deepStrictEqual(keysSaid(), ["presence:{q}:bad:c"]);
  assert.match(said[0].reason, /WRONGTYPE/);
});

test("declarations of another type are set aside, the others read", async () => {
  await registry.expect("q", "g", 2);
  await client.set("presence:{x}:expect", "1");
  await client.zadd("presence:expects", 0, "presence:{x}:expect");
  assert.deepStrictEqual(await registry.expected(), [["q", "g", 2]]);
  assert.deepStrictEqual(keysSaid(), ["presence:{x}:expect"]);
});

test("a setting that is not decimal digits is spoilt, as the Python package reads it", async () => {
  for (const value of [" 5000", "+5000", "5000 ", "5_000", "5000\n"]) {
    await client.set("presence:{q}:bad:ttl", value);
    const reader = new presence.PresenceRegistry(server.client(), { onSkipped: () => undefined });
    try {
      assert.deepStrictEqual(groupsOf(await reader.countActiveByGroup({ nowNs: T0 })), ["q/g"], JSON.stringify(value));
      await assert.rejects(reader.ttlSource({ queue: "q", group: "bad" }), presence.PresenceDataError);
    } finally {
      reader.redis.disconnect();
    }
  }
  await client.set("presence:{q}:bad:ttl", "05000"); // leading zeros: digits still
  assert.deepStrictEqual(await registry.ttlSource({ queue: "q", group: "bad" }), [5000, "group"]);
});

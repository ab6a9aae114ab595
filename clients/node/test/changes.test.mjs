// changes() and follow() against a redis-server of the test's own, and against the Python
// package's changes() on the same server: the same events from the same cursor, and cursors
// that go on in the other client, spelled byte for byte alike.
/* global AbortController */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { dirname, join } from "node:path";
import { after, before, beforeEach, test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { PresenceRegistry, PresenceResyncRequired } from "../dist/index.js";
import { decodeCursor, encodeCursor } from "../dist/events.js";
import { NO_PYTHON, PYTHON, startRedis } from "./harness.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const root = join(here, "..", "..", "..");
const MS = 1_000_000n;
const TTL = 1000;

let server;
let redis;
before(async () => {
  server = await startRedis();
  redis = server.client();
});
after(async () => {
  redis.disconnect();
  await server.stop();
});
beforeEach(async () => {
  await redis.flushall();
});

async function serverNs() {
  const [s, us] = await redis.time();
  return (BigInt(s) * 1_000_000n + BigInt(us)) * 1000n;
}

/** The Python package's changes() (or a cursor decoded and encoded again: op "recode"). */
async function python(args) {
  const { stdout } = await promisify(execFile)(PYTHON, [join(here, "changes_python.py"), JSON.stringify({ url: `redis://127.0.0.1:${server.port}/0`, prefix: "t", ...args })], {
    env: { ...process.env, PYTHONPATH: root },
  });
  return JSON.parse(stdout);
}

/** An event as the Python package's `to_dict` spells it (instants as strings). */
function neutral(event) {
  const ns = (v) => (v === null ? null : String(v));
  return {
    kind: event.kind,
    queue: event.queue,
    group: event.group,
    consumer: event.consumer,
    at_ns: ns(event.atNs),
    lease_count: event.leaseCount,
    registered_at_ns: ns(event.registeredAtNs),
    last_heartbeat_ns: ns(event.lastHeartbeatNs),
  };
}

/** Every page from `cursor` (at `nowNs`), and the cursor after the last. */
async function allPages(registry, options) {
  const pages = [];
  let cursor = options.cursor;
  for (let page = 0; page < 1000; page++) {
    const answer = await registry.changes({ ...options, cursor });
    pages.push(answer.events);
    cursor = answer.cursor;
    if (!answer.more) return { pages, cursor };
  }
  throw new Error("changes() never finished its window");
}

/** Every event kind, with instants under control: returns the cursor before it all and
 * the instant after it. */
async function everyKind(registry) {
  await registry.setTtl(TTL);
  const base = await serverNs();
  const { cursor } = await registry.changes({ nowNs: base });
  const other = new PresenceRegistry(redis, { prefix: "t", instance: "other" });
  await registry.heartbeat("q", "g", "a", 2, { nowNs: base }); // joined
  await registry.heartbeat("q", "g", "b", 0, { nowNs: base });
  await registry.deregister("q", "g", "b", { nowNs: base + 10n * MS }); // left
  await registry.heartbeat("q", "g", "d", 0, { nowNs: base, draining: true }); // joined, draining
  await registry.requestDrain("q", "g", "a", { nowNs: base + 20n * MS }); // drain_requested
  await registry.heartbeat("q", "h", "r", 0, { nowNs: base }); // joined
  await other.heartbeat("q", "h", "r", 0, { nowNs: base + 1n * MS }); // restarted
  await registry.heartbeat("q", "h", "r", 0, { nowNs: base + 2n * MS }); // conflict
  await registry.heartbeat("p", "g", "e", 0, { nowNs: base });
  await registry.heartbeat("p", "g", "e", 1, { nowNs: base + 1500n * MS }); // recovered (it was stale)
  await registry.heartbeat("p", "g", "f", 0, { nowNs: base });
  await registry.pruneExpired({ nowNs: base + 3000n * MS, queue: "p" }); // pruned: f (e beat at 1500)
  // stale and expired: a, d, r (q's consumers), e (stale at 2501 ms)
  return { cursor, base, until: base + 3000n * MS };
}

test("changes() gives every kind of event, the derived ones at the rule's instants", { skip: NO_PYTHON }, async () => {
  const registry = new PresenceRegistry(redis, { prefix: "t" });
  const { cursor, base, until } = await everyKind(registry);
  const { events, more } = await registry.changes({ cursor, nowNs: until });
  assert.equal(more, false);
  const kinds = new Set(events.map((e) => e.kind));
  for (const kind of ["joined", "recovered", "left", "pruned", "stale", "expired", "draining", "conflict", "restarted", "drain_requested"]) {
    assert.ok(kinds.has(kind), `no ${kind} event in ${[...kinds]}`);
  }
  const of = (kind, consumer) => events.filter((e) => e.kind === kind && e.consumer === consumer);
  assert.deepEqual(of("stale", "a").map((e) => e.atNs), [base + BigInt(TTL + 1) * MS]);
  assert.deepEqual(of("expired", "a").map((e) => e.atNs), [base + BigInt(2 * TTL + 1) * MS]);
  assert.deepEqual(of("stale", "e").map((e) => e.atNs), [base + BigInt(1500 + TTL + 1) * MS]);
  assert.deepEqual(of("recovered", "e").map((e) => e.atNs), [base + 1500n * MS]);
  assert.deepEqual(of("pruned", "f").map((e) => e.atNs), [until]);
  assert.deepEqual(of("left", "b").map((e) => [e.atNs, e.leaseCount]), [[base + 10n * MS, 0]]);
  assert.equal(of("expired", "f").length, 0); // pruned: no longer in its sorted set
  // In order: by instant, then the derived before the logged, then as logged.
  const at = events.map((e) => e.atNs);
  assert.deepEqual(at, [...at].sort((x, y) => (x < y ? -1 : x > y ? 1 : 0)));
  const first = events.filter((e) => e.atNs === base).map((e) => `${e.kind} ${e.consumer}`);
  assert.deepEqual(first.slice(0, 3), ["joined a", "joined b", "joined d"]);
  // The same answer as the Python package's, from the same cursor.
  const theirs = await python({ cursor, now_ns: String(until) });
  assert.deepEqual(events.map(neutral), theirs.events);
});

test("changes() without a cursor starts now; a cursor goes on from where it stopped", async () => {
  const registry = new PresenceRegistry(redis, { prefix: "t" });
  const start = await registry.changes();
  assert.deepEqual(start.events, []);
  await registry.heartbeat("q", "g", "a");
  const next = await registry.changes({ cursor: start.cursor });
  assert.deepEqual(next.events.map((e) => [e.kind, e.consumer]), [["joined", "a"]]);
  const again = await registry.changes({ cursor: next.cursor });
  assert.deepEqual(again.events, []);
});

test("paging with a small limit never splits a log entry and loses nothing", { skip: NO_PYTHON }, async () => {
  const registry = new PresenceRegistry(redis, { prefix: "t" });
  await registry.setTtl(TTL);
  const base = await serverNs();
  const { cursor } = await registry.changes({ nowNs: base });
  const beats = [];
  for (const group of ["g1", "g2", "g3"]) for (let i = 0; i < 12; i++) beats.push(["q", group, `c${String(i).padStart(2, "0")}`, i]);
  await registry.heartbeatMany(beats, { nowNs: base }); // one joined entry of 12 per group
  await registry.heartbeat("q2", "g", "x", 0, { nowNs: base + 5n * MS });
  const until = base + 2500n * MS; // and 37 stale, 37 expired, derived
  const whole = await registry.changes({ cursor, nowNs: until });
  assert.equal(whole.events.length, 37 * 3);
  const { pages } = await allPages(registry, { cursor, nowNs: until, limit: 5 });
  // Each logged page holds whole entries: 12 joined events of one group (or the one of q2).
  const logged = pages.map((page) => page.filter((e) => e.kind === "joined")).filter((page) => page.length);
  for (const page of logged) {
    const groups = new Map();
    for (const e of page) groups.set(`${e.queue}/${e.group}`, (groups.get(`${e.queue}/${e.group}`) ?? 0) + 1);
    for (const [name, n] of groups) assert.equal(n, name === "q2/g" ? 1 : 12, `page split the entry of ${name}`);
  }
  // The derived pages stop at the limit (5) but lose nothing.
  assert.ok(pages.length > 10, `only ${pages.length} pages`);
  const key = (e) => `${e.kind} ${e.queue} ${e.group} ${e.consumer} ${e.atNs}`;
  assert.deepEqual(pages.flat().map(key).sort(), whole.events.map(key).sort());
  // Python goes on from a cursor in the middle of a window as Node does, and back.
  const first = await registry.changes({ cursor, nowNs: until, limit: 40 });
  assert.equal(first.more, true);
  assert.ok(decodeCursor(first.cursor).window !== null);
  const rest = await allPages(registry, { cursor: first.cursor, nowNs: until, limit: 1000 });
  const theirs = await python({ cursor: first.cursor, now_ns: String(until), limit: 1000 });
  assert.deepEqual(rest.pages.flat().map(neutral), theirs.events);
  const theirFirst = await python({ cursor, now_ns: String(until), limit: 40 });
  assert.equal(theirFirst.more, true);
  const ours = await allPages(registry, { cursor: theirFirst.cursor, nowNs: until, limit: 1000 });
  assert.deepEqual(ours.pages.flat().map(neutral), theirs.events);
  // In the middle of a log too; and both clients write the same cursor for the same page
  // (but for the server milliseconds each read the clock at).
  const sameClock = (c) => {
    const d = decodeCursor(c);
    return encodeCursor({ ...d, serverMs: 0n, window: d.window && { ...d.window, serverMs: 0n } });
  };
  for (const limit of [5, 13, 40]) {
    const mine = await registry.changes({ cursor, nowNs: until, limit });
    const their = await python({ cursor, now_ns: String(until), limit });
    assert.deepEqual(mine.events.map(neutral), their.events, `limit ${limit}`);
    assert.equal(sameClock(mine.cursor), sameClock(their.cursor), `limit ${limit}`);
    const restOfMine = await allPages(registry, { cursor: their.cursor, nowNs: until, limit: 1000 });
    // (pages are each in order; together they hold the window's events)
    const together = [...their.events, ...restOfMine.pages.flat().map(neutral)].map((e) => JSON.stringify(e)).sort();
    assert.deepEqual(together, whole.events.map((e) => JSON.stringify(neutral(e))).sort(), `limit ${limit}`);
  }
});

test("queue and group filters give only their events; a cursor goes on only with its filter", { skip: NO_PYTHON }, async () => {
  const registry = new PresenceRegistry(redis, { prefix: "t" });
  await registry.setTtl(TTL);
  const base = await serverNs();
  const cursors = {};
  for (const [name, filter] of Object.entries({ all: {}, queue: { queue: "q" }, group: { group: "g" }, both: { queue: "q", group: "g" } })) {
    cursors[name] = { filter, cursor: (await registry.changes({ nowNs: base, ...filter })).cursor };
  }
  for (const [q, g] of [["q", "g"], ["q", "h"], ["p", "g"], ["p", "h"]]) await registry.heartbeat(q, g, `${q}${g}`, 0, { nowNs: base });
  const until = base + 1500n * MS;
  const expect = { all: 8, queue: 4, group: 4, both: 2 };
  for (const [name, { filter, cursor }] of Object.entries(cursors)) {
    const { events } = await registry.changes({ cursor, nowNs: until, ...filter });
    assert.equal(events.length, expect[name], name);
    for (const e of events) {
      if (filter.queue) assert.equal(e.queue, filter.queue);
      if (filter.group) assert.equal(e.group, filter.group);
    }
    const theirs = await python({ cursor, now_ns: String(until), queue: filter.queue ?? null, group: filter.group ?? null });
    assert.deepEqual(events.map(neutral), theirs.events, name);
  }
  await assert.rejects(registry.changes({ cursor: cursors.queue.cursor, queue: "p" }), (e) => e instanceof RangeError && /cursor was returned for queue="q"/.test(e.message));
  await assert.rejects(registry.changes({ cursor: cursors.all.cursor, group: "g" }), RangeError);
});

test("cursors cross between the clients both ways, spelled byte for byte alike", { skip: NO_PYTHON }, async () => {
  const registry = new PresenceRegistry(redis, { prefix: "t" });
  const names = ["caf\u00e9 \u00fc \ud83d\ude00", 'q"\\\n\t/', "12"];
  // A cursor made by Python, continued by Node, gives what Python gives from it.
  const theirStart = await python({});
  const ourStart = await registry.changes();
  for (const q of names) await registry.heartbeat(q, "g", "c");
  await registry.heartbeat("q", names[0], names[0]);
  const now = await serverNs();
  const fromTheirs = await registry.changes({ cursor: theirStart.cursor, nowNs: now });
  const theirsFromTheirs = await python({ cursor: theirStart.cursor, now_ns: String(now) });
  assert.equal(fromTheirs.events.length, 4);
  assert.deepEqual(fromTheirs.events.map(neutral), theirsFromTheirs.events);
  // And the reverse: Node's cursor, continued by Python.
  const theirsFromOurs = await python({ cursor: ourStart.cursor, now_ns: String(now) });
  const fromOurs = await registry.changes({ cursor: ourStart.cursor, nowNs: now });
  assert.deepEqual(theirsFromOurs.events, fromOurs.events.map(neutral));
  // Both spell a cursor alike: each decodes the other's and encodes it to the same bytes
  // (non-ASCII names as \uxxxx, places in log order, integer-like queue names kept in place).
  for (const cursor of [fromTheirs.cursor, fromOurs.cursor, theirsFromOurs.cursor, theirsFromTheirs.cursor]) {
    assert.equal(encodeCursor(decodeCursor(cursor)), cursor);
    assert.equal((await python({ op: "recode", cursor })).cursor, cursor);
  }
  for (const queue of names) {
    const filtered = await registry.changes({ queue });
    assert.equal((await python({ op: "recode", cursor: filtered.cursor })).cursor, filtered.cursor);
    assert.ok(/^[A-Za-z0-9_-]+$/.test(filtered.cursor));
  }
});

test("a cursor that is not one changes() returned is a RangeError naming cursor", async () => {
  const registry = new PresenceRegistry(redis, { prefix: "t" });
  const { cursor } = await registry.changes();
  const document = JSON.parse(Buffer.from(cursor, "base64url").toString());
  const spell = (value) => Buffer.from(JSON.stringify(value)).toString("base64url");
  for (const bad of ["", "not a cursor", spell([1]), spell({ ...document, v: 3 }), spell({ ...document, t: 1.5 }), spell({ ...document, q: { q: "x-1" } }), Buffer.from("[".repeat(40)).toString("base64url"), "A".repeat(1_000_001)]) {
    await assert.rejects(registry.changes({ cursor: bad }), (e) => e instanceof RangeError && /cursor/.test(e.message), bad.slice(0, 40));
  }
  await assert.rejects(registry.changes({ cursor: 5 }), TypeError);
  await assert.rejects(registry.changes({ cursor: spell({ ...document, f: ["other", null, null] }) }), /prefix/);
  await assert.rejects(registry.changes({ cursor: spell({ ...document, s: document.s + 60_000 }) }), /ahead of the server clock/);
  await assert.rejects(registry.changes({ limit: 0 }), RangeError);
  await assert.rejects(registry.changes({ ttlMs: 5 }), (e) => e instanceof TypeError && /ttlMs/.test(e.message));
  // Another JSON spelling of the same object is taken (keys in another order, escapes).
  const respelled = Buffer.from(JSON.stringify({ f: document.f, e: document.e, q: document.q, s: document.s, v: 2, t: document.t })).toString("base64url");
  assert.deepEqual((await registry.changes({ cursor: respelled })).events, []);
});

test("a log trimmed past the cursor asks for a resync", async () => {
  const registry = new PresenceRegistry(redis, { prefix: "t" });
  await registry.heartbeat("q", "g", "first");
  const { cursor } = await registry.changes(); // holds a place in q's log
  assert.ok(decodeCursor(cursor).positions.has("q"));
  for (let i = 0; i < 5; i++) await registry.heartbeat("q", "g", `c${i}`);
  await redis.xtrim(registry.keys.group("q", "g").events, "MAXLEN", 2);
  await assert.rejects(registry.changes({ cursor }), (e) => e instanceof PresenceResyncRequired && e.reason === "trimmed");
  await assert.rejects(python({ cursor }), /PresenceResyncRequired/);
  // A log it holds no place in, trimmed past where it reads from.
  const fresh = await registry.changes();
  for (let i = 0; i < 5; i++) await registry.heartbeat("p", "g", `c${i}`);
  assert.ok(!decodeCursor(fresh.cursor).positions.has("p"));
  await redis.xtrim(registry.keys.group("p", "g").events, "MAXLEN", 1);
  await assert.rejects(registry.changes({ cursor: fresh.cursor, queue: undefined }), (e) => e instanceof PresenceResyncRequired && e.reason === "trimmed");
  // A log that lost the entry it read (deleted): lost.
  const placed = await registry.changes();
  await redis.del(registry.keys.group("q", "g").events);
  await assert.rejects(registry.changes({ cursor: placed.cursor }), (e) => e instanceof PresenceResyncRequired && e.reason === "lost");
});

test("another epoch (Redis lost its data) asks for a resync", async () => {
  const registry = new PresenceRegistry(redis, { prefix: "t" });
  await registry.heartbeat("q", "g", "a");
  const { cursor } = await registry.changes();
  assert.notEqual(decodeCursor(cursor).epoch, null);
  await redis.set(registry.keys.epoch, "another");
  await assert.rejects(registry.changes({ cursor }), (e) => e instanceof PresenceResyncRequired && e.reason === "epoch" && /changed/.test(e.message));
  await redis.flushall();
  await assert.rejects(registry.changes({ cursor }), (e) => e instanceof PresenceResyncRequired && e.reason === "epoch" && /is gone/.test(e.message));
});

/** The next message of `messages` that `wanted` takes, within `ms`. */
async function nextWhere(messages, wanted, ms = 10_000) {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    const { value, done } = await messages.next();
    if (done) throw new Error("follow() ended");
    if (wanted(value)) return value;
  }
  throw new Error(`no such message within ${ms} ms`);
}

test("follow() yields a snapshot, then new events and cursors, resyncs, and ends on abort", async () => {
  const registry = new PresenceRegistry(redis, { prefix: "t" });
  await registry.heartbeat("q", "g", "before");
  const stop = new AbortController();
  const messages = registry.follow({ intervalMs: 20, signal: stop.signal });
  const snapshot = await nextWhere(messages, () => true);
  assert.equal(snapshot.kind, "snapshot");
  assert.deepEqual(snapshot.rows.map((r) => r.consumer), ["before"]);
  await registry.heartbeat("q", "g", "after");
  const joined = await nextWhere(messages, (m) => m.kind === "joined");
  assert.equal(joined.consumer, "after");
  const mark = await nextWhere(messages, (m) => m.kind === "cursor");
  assert.deepEqual((await registry.changes({ cursor: mark.cursor })).events, []);
  // Redis lost its data: a new snapshot, and events again from there.
  await redis.set(registry.keys.epoch, "another");
  const again = await nextWhere(messages, (m) => m.kind === "snapshot");
  assert.deepEqual(again.rows.map((r) => r.consumer).sort(), ["after", "before"]);
  await registry.deregister("q", "g", "before");
  assert.equal((await nextWhere(messages, (m) => m.kind === "left")).consumer, "before");
  stop.abort();
  const deadline = Date.now() + 5_000;
  for (;;) {
    const { done } = await messages.next();
    if (done) break;
    assert.ok(Date.now() < deadline, "follow() did not end after abort");
  }
});

test("follow() from a cursor goes on at once, without a snapshot", async () => {
  const registry = new PresenceRegistry(redis, { prefix: "t" });
  const { cursor } = await registry.changes({ queue: "q" });
  await registry.heartbeat("q", "g", "a");
  await registry.heartbeat("p", "g", "b");
  const stop = new AbortController();
  const messages = registry.follow({ cursor, queue: "q", intervalMs: 20, signal: stop.signal });
  const first = await nextWhere(messages, () => true);
  assert.deepEqual([first.kind, first.consumer], ["joined", "a"]);
  assert.equal((await nextWhere(messages, () => true)).kind, "cursor");
  stop.abort();
  await messages.return();
  await assert.rejects(registry.follow({ intervalMs: 0 }).next(), RangeError);
});

test("follow() resyncs when a group it holds consumers of vanished without events", async () => {
  const registry = new PresenceRegistry(redis, { prefix: "t" });
  await registry.heartbeat("q", "g", "a");
  const stop = new AbortController();
  const messages = registry.follow({ intervalMs: 20, signal: stop.signal });
  assert.equal((await nextWhere(messages, () => true)).kind, "snapshot");
  await nextWhere(messages, (m) => m.kind === "cursor");
  const gk = registry.keys.group("q", "g");
  await redis.del(gk.hb, gk.data); // by hand: no event says the group emptied
  const again = await nextWhere(messages, (m) => m.kind === "snapshot");
  assert.equal(again.rows.length, 0);
  stop.abort();
  await messages.return();
});

test("log entries no client writes are set aside and reported once a log; unknown kinds skipped", { skip: NO_PYTHON }, async () => {
  const reported = [];
  const registry = new PresenceRegistry(redis, { prefix: "t", onSkipped: (item) => reported.push(item) });
  await registry.heartbeat("q", "g", "a");
  const { cursor } = await registry.changes();
  const gk = registry.keys.group("q", "g");
  const now = await serverNs();
  const value = `${now} ${now} ${now} 0`;
  await redis.xadd(gk.events, "*", "k", "joined", "g", "t:{other}:g:c", "cx", value); // not this queue's group
  await redis.xadd(gk.events, "*", "k", "joined", "g", gk.data, "cy", "1 2 3", "cz", value, "c", value); // one field spoilt, one unnamed
  await redis.xadd(gk.events, "*", "k", "teleported", "g", gk.data, "cw", value); // a later version's kind
  await redis.xadd(gk.events, "*", "k", "left", "g", gk.data, "x-later", "?", "cz", value); // a later version's field
  const { events } = await registry.changes({ cursor });
  assert.deepEqual(events.map((e) => `${e.kind} ${e.consumer}`), ["joined z", "left z"]);
  assert.equal(reported.length, 1);
  assert.equal(reported[0].key, gk.events);
  assert.match(reported[0].reason, /^2 entries this package did not write \(wholly or in part\): entry \d+-\d+ names no group of this queue/);
  const theirs = await python({ cursor, now_ns: String(decodeCursor((await registry.changes({ cursor })).cursor).nowNs) });
  assert.deepEqual(theirs.events.map((e) => `${e.kind} ${e.consumer}`), ["joined z", "left z"]);
});

test("a cursor is read as strictly as it is written: a place is ms-seq, v an integer, the text base64url", async () => {
  // docs/protocol.md section 6; the Python package refuses the same (tests/test_event_truth.py).
  const registry = new PresenceRegistry(redis, { prefix: "t" });
  await registry.heartbeat("orders", "billing", "w1");
  const { cursor } = await registry.changes();
  const document = JSON.parse(Buffer.from(cursor, "base64url").toString());
  const spell = (text) => Buffer.from(text).toString("base64url");
  const withField = (name, json) => spell(JSON.stringify({ ...document, [name]: "@" }).replace('"@"', json));
  const place = `${document.s}-0`;
  assert.deepEqual([...decodeCursor(withField("q", JSON.stringify({ orders: place }))).positions], [["orders", place]]);
  const refused = [
    withField("q", JSON.stringify({ orders: String(document.s) })),
    withField("q", JSON.stringify({ orders: `${document.s}-` })),
    withField("q", JSON.stringify({ orders: `+${document.s}-0` })),
    withField("v", "2.0"),
    withField("v", "true"),
    `${cursor.slice(0, 8)}*${cursor.slice(8)}`,
    `${cursor}!`,
  ];
  for (const bad of refused) {
    assert.throws(() => decodeCursor(bad), (e) => e instanceof RangeError && /not one that changes\(\) returned/.test(e.message), bad.slice(0, 60));
  }
});

// The BullMQ recipe with a real BullMQ worker against the test's redis-server: presence on
// start, the active job count as lease_count on each lock renewal and its concurrency as
// capacity, idle after drained, draining while it closes, gone once closed; a drain request
// closes it after the jobs it holds.
import assert from "node:assert/strict";
import { EventEmitter } from "node:events";
import { after, before, test } from "node:test";
import { Queue, Worker } from "bullmq";
import { PresenceRegistry, trackBullMQWorker } from "../dist/index.js";
import { startRedis } from "./harness.mjs";

let server;
before(async () => {
  server = await startRedis();
});
after(async () => {
  await server.stop();
});

async function until(what, check, ms = 10_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

test("a BullMQ worker beats on lock renewal with its active jobs, idles, and leaves", async () => {
  const connection = { host: "127.0.0.1", port: server.port, maxRetriesPerRequest: null };
  const presence = new PresenceRegistry(server.client());
  const queue = new Queue("mail", { connection });
  const releases = [];
  const worker = new Worker(
    "mail",
    () => new Promise((resolve) => releases.push(resolve)),
    { connection, concurrency: 2, lockDuration: 600, autorun: false },
  );
  let renewals = 0;
  worker.on("locksRenewed", () => (renewals += 1));
  const stop = trackBullMQWorker(worker, presence, { queue: "mail", group: "senders", consumer: "w1", idleBeatMs: 100 });
  const rows = async () => (await presence.snapshot({ queue: "mail" })).map((r) => [r.consumer, r.state, r.leaseCount]);
  try {
    await until("the first beat", async () => (await rows()).length === 1);
    assert.deepStrictEqual(await rows(), [["w1", "active", 0]]);
    const [shown] = await presence.snapshot({ queue: "mail" });
    assert.deepStrictEqual([shown.capacity, shown.draining], [2, false]);
    void worker.run();
    await queue.add("a", {});
    await queue.add("b", {});
    await until("two active jobs", async () => releases.length === 2);
    const renewed = renewals;
    await until("a lock renewal", async () => renewals > renewed);
    const [first] = await presence.snapshot({ queue: "mail" });
    assert.equal(first.leaseCount, 2);
    await until("a beat after the renewal", async () => (await presence.snapshot({ queue: "mail" }))[0].lastHeartbeatNs > first.lastHeartbeatNs);
    assert.equal((await presence.snapshot({ queue: "mail" }))[0].leaseCount, 2);
    for (const release of releases) release("done");
    await until("idle after drained", async () => JSON.stringify(await rows()) === JSON.stringify([["w1", "active", 0]]));
    await worker.close();
    await until("the deregister on closing", async () => (await rows()).length === 0);
  } finally {
    await stop();
    await worker.close();
    await queue.close();
    presence.redis.disconnect();
  }
});

test("a drain request closes the worker: it beats draining while it finishes its job, then leaves", async () => {
  const connection = { host: "127.0.0.1", port: server.port, maxRetriesPerRequest: null };
  const presence = new PresenceRegistry(server.client());
  const queue = new Queue("drain", { connection });
  const releases = [];
  const worker = new Worker("drain", () => new Promise((resolve) => releases.push(resolve)), { connection, concurrency: 3, lockDuration: 600 });
  const stop = trackBullMQWorker(worker, presence, { queue: "drain", group: "senders", consumer: "w2", idleBeatMs: 50 });
  const row = async () => (await presence.snapshot({ queue: "drain" }))[0];
  try {
    await queue.add("a", {});
    await until("an active job", async () => releases.length === 1);
    await until("a beat with the job", async () => (await row())?.leaseCount === 1);
    assert.equal((await row()).capacity, 3);
    assert.equal(await presence.requestDrain("drain", "senders", "w2"), true);
    await until("the draining beat", async () => (await row())?.draining === true);
    const draining = await row();
    assert.deepStrictEqual([draining.drainRequested, draining.leaseCount], [false, 1]);
    await queue.add("b", {});
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(releases.length, 1, "a draining worker took another job");
    releases[0]("done");
    await until("the deregister once closed", async () => (await row()) === undefined);
    assert.equal(worker.isRunning(), false);
  } finally {
    await stop();
    await worker.close();
    await queue.close();
    presence.redis.disconnect();
  }
});

test("the stop function resolves only once the deregister has, however often it is called", async () => {
  const worker = new EventEmitter();
  let release;
  const calls = [];
  const beats = [];
  const presence = {
    heartbeat: async (...args) => {
      beats.push(args);
      return { drainRequested: false };
    },
    deregister: (...args) => {
      calls.push(args);
      return new Promise((resolve) => (release = resolve));
    },
  };
  const stop = trackBullMQWorker(worker, presence, { queue: "mail", group: "senders", consumer: "w1" });
  worker.emit("closing");
  assert.deepStrictEqual(beats.at(-1), ["mail", "senders", "w1", 0, { capacity: null, draining: true }]);
  assert.deepStrictEqual(calls, [], "deregistered while closing, before the worker closed");
  worker.emit("closed");
  let stopped = false;
  const second = stop().then(() => (stopped = true));
  await new Promise((resolve) => setTimeout(resolve, 0));
  assert.equal(stopped, false, "stop() resolved before the deregister did");
  release(true);
  await second;
  assert.deepStrictEqual(calls, [["mail", "senders", "w1"]]);
});

test("onDrainRequested replaces the close, once, whatever the beats say after", async () => {
  const worker = new EventEmitter();
  worker.concurrency = 4;
  worker.close = async () => assert.fail("closed despite onDrainRequested");
  const beats = [];
  const presence = {
    heartbeat: async (...args) => {
      beats.push(args);
      return { drainRequested: true };
    },
    deregister: async () => true,
  };
  let asked = 0;
  const stop = trackBullMQWorker(worker, presence, { queue: "mail", group: "senders", consumer: "w1", onDrainRequested: () => (asked += 1) });
  worker.emit("drained");
  worker.emit("drained");
  await new Promise((resolve) => setTimeout(resolve, 10));
  assert.equal(asked, 1);
  assert.deepStrictEqual(beats[0], ["mail", "senders", "w1", 0, { capacity: 4, draining: false }]);
  await stop();
});

test("the deregister waits for the beats in flight, so that none lands after it", async () => {
  const worker = new EventEmitter();
  const order = [];
  let land;
  const presence = {
    heartbeat: () => new Promise((resolve) => (land = () => (order.push("beat"), resolve({ drainRequested: false })))),
    deregister: async () => (order.push("deregister"), true),
  };
  const stop = trackBullMQWorker(worker, presence, { queue: "mail", group: "senders", consumer: "w1" });
  worker.emit("closed");
  await new Promise((resolve) => setTimeout(resolve, 10));
  assert.deepStrictEqual(order, []);
  land();
  await stop();
  assert.deepStrictEqual(order, ["beat", "deregister"]);
});

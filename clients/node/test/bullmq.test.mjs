// The BullMQ recipe with a real BullMQ worker against the test's redis-server: presence on
// start, the active job count as lease_count on each lock renewal, idle after drained, gone
// after close.
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

test("the stop function resolves only once the deregister has, however often it is called", async () => {
  const worker = new EventEmitter();
  let release;
  const calls = [];
  const presence = {
    heartbeat: async () => undefined,
    deregister: (...args) => {
      calls.push(args);
      return new Promise((resolve) => (release = resolve));
    },
  };
  const stop = trackBullMQWorker(worker, presence, { queue: "mail", group: "senders", consumer: "w1" });
  worker.emit("closing");
  let stopped = false;
  const second = stop().then(() => (stopped = true));
  await new Promise((resolve) => setTimeout(resolve, 0));
  assert.equal(stopped, false, "stop() resolved before the deregister did");
  release(true);
  await second;
  assert.deepStrictEqual(calls, [["mail", "senders", "w1"]]);
});

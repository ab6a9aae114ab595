// A redis-server of the test's own on a free loopback port (never the machine's 6379):
// started for a test file, flushed between cases, stopped at the end.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Redis from "ioredis";

function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

export async function startRedis() {
  const binary = process.env.REDIS_SERVER_BINARY || "redis-server";
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), "presence-node-"));
  const child = spawn(binary, ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir], {
    stdio: "ignore",
  });
  const failed = new Promise((_, reject) => child.once("error", reject));
  const deadline = Date.now() + 10_000;
  for (;;) {
    const client = new Redis({ port, host: "127.0.0.1", lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    client.on("error", () => undefined); // refused until the server listens: the loop retries
    try {
      await Promise.race([client.connect().then(() => client.ping()), failed]);
      client.disconnect();
      break;
    } catch (error) {
      client.disconnect();
      if (Date.now() > deadline) throw new Error(`redis-server did not answer on port ${port}: ${error}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
  return {
    port,
    client: (options = {}) => new Redis({ port, host: "127.0.0.1", ...options }),
    stop: async () => {
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGTERM");
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

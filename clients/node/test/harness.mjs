// A redis-server of the test's own on a free loopback port (never the machine's 6379):
// started for a test file, flushed between cases, stopped at the end; and a Redis Cluster
// of three such masters (`startCluster`, as the Python suite's tests/clusters.py).
import { execFile, spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import Redis, { Cluster } from "ioredis";

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

/** The root of this checkout (the Python package's, for the cross-client tests). */
export const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

/** The Python that runs this checkout's package in the cross-client tests:
 * REDIS_PRESENCE_PYTHON, else the active virtualenv's (VIRTUAL_ENV, as `.ci/run` has),
 * else this checkout's `.venv`; undefined when there is none (those tests are skipped, and
 * fail with REDIS_PRESENCE_REQUIRE_SERVERS=1, as CI sets). */
export const PYTHON = [
  process.env.REDIS_PRESENCE_PYTHON,
  process.env.VIRTUAL_ENV && join(process.env.VIRTUAL_ENV, "bin", "python"),
  join(ROOT, ".venv", "bin", "python"),
].find((path) => path && existsSync(path));

/** The reason the cross-client tests are skipped (no Python found, and no CI asking for
 * them), else false. */
export const NO_PYTHON =
  PYTHON === undefined && process.env.REDIS_PRESENCE_REQUIRE_SERVERS !== "1" ? "no Python with redis_presence (set REDIS_PRESENCE_PYTHON)" : false;

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

/** A free port `p` whose cluster bus port `p + 10000` is free too. */
async function freeClusterPort() {
  for (;;) {
    const port = await freePort();
    if (port + 10_000 > 65_535) continue;
    const bus = await new Promise((resolve) => {
      const server = createServer();
      server.once("error", () => resolve(false));
      server.listen(port + 10_000, "127.0.0.1", () => server.close(() => resolve(true)));
    });
    if (bus) return port;
  }
}

/** Poll `check` (true: done) until `deadline` (ms since the epoch), every 20 to 200 ms. */
async function pollUntil(what, deadline, check) {
  for (let wait = 20; ; wait = Math.min(200, wait * 2)) {
    let last;
    try {
      if (await check()) return;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? `: ${last}` : ""}`);
    await new Promise((resolve) => setTimeout(resolve, wait));
  }
}

/** Three `redis-server --cluster-enabled yes` masters on free loopback ports, joined by
 * `redis-cli --cluster create` and polled (with a deadline) until every node says
 * `cluster_state:ok` with all 16384 slots assigned and all nodes known. */
export async function startCluster({ masters = 3, timeoutMs = 30_000 } = {}) {
  const binary = process.env.REDIS_SERVER_BINARY || "redis-server";
  const cli = process.env.REDIS_CLI_BINARY || "redis-cli";
  const dir = mkdtempSync(join(tmpdir(), "presence-node-cluster-"));
  const nodes = [];
  const stop = async () => {
    await Promise.all(
      nodes.map(({ child }) => {
        if (child.exitCode !== null || child.signalCode !== null) return null;
        const exited = new Promise((resolve) => child.once("exit", resolve));
        child.kill("SIGTERM");
        return exited;
      }),
    );
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + timeoutMs;
  try {
    for (let i = 0; i < masters; i++) {
      const port = await freeClusterPort();
      const home = join(dir, `node${i}`);
      mkdirSync(home);
      const options = ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", home];
      options.push("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000");
      const child = spawn(binary, options, { stdio: "ignore" });
      child.once("error", () => undefined); // a missing binary: the poll below times out naming it
      nodes.push({ port, child });
    }
    for (const { port, child } of nodes) {
      await pollUntil(`redis-server (${binary}) on port ${port}`, deadline, async () => {
        if (child.exitCode !== null) throw new Error(`redis-server exited ${child.exitCode}`);
        const client = new Redis({ port, host: "127.0.0.1", lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
        client.on("error", () => undefined);
        try {
          await client.connect();
          return (await client.ping()) === "PONG";
        } finally {
          client.disconnect();
        }
      });
    }
    const addresses = nodes.map(({ port }) => `127.0.0.1:${port}`);
    await new Promise((resolve, reject) =>
      execFile(cli, ["--cluster", "create", ...addresses, "--cluster-replicas", "0", "--cluster-yes"], { timeout: timeoutMs }, (error, stdout, stderr) =>
        error ? reject(new Error(`redis-cli --cluster create failed: ${error.message}\n${stdout}${stderr}`)) : resolve(),
      ),
    );
    for (const { port } of nodes) {
      const client = new Redis({ port, host: "127.0.0.1", maxRetriesPerRequest: 0 });
      client.on("error", () => undefined);
      try {
        await pollUntil(`cluster_state:ok on port ${port}`, deadline, async () => {
          const info = Object.fromEntries(
            String(await client.cluster("INFO"))
              .split("\r\n")
              .map((line) => line.split(":")),
          );
          return info.cluster_state === "ok" && Number(info.cluster_slots_assigned) === 16384 && Number(info.cluster_known_nodes) === masters;
        });
      } finally {
        client.disconnect();
      }
    }
  } catch (error) {
    await stop();
    throw error;
  }
  const ports = nodes.map(({ port }) => port);
  return {
    ports,
    nodes: ports.map((port) => ({ host: "127.0.0.1", port })),
    /** A new ioredis `Cluster` of these nodes; the caller disconnects it. */
    client: (options = {}) => new Cluster(ports.map((port) => ({ host: "127.0.0.1", port })), options),
    /** FLUSHALL on every master (our own servers). */
    flushall: async () => {
      await Promise.all(
        ports.map(async (port) => {
          const client = new Redis({ port, host: "127.0.0.1" });
          try {
            await client.flushall();
          } finally {
            client.disconnect();
          }
        }),
      );
    },
    stop,
  };
}

// The documentation stays true: every ```js block of this client's README.md and of the docs
// site (docs/**/*.md) runs as a CommonJS program in a child `node`, against the test's own
// redis-server (REDIS_URL names it; the server is flushed before each block), with
// `require("redis-presence")` loading this checkout's built package. A block passes when it
// exits 0 within BLOCK_TIMEOUT_MS; a line `console.log(EXPR); // VALUE` is checked: the
// program's stdout lines must be those VALUEs, in order. A block just after
// `<!-- run: until-sigterm -->` is a long-running worker: it must make a consumer present,
// then on SIGTERM deregister it and exit 0. A block just after `<!-- run: cluster -->` runs
// against a Redis Cluster of three masters of the test's own (started once, when a block
// asks for it: about two seconds), which REDIS_CLUSTER_NODES names ("host:port,...").
// A block that cannot run here says why in a
// `<!-- no-run: reason -->` line just before it. TypeScript blocks are refused (Node 20 runs
// no TypeScript): the docs show JavaScript.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, dirname, join, relative } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { PresenceRegistry } from "../dist/index.js";
import { startCluster, startRedis } from "./harness.mjs";

const here = join(dirname(fileURLToPath(import.meta.url)), "..");
const root = join(here, "..", "..");
const BLOCK_TIMEOUT_MS = 30_000;
const BLOCK = /^(?:<!-- (?<marker>no-run|run): (?<why>[^\n]*?) -->\n)?```(?<lang>[A-Za-z]+)[^\n]*\n(?<code>.*?)^```$/gms;
const JS = new Set(["js", "javascript", "cjs", "mjs"]);
const TS = new Set(["ts", "typescript", "tsx"]);
const SHOWN = /^\s*console\.log\(.*\);?\s*\/\/ (?<value>.+)$/;

function markdownFiles(folder) {
  return readdirSync(folder, { withFileTypes: true }).flatMap((entry) => {
    const path = join(folder, entry.name);
    if (entry.isDirectory()) return markdownFiles(path);
    return entry.name.endsWith(".md") ? [path] : [];
  });
}

/** Every fenced block of `paths` in a language of `languages`, with where it is. */
export function blocks(paths, languages) {
  const found = [];
  for (const path of paths) {
    const text = readFileSync(path, "utf8");
    for (const match of text.matchAll(BLOCK)) {
      const { marker, why, lang, code } = match.groups;
      if (!languages.has(lang.toLowerCase())) continue;
      const line = text.slice(0, match.index).split("\n").length + (marker ? 1 : 0);
      found.push({ where: `${relative(root, path)}:${line}`, lang, code, marker, why });
    }
  }
  return found;
}

const documents = [join(here, "README.md"), ...markdownFiles(join(root, "docs")).sort()];
const examples = blocks(documents, JS);

let server;
let cluster = null;
let modules;
before(async () => {
  server = await startRedis();
  // `require("redis-presence")` from anywhere: a folder on NODE_PATH holding a link to this package.
  modules = mkdtempSync(join(tmpdir(), "presence-docs-"));
  mkdirSync(join(modules, "node_modules"));
  symlinkSync(here, join(modules, "node_modules", "redis-presence"), "dir");
});
after(async () => {
  await server?.stop();
  await cluster?.stop();
  if (modules) rmSync(modules, { recursive: true, force: true });
});

function run(code, clustered = false) {
  const file = join(modules, "example.cjs");
  writeFileSync(file, code);
  const child = spawn(process.execPath, [file], {
    cwd: modules,
    env: {
      ...Object.fromEntries(Object.entries(process.env).filter(([name]) => name !== "NODE_TEST_CONTEXT")), // a program, not a test file
      REDIS_URL: `redis://127.0.0.1:${server.port}`,
      ...(clustered ? { REDIS_CLUSTER_NODES: cluster.nodes.map(({ host, port }) => `${host}:${port}`).join(",") } : {}),
      NODE_PATH: [join(modules, "node_modules"), join(here, "node_modules")].join(delimiter),
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk) => (stdout += chunk));
  child.stderr.on("data", (chunk) => (stderr += chunk));
  const exited = new Promise((resolve) => {
    const timer = setTimeout(() => child.kill("SIGKILL"), BLOCK_TIMEOUT_MS);
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
  return { child, exited };
}

async function present() {
  const presence = new PresenceRegistry(server.client(), { onSkipped: () => undefined });
  try {
    return (await presence.snapshot()).map((row) => row.consumer);
  } finally {
    presence.redis.disconnect();
  }
}

test("the docs hold JavaScript blocks: this README's and the docs site's Node page", () => {
  const where = new Set(examples.map((example) => example.where.split(":")[0]));
  assert.ok(where.has("clients/node/README.md"), [...where].join(" "));
  assert.ok(where.has("docs/node.md"), [...where].join(" "));
});

test("no TypeScript block, which nothing here would run", () => {
  assert.deepStrictEqual(
    blocks(documents, TS).map((block) => block.where),
    [],
  );
});

for (const example of examples) {
  const skip = example.marker === "no-run" ? example.why : false;
  test(`the block at ${example.where} runs`, { skip }, async () => {
    const clustered = example.marker === "run" && example.why === "cluster";
    if (clustered) {
      cluster ??= await startCluster();
      await cluster.flushall();
    }
    const flush = server.client();
    await flush.flushall();
    flush.disconnect();
    const { child, exited } = run(example.code, clustered);
    if (example.marker === "run" && !clustered) {
      assert.equal(example.why, "until-sigterm", `${example.where}: unknown run marker`);
      const deadline = Date.now() + BLOCK_TIMEOUT_MS;
      let running = true;
      void exited.then(() => (running = false));
      while (running && (await present()).length === 0) {
        assert.ok(Date.now() < deadline, `${example.where}: no consumer became present`);
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      if (!running) assert.fail(`${example.where} exited before SIGTERM: ${(await exited).stderr}`);
      child.kill("SIGTERM");
    }
    const { code, signal, stdout, stderr } = await exited;
    assert.equal(signal, null, `${example.where} was killed (${signal}): ${stderr}`);
    assert.equal(code, 0, `${example.where} exited ${code}:\n${stderr}`);
    const expected = example.code
      .split("\n")
      .map((line) => SHOWN.exec(line)?.groups.value)
      .filter((value) => value !== undefined);
    assert.deepStrictEqual(stdout.split("\n").filter(Boolean), expected, `${example.where}: what it printed`);
    if (example.marker === "run" && !clustered) assert.deepStrictEqual(await present(), [], `${example.where}: still present after SIGTERM`);
  });
}

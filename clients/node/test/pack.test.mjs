// `npm pack` makes an installable tarball: the built client and the repository's Lua scripts,
// which load from the unpacked package and name the same SHAs.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { script } from "../dist/index.js";

const here = join(dirname(fileURLToPath(import.meta.url)), "..");

test("npm pack holds dist/ and lua/, and the unpacked package loads its scripts", () => {
  const folder = mkdtempSync(join(tmpdir(), "presence-pack-"));
  try {
    // --ignore-scripts: `npm test` has just built dist/ (prepack builds it for a real pack).
    const [packed] = JSON.parse(
      execFileSync("npm", ["pack", "--json", "--ignore-scripts", "--pack-destination", folder], { cwd: here, encoding: "utf8" }),
    );
    const files = packed.files.map((f) => f.path).sort();
    assert.ok(files.includes("dist/index.js") && files.includes("lua/lib.lua") && files.includes("lua/heartbeat.lua"), files.join(" "));
    execFileSync("tar", ["-xzf", join(folder, packed.filename), "-C", folder]);
    assert.ok(readdirSync(join(folder, "package", "lua")).includes("prune.lua"));
    const sha = execFileSync(process.execPath, ["-e", "console.log(require('./package').script('heartbeat').sha)"], {
      cwd: folder,
      encoding: "utf8",
      env: { ...process.env, NODE_PATH: join(here, "node_modules") },
    }).trim();
    assert.equal(sha, script("heartbeat").sha);
  } finally {
    rmSync(folder, { recursive: true, force: true });
  }
});

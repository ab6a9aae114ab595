// One source of truth: the package's lua/ is the repository's lua/, byte for byte, and the
// scripts are joined as the Python package joins them (redis_presence/scripts.py).
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { LUA_FOLDER, SCRIPT_NAMES, script } from "../dist/index.js";

const repository = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "lua");

test("the packaged Lua files are the repository's", () => {
  const names = readdirSync(repository).filter((n) => n.endsWith(".lua")).sort();
  assert.deepStrictEqual(readdirSync(LUA_FOLDER).filter((n) => n.endsWith(".lua")).sort(), names);
  for (const name of names) {
    assert.ok(readFileSync(join(LUA_FOLDER, name)).equals(readFileSync(join(repository, name))), name);
  }
  assert.deepStrictEqual([...SCRIPT_NAMES], names.filter((n) => n !== "lib.lua").map((n) => n.slice(0, -4)));
});

test("each script is lib.lua, a marker line and the operation, by its SHA1", () => {
  for (const name of SCRIPT_NAMES) {
    const lib = readFileSync(join(repository, "lib.lua"), "utf8");
    const op = readFileSync(join(repository, `${name}.lua`), "utf8");
    const text = `${lib}\n-- ${name}.lua\n${op}`;
    assert.equal(script(name).source, text);
    assert.equal(script(name).sha, createHash("sha1").update(text).digest("hex"));
  }
});

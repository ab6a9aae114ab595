// Copies the repository's Lua scripts (../../lua/*.lua, the one source of truth) into the
// package's lua/ folder at build and pack time. test/scripts.test.mjs checks the copies are
// byte for byte the repository's, and that the SHA of each script matches Python's spelling.
import { copyFileSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const source = join(here, "..", "..", "..", "lua");
const target = join(here, "..", "lua");
rmSync(target, { recursive: true, force: true });
mkdirSync(target);
for (const name of readdirSync(source).filter((n) => n.endsWith(".lua"))) {
  copyFileSync(join(source, name), join(target, name));
}

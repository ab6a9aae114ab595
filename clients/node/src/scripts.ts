/** The Lua scripts, read from the package's lua/ folder: the repository's lua/*.lua, copied
 * at build time (scripts/copy-lua.mjs), joined as the Python package joins them (the shared
 * helpers of lib.lua first), so both clients send the very same scripts by the same SHA. */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";

/** Every script of the repository's lua/ (stream_reap is the Python streams reaper's: this
 * client ships it with the rest, so both clients name the same scripts by the same SHAs). */
export const SCRIPT_NAMES = ["deregister", "describe", "drain", "expect", "heartbeat", "heartbeat_many", "prune", "setting", "stream_reap", "unexpect"] as const;
export type ScriptName = (typeof SCRIPT_NAMES)[number];

export interface Script {
  name: ScriptName;
  source: string;
  sha: string;
}

/** Where the scripts are read from. */
export const LUA_FOLDER = join(__dirname, "..", "lua");

const cache = new Map<ScriptName, Script>();

/** One operation script, shared helpers included (`lib.lua`, then `-- <name>.lua`). */
export function script(name: ScriptName): Script {
  let found = cache.get(name);
  if (found === undefined) {
    const read = (file: string) => readFileSync(join(LUA_FOLDER, `${file}.lua`), "utf8");
    const source = `${read("lib")}\n-- ${name}.lua\n${read(name)}`;
    found = { name, source, sha: createHash("sha1").update(source, "utf8").digest("hex") };
    cache.set(name, found);
  }
  return found;
}

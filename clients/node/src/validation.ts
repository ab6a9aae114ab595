/** Argument checks of the client, run before anything is written: the Python package's
 * redis_presence/validation.py, refusing what it refuses (a TypeError for a value of the
 * wrong type, a RangeError for one out of range, each naming the argument). */
import { types } from "node:util";

/** Longest queue, group or consumer name (and metadata key or value), in UTF-8 bytes. */
export const MAX_NAME_BYTES = 512;
/** Lease counts are unsigned 32-bit integers. */
export const MAX_LEASE_COUNT = 2 ** 32 - 1;
/** Largest shared TTL or progress budget, in ms (about 31 years). */
export const MAX_TTL_MS = 10 ** 12;
/** Largest minimum of active consumers a declared group may ask for. */
export const MAX_MIN_ACTIVE = 1_000_000;
/** Most keys of one consumer's metadata. */
export const MAX_META_KEYS = 16;
/** Most UTF-8 bytes of one consumer's metadata, its keys and values together. */
export const MAX_META_BYTES = 1_024;

/** A consumer's metadata: a plain object (a literal, `JSON.parse`, `Object.create(null)`) or
 * a Map, of string keys to string values. */
export type Meta = Readonly<Record<string, string>> | ReadonlyMap<string, string>;

/** What a value is, for an error message. */
function kind(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (typeof value !== "object") return typeof value;
  const name: unknown = Object.getPrototypeOf(value)?.constructor?.name;
  return typeof name === "string" && name ? `a ${name}` : "an object";
}

/** A queue, group or consumer name: a non-empty string of at most 512 UTF-8 bytes. */
export function checkName(argument: string, value: unknown): string {
  if (typeof value !== "string") throw new TypeError(`${argument} must be a string, got ${kind(value)}`);
  if (value === "") throw new RangeError(`${argument} must be a non-empty string`);
  if (!value.isWellFormed()) throw new RangeError(`${argument} must be encodable as UTF-8 (a lone surrogate)`);
  const size = Buffer.byteLength(value, "utf8");
  if (size > MAX_NAME_BYTES) throw new RangeError(`${argument} must be at most ${MAX_NAME_BYTES} UTF-8 bytes, got ${size}`);
  return value;
}

/** A count of in-flight leases: an integer in [0, MAX_LEASE_COUNT]. */
export function checkLease(value: unknown): number {
  if (typeof value !== "number") throw new TypeError(`leaseCount must be a number, got ${kind(value)}`);
  if (!Number.isInteger(value) || value < 0 || value > MAX_LEASE_COUNT) {
    throw new RangeError(`leaseCount must be an integer in [0, ${MAX_LEASE_COUNT}], got ${String(value)}`);
  }
  return value;
}

/** A TTL or progress budget in ms: an integer in [1, MAX_TTL_MS]. */
export function checkTtl(value: unknown, argument = "ttlMs"): number {
  if (typeof value !== "number") throw new TypeError(`${argument} must be a number, got ${kind(value)}`);
  if (!Number.isInteger(value) || value < 1 || value > MAX_TTL_MS) {
    throw new RangeError(`${argument} must be an integer in [1, ${MAX_TTL_MS}], got ${String(value)}`);
  }
  return value;
}

/** How long past its expiry a consumer is kept before a prune removes it: ms in
 * [0, MAX_TTL_MS], or null (DEFAULT_RETENTION_TTLS times its group's TTL). */
export function checkRetention(value: unknown, argument = "retentionMs"): number | null {
  if (value === null) return null;
  if (typeof value !== "number") throw new TypeError(`${argument} must be a number or null, got ${kind(value)}`);
  if (!Number.isInteger(value) || value < 0 || value > MAX_TTL_MS) {
    throw new RangeError(`${argument} must be an integer in [0, ${MAX_TTL_MS}] or null, got ${String(value)}`);
  }
  return value;
}

/** An instant in ns as its decimal string ("" when absent: the server's clock). */
export function checkNs(value: unknown): string {
  if (value === undefined) return "";
  const text = typeof value === "bigint" ? value.toString() : value;
  if (typeof text !== "string") throw new TypeError(`nowNs must be a bigint or a decimal string, got ${kind(value)}`);
  if (!/^\d{1,19}$/.test(text) || BigInt(text) > 2n ** 53n * 1000n - 1n) {
    throw new RangeError(`nowNs must be a non-negative bigint or decimal string below 2**53 * 1000, got ${String(value)}`);
  }
  return text;
}

/** How many active consumers a declared group must have: an integer in [1, MAX_MIN_ACTIVE]
 * (a group stops being declared with `unexpect`, not with 0). */
export function checkMinActive(value: unknown, argument = "minActive"): number {
  if (typeof value !== "number") throw new TypeError(`${argument} must be a number, got ${kind(value)}`);
  if (!Number.isInteger(value) || value < 1 || value > MAX_MIN_ACTIVE) {
    throw new RangeError(`${argument} must be an integer in [1, ${MAX_MIN_ACTIVE}], got ${value}`);
  }
  return value;
}

/** Consumer metadata (`Meta`): at most MAX_META_KEYS keys (each a name, as `checkName`) to
 * string values (each a name, or empty), MAX_META_BYTES in all; its entries. Anything the
 * stored JSON object could not hold as given is refused: an array, a Set or an instance of a
 * class, a symbol or non-enumerable key, a value that is not a string. */
export function checkMeta(value: unknown, argument = "meta"): [string, string][] {
  let entries: [unknown, unknown][];
  if (types.isMap(value)) {
    entries = [...(value as Map<unknown, unknown>)];
  } else if (typeof value === "object" && value !== null && [null, Object.prototype].includes(Object.getPrototypeOf(value))) {
    if (Reflect.ownKeys(value).length !== Object.keys(value).length) {
      throw new TypeError(`${argument} must have only enumerable string keys (a symbol or non-enumerable key is not stored)`);
    }
    entries = Object.entries(value);
  } else {
    throw new TypeError(`${argument} must be a plain object or a Map of string to string, got ${kind(value)}`);
  }
  if (entries.length > MAX_META_KEYS) throw new RangeError(`${argument} must have at most ${MAX_META_KEYS} keys, got ${entries.length}`);
  let size = 0;
  for (const [key, item] of entries) {
    checkName(`${argument} key`, key);
    const named = `${argument}[${JSON.stringify((key as string).slice(0, 40))}]`;
    if (typeof item !== "string") throw new TypeError(`${named} must be a string, got ${kind(item)}`);
    if (item !== "") checkName(named, item);
    size += Buffer.byteLength(key as string) + Buffer.byteLength(item);
  }
  if (size > MAX_META_BYTES) throw new RangeError(`${argument} must be at most ${MAX_META_BYTES} UTF-8 bytes in all, got ${size}`);
  return entries as [string, string][];
}

/** A consumer's capacity (how many leases it can hold at once): an integer in
 * [0, MAX_LEASE_COUNT] (0: not reported), or null/undefined: keep the stored one. */
export function checkCapacity(value: unknown, argument = "capacity"): number | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== "number") throw new TypeError(`${argument} must be a number or null, got ${kind(value)}`);
  if (!Number.isInteger(value) || value < 0 || value > MAX_LEASE_COUNT) {
    throw new RangeError(`${argument} must be an integer in [0, ${MAX_LEASE_COUNT}] or null, got ${String(value)}`);
  }
  return value;
}

/** Whether a consumer says it is draining: a boolean, or null/undefined: keep the stored one. */
export function checkDraining(value: unknown, argument = "draining"): boolean | null {
  if (value === undefined || value === null) return null;
  if (typeof value !== "boolean") throw new TypeError(`${argument} must be a boolean or null, got ${kind(value)}`);
  return value;
}

/** An instance token: 1 to 32 characters of `[A-Za-z0-9_.-]` (`-` is none). */
export const INSTANCE = /^[A-Za-z0-9_.-]{1,32}$/;

/** A registry's instance token (the process that beats: a restart shows as a new token). */
export function checkInstance(value: unknown, argument = "instance"): string {
  if (typeof value !== "string") throw new TypeError(`${argument} must be a string, got ${kind(value)}`);
  if (!INSTANCE.test(value)) throw new RangeError(`${argument} must be 1 to 32 characters of [A-Za-z0-9_.-], got ${JSON.stringify(value.slice(0, 40))}`);
  return value;
}

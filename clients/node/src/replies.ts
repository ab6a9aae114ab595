/** Decoding of replies into rows (docs/protocol.md, sections 4, 5, 7 and 9): the rule, the
 * stored value and metadata, and what a read sets aside. */
import { PresenceDataError } from "./errors";
import { byCodePoint, type GroupKeys } from "./keys";
import { checkMeta, MAX_LEASE_COUNT, MAX_META_BYTES, MAX_META_KEYS, MAX_MIN_ACTIVE } from "./validation";

/** The longest spelling of a valid mapping (each byte of its keys and values at most six JSON
 * characters, six more a pair, and the braces), as Python's MAX_STORED_META_CHARS. */
const MAX_STORED_META_CHARS = 6 * MAX_META_BYTES + 6 * MAX_META_KEYS + 2;

export const NS_PER_MS = 1_000_000n;
/** A stored value: version 1's `registered last lease [progress]`, or version 2's nine
 * fields `registered last lease progress capacity flags conflict instance previous`. */
const STORED = /^(\d{1,19}) (\d{1,19}) (\d{1,19})(?: (\d{1,19})(?: (\d{1,10}) (\d{1,10}) (\d{1,19}) ([A-Za-z0-9_.-]{1,32}) ([A-Za-z0-9_.-]{1,32}))?)?$/;
/** Bits of a stored value's flags (unknown bits are ignored). */
const DRAINING = 1;
const DRAIN_REQUESTED = 2;
/** A declared minimum as stored: 1 to 1000000 in canonical decimal digits (no sign, no
 * leading zero); "0", "02", "+5", " 5" are not minimums, whatever Number() makes of them. */
const MIN_ACTIVE = /^[1-9]\d{0,6}$/;

/** The declared minimum a stored value spells, or null when it is not one a client writes. */
export function storedMinActive(value: string): number | null {
  return MIN_ACTIVE.test(value) && Number(value) <= MAX_MIN_ACTIVE ? Number(value) : null;
}

export type PresenceState = "active" | "stale" | "expired";

/** One consumer as seen at one instant (the Python package's `ConsumerPresence`). */
export interface ConsumerPresence {
  queue: string;
  group: string;
  consumer: string;
  registeredAtNs: bigint;
  lastHeartbeatNs: bigint;
  lastSeenAgeMs: number;
  leaseCount: number;
  state: PresenceState;
  lastProgressNs: bigint | null;
  stuck: boolean;
  meta: Record<string, string>;
  /** How many leases it can hold at once, as it last reported (null: none reported). */
  capacity: number | null;
  /** It said it is draining (finishing what it holds, taking no more). */
  draining: boolean;
  /** It was asked to drain (`requestDrain`) and has not yet acknowledged it. */
  drainRequested: boolean;
  /** Another process beat under its name within the TTL (a duplicate consumer name). */
  conflict: boolean;
  /** The instance token of the process that last beat (null: none). */
  instance: string | null;
}

/** What a read set aside instead of failing (docs/protocol.md, section 9): the key (an index
 * member, a group's hash, a queue's declarations) and why; the group's names (none for an
 * index member another program spelled); `consumer`, the one row set aside (none: the whole
 * group). */
export interface Skipped {
  key: string;
  reason: string;
  queue?: string;
  group?: string;
  consumer?: string;
}

/** A fleet read's answer: its rows, and the keys it set aside. */
export type WithSkipped<T> = T[] & { skipped: Skipped[] };

/** The rule (docs/protocol.md, 7): `[activeAfter, expiredAt]` in ns. */
export function horizonsNs(nowNs: bigint, ttlMs: number): [bigint, bigint] {
  const ttl = BigInt(ttlMs);
  return [nowNs - (ttl + 1n) * NS_PER_MS, nowNs - (2n * ttl + 1n) * NS_PER_MS];
}

/** The state of a beat at `hb` seen at `now` under `ttlMs`. */
export function classify(nowNs: bigint, hbNs: bigint, ttlMs: number): PresenceState {
  const [activeAfter, expiredAt] = horizonsNs(nowNs, ttlMs);
  if (hbNs > activeAfter) return "active";
  return hbNs <= expiredAt ? "expired" : "stale";
}

export function quoted(text: string): string {
  // eslint-disable-next-line no-control-regex -- control characters are what it escapes
  return '"' + text.slice(0, 80).replace(/[\x00-\x1f\x7f"\\]/g, (c) => "\\x" + c.charCodeAt(0).toString(16).padStart(2, "0")) + '"';
}

export interface Stored {
  registered: bigint;
  heartbeat: bigint;
  lease: number;
  progress: bigint | null;
  /** 0: not reported (and for a version-1 value). */
  capacity: number;
  flags: number;
  /** 0n: never. */
  conflict: bigint;
  instance: string | null;
  previous: string | null;
}

export function parseStored(gk: GroupKeys, consumer: string, value: string): Stored {
  const found = STORED.exec(value);
  // A lease count, capacity or flags above 2^32-1 is no client's (docs/protocol.md, section 4).
  if (found === null || Number(found[3]) > MAX_LEASE_COUNT || (found[5] !== undefined && (Number(found[5]) > MAX_LEASE_COUNT || Number(found[6]) > MAX_LEASE_COUNT))) {
    throw new PresenceDataError(
      `redis-presence key ${gk.data} field ${quoted(consumer)} holds a value this package did not write: ${quoted(value)}`,
    );
  }
  return {
    registered: BigInt(found[1]),
    heartbeat: BigInt(found[2]),
    lease: Number(found[3]),
    // Version 1 wrote a 4th field only for a recorded progress; version 2 writes 0 for none.
    progress: found[4] === undefined || (found[5] !== undefined && found[4] === "0") ? null : BigInt(found[4]),
    capacity: found[5] === undefined ? 0 : Number(found[5]),
    flags: found[6] === undefined ? 0 : Number(found[6]),
    conflict: found[7] === undefined ? 0n : BigInt(found[7]),
    instance: found[8] === undefined || found[8] === "-" ? null : found[8],
    previous: found[9] === undefined || found[9] === "-" ? null : found[9],
  };
}

/** The mapping a stored metadata value spells, when it is a mapping a client writes
 * (docs/protocol.md, section 5): one `checkMeta` takes, so at most 16 keys (its spelling is
 * not checked); anything else (17 keys, a value that is not a string) is a data error. */
export function decodeMeta(gk: GroupKeys, consumer: string, value: string): Record<string, string> {
  try {
    // Longer than the longest spelling of a valid mapping: refused unparsed.
    const meta: unknown = value.length > MAX_STORED_META_CHARS ? null : JSON.parse(value);
    if (typeof meta === "object" && meta !== null && !Array.isArray(meta)) {
      checkMeta(meta); // throws for a mapping no client writes
      return meta as Record<string, string>;
    }
  } catch {
    // a data error, below
  }
  throw new PresenceDataError(`redis-presence key ${gk.meta} field '${consumer.slice(0, 80)}' holds metadata this package did not write`);
}

export function withSkipped<T>(items: T[], skipped: Skipped[]): WithSkipped<T> {
  const out = items as WithSkipped<T>;
  out.skipped = unique(skipped);
  return out;
}

/** What a read set aside, once per key and consumer (the first reason found for it), in the
 * protocol's order: by key, then consumer (a whole group first), in code-point order
 * (docs/protocol.md, section 9), whatever order the read found them in. */
export function unique(skipped: Skipped[]): Skipped[] {
  const seen = new Map<string, Skipped>();
  for (const item of skipped) {
    const at = JSON.stringify([item.key, item.consumer ?? null]);
    if (!seen.has(at)) seen.set(at, item);
  }
  return [...seen.values()].sort(
    (a, b) =>
      byCodePoint(a.key, b.key) ||
      Number(a.consumer !== undefined) - Number(b.consumer !== undefined) ||
      byCodePoint(a.consumer ?? "", b.consumer ?? ""),
  );
}

/** A whole group set aside, for why. */
export function aside(gk: GroupKeys, reason: string): Skipped {
  return { key: gk.data, reason, queue: gk.queue, group: gk.group };
}

/** A key that tells every pair of names apart (names may hold any character). */
export function pair(queue: string, group: string): string {
  return JSON.stringify([queue, group]);
}

/** The `pair` of each whole group in `skipped`: a view leaves them out (they could
 * not be read), never shows them as groups without consumers. */
export function groupsSetAside(skipped: Skipped[]): Set<string> {
  return new Set(skipped.filter((s) => s.consumer === undefined && s.queue !== undefined && s.group !== undefined).map((s) => pair(s.queue as string, s.group as string)));
}

export function groupName(gk: GroupKeys): string {
  return `${gk.queue}/${gk.group}`;
}

/** One consumer's row from its stored value, aged at `now` and classified with `ttlMs` and
 * `stuckMs`. */
export function row(gk: GroupKeys, consumer: string, s: Stored, now: bigint, ttlMs: number, stuckMs: number, meta: Record<string, string>): ConsumerPresence {
  const state = classify(now, s.heartbeat, ttlMs);
  const age = now > s.heartbeat ? (now - s.heartbeat) / NS_PER_MS : 0n;
  const since = s.progress !== null && s.progress > s.registered ? s.progress : s.registered;
  const stuck = state === "active" && s.lease > 0 && since <= now - (BigInt(stuckMs) + 1n) * NS_PER_MS;
  return {
    queue: gk.queue,
    group: gk.group,
    consumer,
    registeredAtNs: s.registered,
    lastHeartbeatNs: s.heartbeat,
    lastSeenAgeMs: Number(age),
    leaseCount: s.lease,
    state,
    lastProgressNs: s.progress,
    stuck,
    meta,
    capacity: s.capacity === 0 ? null : s.capacity,
    draining: (s.flags & DRAINING) !== 0,
    drainRequested: (s.flags & DRAIN_REQUESTED) !== 0,
    conflict: s.conflict !== 0n && classify(now, s.conflict, ttlMs) === "active",
    instance: s.instance,
  };
}

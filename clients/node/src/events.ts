/** Transitions as events: the record, the rule's instants, and the event cursor (no I/O),
 * as the Python package's redis_presence/events.py has them (docs/protocol.md, section 6).
 *
 * Write-driven events (`joined`, `recovered`, `left`, `pruned`, and in protocol version 2
 * `draining`, `conflict`, `restarted`, `drain_requested`) are logged by the script call that
 * makes the change, in the queue's capped log (`P:{Q}:events`). Time-driven events (`stale`,
 * `expired`) are logged by no one: a reader derives them from the heartbeat sorted sets for
 * the window it asks about. A cursor is spelled byte for byte as the Python package spells
 * it, so a cursor of either client goes on in the other. */
import { PresenceDataError, PresenceResyncRequired } from "./errors";
import { byCodePoint, type GroupKeys, type Keyspace } from "./keys";
import { NS_PER_MS, parseStored } from "./replies";

/** How far behind the reader's clock `changes` looks for log entries it has not read yet
 * (a cluster caller that lists its log a moment after the script logged, node clocks). */
export const LOG_LAG_MS = 10_000;
/** A queue's event log expires this long after its last event; an older cursor cannot go on. */
export const EVENT_LOG_TTL_MS = 86_400_000;
/** About how many events one `changes` call gives at most (a log entry is never split). */
export const DEFAULT_CHANGES_LIMIT = 1_000;
/** The largest `limit` `changes` takes. */
export const MAX_CHANGES_LIMIT = 100_000;
/** The longest cursor `changes` decodes. */
export const MAX_CURSOR_CHARS = 1_000_000;
/** How often `follow` asks for changes, in ms. */
export const DEFAULT_FOLLOW_INTERVAL_MS = 1_000;
/** The version a cursor carries (1: before the epoch marker; such a cursor asks a resync). */
export const CURSOR_VERSION = 2;
/** The epoch of a cursor of version 1. */
const LEGACY_EPOCH = "\x00";
const MAX_BRACKETS = 16;
const MAX_PLACE = 2n ** 53n;
/** How long a cluster group may wait for its index entry (the Python package's INDEX_MARK_MS). */
const INDEX_MARK_MS = 60_000;

/** What happened to a consumer, in the order events of one instant are given. */
export const EVENT_KINDS = ["stale", "expired", "joined", "recovered", "left", "pruned", "draining", "conflict", "restarted", "drain_requested"] as const;
export type EventKind = (typeof EVENT_KINDS)[number];
const RANK = new Map<string, number>(EVENT_KINDS.map((kind, rank) => [kind, rank]));
const LOGGED = new Set<string>(EVENT_KINDS.filter((kind) => kind !== "stale" && kind !== "expired"));

/** One transition of one consumer, at `atNs` (the Python package's `PresenceEvent`): `stale`
 * is at `lastHeartbeatNs + ttl + 1 ms` and `expired` at `lastHeartbeatNs + 2 ttl + 1 ms`;
 * `registeredAtNs` and `lastHeartbeatNs` are the consumer's at that moment. */
export interface PresenceEvent {
  kind: EventKind;
  queue: string;
  group: string;
  consumer: string;
  atNs: bigint;
  leaseCount: number;
  registeredAtNs: bigint | null;
  lastHeartbeatNs: bigint | null;
}

/** An event with where it goes in `changes`' answer: `place` is its log entry's
 * `[ms, seq]` (null: a derived event, given before the logged ones of its instant). */
export interface Ordered {
  event: PresenceEvent;
  place: [bigint, bigint] | null;
}

function compareBig(a: bigint, b: bigint): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** `events.order` of the Python package: by `atNs`; at one instant the derived events first,
 * then the logged ones in the order they happened, then by kind and names. */
export function compareOrdered(a: Ordered, b: Ordered): number {
  const [x, y] = [a.event, b.event];
  return (
    compareBig(x.atNs, y.atNs) ||
    Number(a.place !== null) - Number(b.place !== null) ||
    (a.place !== null && b.place !== null ? compareBig(a.place[0], b.place[0]) || compareBig(a.place[1], b.place[1]) : 0) ||
    (RANK.get(x.kind) as number) - (RANK.get(y.kind) as number) ||
    byCodePoint(x.queue, y.queue) ||
    byCodePoint(x.group, y.group) ||
    byCodePoint(x.consumer, y.consumer)
  );
}

/** The events in the order `changes` gives them. */
export function sortedEvents(events: Ordered[]): PresenceEvent[] {
  return [...events].sort(compareOrdered).map((item) => item.event);
}

/** The instant a consumer last seen at `lastHeartbeatNs` turns stale (or expired). */
export function crossed(kind: "stale" | "expired", lastHeartbeatNs: bigint, ttlMs: number): bigint {
  const lines = kind === "stale" ? 1n : 2n;
  return lastHeartbeatNs + (lines * BigInt(ttlMs) + 1n) * NS_PER_MS;
}

/** `[low, high]`: the last heartbeats that cross `kind`'s line in `(sinceNs, nowNs]` are
 * those with `low < lastHeartbeatNs <= high`. */
export function eventWindow(kind: "stale" | "expired", sinceNs: bigint, nowNs: bigint, ttlMs: number): [bigint, bigint] {
  const shift = crossed(kind, 0n, ttlMs);
  return [sinceNs - shift, nowNs - shift];
}

/** Floor division of bigints (Python's `//`; bigint `/` truncates toward zero). */
export function floorDiv(a: bigint, b: bigint): bigint {
  const q = a / b;
  return (a % b !== 0n && (a < 0n) !== (b < 0n)) ? q - 1n : q;
}

/** A stream entry id as `[ms, seq]` (a RangeError unless it is one, both parts below 2^64). */
export function streamId(value: string): [bigint, bigint] {
  const found = /^([0-9]{1,20})(?:-([0-9]{0,20}))?$/.exec(value);
  if (found === null) throw new RangeError(`not a stream id: ${JSON.stringify(value.slice(0, 40))}`);
  const place: [bigint, bigint] = [BigInt(found[1]), BigInt(found[2] || "0")];
  if (place[0] >= 2n ** 64n || place[1] >= 2n ** 64n) throw new RangeError(`not a stream id: ${JSON.stringify(value.slice(0, 40))}`);
  return place;
}

/** Whether two stream ids name one entry. */
export function sameId(a: string, b: string): boolean {
  const [x, y] = [streamId(a), streamId(b)];
  return x[0] === y[0] && x[1] === y[1];
}

/** One entry of a log as read (`XRANGE` with buffer replies): its id and its fields in order. */
export type LogEntry = [Buffer, Buffer[]];

const STRICT_UTF8 = new TextDecoder("utf-8", { fatal: true });

/** The events of one log entry, each with its place. An entry of a kind this client does not
 * know yields none, unsaid; one of a known kind that a client does not write (its `g` not a
 * group of this queue, a consumer field that is not four decimal integers, a field name that
 * is not UTF-8) is set aside, wholly or that field alone, and why is appended to `aside`. */
export function loggedEvents(keys: Keyspace, queue: string, entry: LogEntry, aside: [string, string][]): Ordered[] {
  const id = entry[0].toString("utf8");
  const where = `entry ${id}`;
  const fields = new Map<string, Buffer>();
  const flat = entry[1];
  for (let i = 0; i + 1 < flat.length; i += 2) {
    let name: string;
    try {
      name = STRICT_UTF8.decode(flat[i]);
    } catch {
      aside.push([id, `${where} has a field name that is not UTF-8`]);
      return [];
    }
    fields.set(name, flat[i + 1]);
  }
  const kind = fields.get("k")?.toString("utf8") ?? "";
  if (!LOGGED.has(kind)) return [];
  const member = fields.get("g")?.toString("utf8");
  let gk: GroupKeys | null = null;
  try {
    gk = member === undefined ? null : keys.fromMember(member);
  } catch (error) {
    if (!(error instanceof PresenceDataError)) throw error;
  }
  if (gk === null || gk.queue !== queue) {
    aside.push([id, `${where} names no group of this queue: g=${JSON.stringify(member ?? null).slice(0, 80)}`]);
    return [];
  }
  const place = streamId(id);
  const out: Ordered[] = [];
  for (const [name, raw] of fields) {
    if (!name.startsWith("c")) continue; // another field (a later version's): not this reader's
    const value = raw.toString("utf8");
    const numbers = eventNumbers(value);
    if (numbers === null || name === "c") {
      aside.push([id, `${where} field ${JSON.stringify(name).slice(0, 80)} holds ${JSON.stringify(value).slice(0, 40)}`]);
      continue;
    }
    const [at, registered, heartbeat, lease] = numbers;
    out.push({
      event: { kind: kind as EventKind, queue: gk.queue, group: gk.group, consumer: name.slice(1), atNs: at, leaseCount: Number(lease), registeredAtNs: registered, lastHeartbeatNs: heartbeat },
      place,
    });
  }
  return out;
}

/** The four numbers of a consumer field (`at registered heartbeat lease`, single spaces,
 * 1 to 19 ASCII digits each), or null. */
function eventNumbers(value: string): [bigint, bigint, bigint, bigint] | null {
  const found = /^([0-9]{1,19}) ([0-9]{1,19}) ([0-9]{1,19}) ([0-9]{1,19})$/.exec(value);
  return found === null ? null : [BigInt(found[1]), BigInt(found[2]), BigInt(found[3]), BigInt(found[4])];
}

/** What a read of one log set aside, as the one report its warning names. */
export function foreignEntries(log: string, queue: string, aside: [string, string][]): { key: string; reason: string; queue: string }[] {
  if (!aside.length) return [];
  const n = new Set(aside.map(([entry]) => entry)).size;
  const entries = n === 1 ? "1 entry" : `${n} entries`;
  return [{ key: log, reason: `${entries} this package did not write (wholly or in part): ${aside[0][1]}`, queue }];
}

/** The `stale` / `expired` event of one consumer from its stored value (null for a value
 * this client did not write: that consumer is left out, as a snapshot does). */
export function groupEvent(kind: "stale" | "expired", gk: GroupKeys, consumer: string, value: string, ttlMs: number): PresenceEvent | null {
  let stored;
  try {
    stored = parseStored(gk, consumer, value);
  } catch (error) {
    if (error instanceof PresenceDataError) return null;
    throw error;
  }
  const at = crossed(kind, stored.heartbeat, ttlMs);
  return { kind, queue: gk.queue, group: gk.group, consumer, atNs: at, leaseCount: stored.lease, registeredAtNs: stored.registered, lastHeartbeatNs: stored.heartbeat };
}

// -- the cursor -------------------------------------------------------------------------

/** Where a paged `changes` read stands inside one window (`(since, nowNs]`, the logs read up
 * to the server's millisecond `serverMs`): the places reached in recently written logs
 * (`recent`), then either the log being read (`log`: its queue and the last entry given, ""
 * for none) or the group being derived (`derived`: its index member, the kind (0 stale, 1
 * expired), and the score and how many members at that score were given). */
export interface Window {
  nowNs: bigint;
  serverMs: bigint;
  recent: Map<string, string>;
  log: [string, string] | null;
  derived: [string, number, bigint, bigint] | null;
}

/** Where `changes` goes on from (the Python package's `EventCursor`). */
export interface EventCursor {
  nowNs: bigint;
  serverMs: bigint;
  positions: Map<string, string>;
  epoch: string | null;
  prefix: string | null;
  queue: string | null;
  group: string | null;
  window: Window | null;
}

/** A JSON value as the cursor's parser reads it: integers as bigint, other numbers as
 * `{ float }`, objects as Maps in document order. */
type Json = null | boolean | string | bigint | { float: number } | Json[] | Map<string, Json>;

/** A string as Python's `json.dumps(..., ensure_ascii=True)` spells it. */
function pythonString(text: string): string {
  let out = '"';
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) out += '\\"';
    else if (c === 0x5c) out += "\\\\";
    else if (c >= 0x20 && c <= 0x7e) out += text[i];
    else if (c === 0x08) out += "\\b";
    else if (c === 0x0c) out += "\\f";
    else if (c === 0x0a) out += "\\n";
    else if (c === 0x0d) out += "\\r";
    else if (c === 0x09) out += "\\t";
    else out += "\\u" + c.toString(16).padStart(4, "0");
  }
  return out + '"';
}

function dump(value: Json): string {
  if (value === null) return "null";
  if (typeof value === "boolean") return value ? "true" : "false";
  if (typeof value === "string") return pythonString(value);
  if (typeof value === "bigint") return value.toString();
  if (Array.isArray(value)) return "[" + value.map(dump).join(",") + "]";
  if (value instanceof Map) return "{" + [...value].map(([k, v]) => `${pythonString(k)}:${dump(v)}`).join(",") + "}";
  return String(value.float);
}

/** The opaque string a caller keeps: base64url (no padding) of the compact JSON the Python
 * package writes, keys in its order, byte for byte. */
export function encodeCursor(cursor: EventCursor): string {
  const document = new Map<string, Json>([
    ["v", BigInt(CURSOR_VERSION)],
    ["t", cursor.nowNs],
    ["s", cursor.serverMs],
    ["q", new Map(cursor.positions)],
    ["e", cursor.epoch],
    ["f", [cursor.prefix, cursor.queue, cursor.group]],
  ]);
  const w = cursor.window;
  if (w !== null) {
    document.set(
      "w",
      new Map<string, Json>([
        ["n", w.nowNs],
        ["u", w.serverMs],
        ["r", new Map(w.recent)],
        ["l", w.log === null ? null : [...w.log]],
        ["d", w.derived === null ? null : [w.derived[0], BigInt(w.derived[1]), w.derived[2], w.derived[3]]],
      ]),
    );
  }
  return Buffer.from(dump(document), "ascii").toString("base64url");
}

class Refused extends Error {}

/** A JSON parser of Python's `json.loads` grammar (NaN and Infinity too, no control
 * characters in strings), keeping integers exact. Recursion is bounded by the bracket
 * count checked before it runs. */
function parseJson(text: string): Json {
  let i = 0;
  const space = () => {
    while (i < text.length && " \t\n\r".includes(text[i])) i++;
  };
  const value = (): Json => {
    space();
    const c = text[i];
    if (c === "{") {
      i++;
      const out = new Map<string, Json>();
      space();
      if (text[i] === "}") {
        i++;
        return out;
      }
      for (;;) {
        space();
        if (text[i] !== '"') throw new Refused();
        const key = string();
        space();
        if (text[i++] !== ":") throw new Refused();
        out.set(key, value());
        space();
        const next = text[i++];
        if (next === "}") return out;
        if (next !== ",") throw new Refused();
      }
    }
    if (c === "[") {
      i++;
      const out: Json[] = [];
      space();
      if (text[i] === "]") {
        i++;
        return out;
      }
      for (;;) {
        out.push(value());
        space();
        const next = text[i++];
        if (next === "]") return out;
        if (next !== ",") throw new Refused();
      }
    }
    if (c === '"') return string();
    for (const [word, meant] of [["null", null], ["true", true], ["false", false], ["NaN", { float: NaN }], ["Infinity", { float: Infinity }], ["-Infinity", { float: -Infinity }]] as const) {
      if (text.startsWith(word, i)) {
        i += word.length;
        return meant;
      }
    }
    const found = /^(-?(?:0|[1-9][0-9]*))(\.[0-9]+)?([eE][-+]?[0-9]+)?/.exec(text.slice(i, i + 400));
    if (found === null) throw new Refused();
    i += found[0].length;
    return found[2] === undefined && found[3] === undefined ? BigInt(found[1]) : { float: Number(found[0]) };
  };
  const string = (): string => {
    i++; // the opening quote
    let out = "";
    for (;;) {
      if (i >= text.length) throw new Refused();
      const c = text[i++];
      if (c === '"') return out;
      if (c.charCodeAt(0) < 0x20) throw new Refused();
      if (c !== "\\") {
        out += c;
        continue;
      }
      const e = text[i++];
      const simple: Record<string, string> = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };
      if (e in simple) out += simple[e];
      else if (e === "u" && /^[0-9a-fA-F]{4}$/.test(text.slice(i, i + 4))) {
        out += String.fromCharCode(parseInt(text.slice(i, i + 4), 16));
        i += 4;
      } else throw new Refused();
    }
  };
  const out = value();
  space();
  if (i !== text.length) throw new Refused();
  return out;
}

function isInt(value: Json | undefined): value is bigint {
  return typeof value === "bigint";
}

/** Whether a JSON value is the integer `n` (docs/protocol.md, section 6: `v` is an integer;
 * `2.0` or `true` is no version a writer spells). */
function equalsInt(value: Json | undefined, n: number): boolean {
  return typeof value === "bigint" && value === BigInt(n);
}

/** A cursor's place: exactly `ms-seq`, both parts below 2^64 (`ms` alone or `ms-`, which
 * XRANGE would take, are no place a reader wrote). */
const PLACE = /^[0-9]{1,20}-[0-9]{1,20}$/;

function positions(value: Json | undefined): Map<string, string> {
  if (!(value instanceof Map)) throw new Refused();
  for (const place of value.values()) {
    if (typeof place !== "string" || !PLACE.test(place)) throw new Refused();
    try {
      streamId(place);
    } catch {
      throw new Refused();
    }
  }
  return value as Map<string, string>;
}

function field(document: Map<string, Json>, name: string): Json {
  if (!document.has(name)) throw new Refused();
  return document.get(name) as Json;
}

function parseWindow(value: Json): Window {
  if (!(value instanceof Map)) throw new Refused();
  const [now, server, recent] = [field(value, "n"), field(value, "u"), positions(field(value, "r"))];
  const [log, derived] = [field(value, "l"), field(value, "d")];
  if (!(isInt(now) && isInt(server))) throw new Refused();
  let l: [string, string] | null = null;
  let d: [string, number, bigint, bigint] | null = null;
  if (log !== null) {
    if (!(Array.isArray(log) && log.length === 2 && log.every((x) => typeof x === "string"))) throw new Refused();
    if (log[1]) positions(new Map([["", log[1]]]));
    l = [log[0] as string, log[1] as string];
  }
  if (derived !== null) {
    if (!(Array.isArray(derived) && derived.length === 4 && typeof derived[0] === "string" && derived.slice(1).every((x) => isInt(x) && x >= 0n && x <= MAX_PLACE) && (derived[1] === 0n || derived[1] === 1n))) {
      throw new Refused();
    }
    d = [derived[0], Number(derived[1]), derived[2] as bigint, derived[3] as bigint];
  }
  if ((l === null) === (d === null)) throw new Refused();
  return { nowNs: now, serverMs: server, recent, log: l, derived: d };
}

function notOurs(cursor: string): RangeError {
  return new RangeError(`cursor is not one that changes() returned: ${JSON.stringify(cursor.slice(0, 60))}`);
}

/** The cursor a string names; anything else (too long, nested, forged, of another release)
 * is a RangeError naming `cursor` (a TypeError for a value that is not a string). Its size
 * and bracket count are checked before it is parsed. */
export function decodeCursor(cursor: unknown): EventCursor {
  if (typeof cursor !== "string") throw new TypeError(`cursor must be a string or undefined, got ${cursor === null ? "null" : typeof cursor}`);
  if (cursor.length > MAX_CURSOR_CHARS) {
    throw new RangeError(`cursor is not one that changes() returned: ${cursor.length} characters (at most ${MAX_CURSOR_CHARS})`);
  }
  try {
    if (!/^[A-Za-z0-9_-]*={0,2}$/.test(cursor) || cursor.replace(/=+$/, "").length % 4 === 1) throw new Refused();
    const raw = Buffer.from(cursor, "base64url");
    const outside = raw.toString("latin1").replace(/"(?:[^"\\]|\\[^\n])*"/g, "");
    if ((outside.match(/[[\]{}]/g) ?? []).length > MAX_BRACKETS) throw new Refused();
    const document = parseJson(STRICT_UTF8.decode(raw));
    if (!(document instanceof Map)) throw new Refused();
    if (equalsInt(document.get("v"), 1)) {
      const [now, server, places] = [field(document, "t"), field(document, "s"), positions(field(document, "q"))];
      if (!(isInt(now) && isInt(server) && now >= 0n && server >= 0n)) throw new Refused();
      return { nowNs: now, serverMs: server, positions: places, epoch: LEGACY_EPOCH, prefix: null, queue: null, group: null, window: null };
    }
    if (!equalsInt(document.get("v"), CURSOR_VERSION)) throw new Refused();
    const [now, server, places] = [field(document, "t"), field(document, "s"), positions(field(document, "q"))];
    const [epoch, filter] = [field(document, "e"), field(document, "f")];
    if (!(Array.isArray(filter) && filter.length === 3)) throw new Refused();
    const [prefix, queue, group] = filter;
    if (!(isInt(now) && isInt(server) && now >= 0n && server >= 0n)) throw new Refused();
    if (!(epoch === null || typeof epoch === "string")) throw new Refused();
    if (![prefix, queue, group].every((name) => name === null || typeof name === "string")) throw new Refused();
    const window = document.has("w") ? parseWindow(document.get("w") as Json) : null;
    return { nowNs: now, serverMs: server, positions: places, epoch, prefix: prefix as string | null, queue: queue as string | null, group: group as string | null, window };
  } catch (error) {
    if (error instanceof Refused || error instanceof TypeError) throw notOurs(cursor);
    throw error;
  }
}

function forged(): RangeError {
  return new RangeError("cursor is not one that changes() returned: its window is forged");
}

/** A RangeError naming `cursor` unless it was made under this prefix for exactly this filter,
 * and every place it holds is one of that filter, near where it was read. */
export function checkCursorFilter(cursor: EventCursor, keys: Keyspace, queue: string | null, group: string | null): void {
  if (cursor.epoch === LEGACY_EPOCH) return; // an earlier release's cursor names no filter: checkEpoch asks a resync
  if (cursor.prefix !== null && cursor.prefix !== keys.prefix) {
    throw new RangeError(`cursor was returned under the prefix ${JSON.stringify(cursor.prefix)}, not ${JSON.stringify(keys.prefix)}: take a fresh one (changes())`);
  }
  if (cursor.queue !== queue || cursor.group !== group) {
    throw new RangeError(
      `cursor was returned for queue=${JSON.stringify(cursor.queue)} group=${JSON.stringify(cursor.group)}, not for queue=${JSON.stringify(queue)} group=${JSON.stringify(group)}: a cursor goes on only with the filter it was made for; take a fresh one (changes()) for this filter`,
    );
  }
  const places = new Map(cursor.positions);
  const w = cursor.window;
  if (w !== null) for (const [q, place] of w.recent) places.set(q, place);
  if (cursor.queue !== null && [...places.keys()].some((q) => q !== cursor.queue)) {
    throw new RangeError(`cursor is not one that changes() returned: it holds places in logs of other queues than queue=${JSON.stringify(cursor.queue)}`);
  }
  // A place is kept only within LOG_LAG_MS of the cursor's read: an older one would replay a whole log.
  const lag = BigInt(2 * LOG_LAG_MS);
  const low = cursor.serverMs - lag;
  let high = cursor.serverMs + lag;
  if (w !== null) {
    if (w.serverMs + lag > high) high = w.serverMs + lag;
    if (w.serverMs < cursor.serverMs || w.nowNs < cursor.nowNs) throw forged();
    if (w.log !== null) {
      if (w.log[0] && queue !== null && w.log[0] !== queue) throw forged();
      if (w.log[1]) places.set("", w.log[1]);
    }
    if (w.derived !== null && w.derived[0]) {
      let gk: GroupKeys | null = null;
      try {
        gk = keys.fromMember(w.derived[0]);
      } catch (error) {
        if (!(error instanceof PresenceDataError)) throw error;
      }
      if (gk === null || (queue !== null && gk.queue !== queue) || (group !== null && gk.group !== group)) throw forged();
    }
  }
  for (const place of places.values()) {
    const ms = streamId(place)[0];
    if (ms < low || ms > high) throw new RangeError("cursor is not one that changes() returned: it holds a place in a log far from where it was read");
  }
}

/** A RangeError naming `cursor` unless its instants are ones a read could have made: its
 * server ms at most LOG_LAG_MS ahead of the server clock, its instants no later than that or
 * than the caller's explicit `nowNs`. */
export function checkCursorClock(cursor: EventCursor, serverMs: bigint, nowNs: bigint | null): void {
  const w = cursor.window;
  const madeMs = w === null || cursor.serverMs > w.serverMs ? cursor.serverMs : w.serverMs;
  if (madeMs > serverMs + BigInt(LOG_LAG_MS)) {
    throw new RangeError(`cursor is not one that changes() returned: its position (${madeMs} ms) is ahead of the server clock (${serverMs} ms)`);
  }
  const clock = (serverMs + BigInt(LOG_LAG_MS)) * NS_PER_MS;
  const latest = nowNs !== null && nowNs > clock ? nowNs : clock;
  const instant = w === null || cursor.nowNs > w.nowNs ? cursor.nowNs : w.nowNs;
  if (instant > latest) {
    throw new RangeError(`cursor is not one that changes() returned: its instant (${instant} ns) is ahead of the server clock (${serverMs} ms) and of nowNs (${nowNs ?? "none"})`);
  }
}

const FRESH = "take a fresh snapshot() and a fresh cursor (changes())";

/** PresenceResyncRequired unless the data a cursor was read from is still there (its epoch
 * marker is the one Redis holds). */
export function checkEpoch(cursor: EventCursor, epoch: string | null): void {
  if (cursor.epoch === LEGACY_EPOCH) {
    throw new PresenceResyncRequired(`this cursor was made by an earlier release (without the epoch marker): ${FRESH}`, "legacy");
  }
  if (cursor.epoch !== null && cursor.epoch !== epoch) {
    const lost = epoch === null ? "is gone" : "changed";
    throw new PresenceResyncRequired(
      `Redis lost the data this cursor was read from (its epoch marker ${lost}: a restart without persistence, a flush, or a failover to an empty node): ${FRESH}`,
      "epoch",
    );
  }
}

/** A positive integer `limit`, at most MAX_CHANGES_LIMIT. */
export function checkChangesLimit(value: unknown): number {
  if (typeof value !== "number") throw new TypeError(`limit must be a number, got ${value === null ? "null" : typeof value}`);
  if (!Number.isInteger(value) || value < 1 || value > MAX_CHANGES_LIMIT) throw new RangeError(`limit must be an integer in [1, ${MAX_CHANGES_LIMIT}], got ${String(value)}`);
  return value;
}

/** A positive `intervalMs`, at most an hour. */
export function checkIntervalMs(value: unknown): number {
  if (typeof value !== "number") throw new TypeError(`intervalMs must be a number, got ${value === null ? "null" : typeof value}`);
  if (!(value > 0 && value <= 3_600_000)) throw new RangeError(`intervalMs must be in (0, 3600000], got ${String(value)}`);
  return value;
}

/** The groups a follower holds consumers of (from its snapshots and events), and the check
 * that they are still there: a group whose keys (or place in the index) are gone without the
 * events that empty a group was lost, and the follower must resync (the Python package's
 * `HeldGroups`: a group found gone is lost only when still gone at the next check). */
export class HeldGroups {
  held = new Map<string, { queue: string; group: string; consumers: Set<string> }>();
  suspects = new Map<string, [number, bigint]>();
  private checks = 0;
  private turn = 0;

  constructor(
    readonly clustered: boolean,
    readonly indexed: boolean,
  ) {}

  private static key(queue: string, group: string): string {
    return JSON.stringify([queue, group]);
  }

  /** A snapshot: the groups of its rows, nothing else. */
  start(rows: { queue: string; group: string; consumer: string }[]): void {
    this.held = new Map();
    this.suspects = new Map();
    for (const row of rows) this.add(row.queue, row.group, row.consumer);
  }

  private add(queue: string, group: string, consumer: string): void {
    const key = HeldGroups.key(queue, group);
    let found = this.held.get(key);
    if (found === undefined) this.held.set(key, (found = { queue, group, consumers: new Set() }));
    found.consumers.add(consumer);
  }

  /** An event: a consumer that left or was pruned is not held; any other is. */
  apply(event: PresenceEvent): void {
    const key = HeldGroups.key(event.queue, event.group);
    if (event.kind === "left" || event.kind === "pruned") {
      const found = this.held.get(key);
      if (found !== undefined) {
        found.consumers.delete(event.consumer);
        if (!found.consumers.size) {
          this.held.delete(key);
          this.suspects.delete(key);
        }
      }
    } else this.add(event.queue, event.group, event.consumer);
  }

  get size(): number {
    return this.held.size;
  }

  /** The groups to check after this read (`[queue, group]`): at most `most`, suspects first. */
  due(most: number): [string, string][] {
    const name = (key: string): [string, string] => {
      const found = this.held.get(key) as { queue: string; group: string };
      return [found.queue, found.group];
    };
    const out = [...this.suspects.keys()].filter((key) => this.held.has(key)).slice(0, most);
    const groups = [...this.held.keys()].filter((key) => !this.suspects.has(key));
    if (groups.length && out.length < most) {
      const start = this.turn % groups.length;
      const turn = [...groups.slice(start), ...groups.slice(0, start)].slice(0, most - out.length);
      this.turn = start + turn.length;
      out.push(...turn);
    }
    return out.map(name);
  }

  /** What Redis said of the groups `due` at the read of server ms `ms` (`gone`: the key of
   * `[queue, group]` -> "keys" or "index"): PresenceResyncRequired when a group held since
   * the last check is still gone. */
  check(due: [string, string][], gone: Map<string, "keys" | "index">, ms: bigint): void {
    this.checks += 1;
    for (const [queue, group] of due) {
      const key = HeldGroups.key(queue, group);
      if (!gone.has(key)) this.suspects.delete(key);
    }
    for (const [key, what] of gone) {
      const found = this.held.get(key);
      if (found === undefined) continue;
      if (!this.suspects.has(key)) this.suspects.set(key, [this.checks, ms]);
      const [first, firstMs] = this.suspects.get(key) as [number, bigint];
      let settle = this.clustered ? LOG_LAG_MS : 0;
      if (what === "index" && this.clustered) settle += INDEX_MARK_MS;
      if (first < this.checks && ms - firstMs >= BigInt(settle)) {
        const where = what === "keys" ? "its keys are gone" : "it is no longer in the index of groups";
        throw new PresenceResyncRequired(
          `Redis lost consumers this reader holds: the group ${JSON.stringify(found.queue)} / ${JSON.stringify(found.group)}, ${where}, without the events that empty a group (keys deleted by hand, or data lost): ${FRESH}`,
          "vanished",
        );
      }
    }
  }

  /** The key `check` expects in `gone` for a group. */
  static of(queue: string, group: string): string {
    return HeldGroups.key(queue, group);
  }
}

/** The key layout and the name encoding of protocol version 2 (docs/protocol.md, sections 2
 * and 3), spelled exactly as the Python package's redis_presence/keys.py spells them. */
import { PresenceDataError } from "./errors";

/** The wire protocol version this client speaks and claims (`P:protocol`). */
export const PROTOCOL_VERSION = "2";

/** The versions of `P:protocol` this client accepts (missing too): a prefix of version 1,
 * which version-1 clients still write, is written in their format by the scripts (mode 1)
 * until `redis-presence migrate` moves it to 2. */
export const ACCEPTED_VERSIONS: readonly string[] = ["1", "2"];

const EXTRA = /[!'()*]/g;

/** Percent-encoded UTF-8, keeping only `A-Z a-z 0-9 - . _ ~`: `encodeURIComponent`, which
 * leaves `! ' ( ) *` as they are, plus those five. */
export function encodeName(name: string): string {
  return encodeURIComponent(name).replace(EXTRA, (c) => "%" + c.charCodeAt(0).toString(16).toUpperCase());
}

/** The name an encoded spelling stands for, or null when it is not the canonical spelling
 * of a name (lowercase hex, an unescaped `!`, bytes that are not UTF-8). */
export function decodeName(encoded: string): string | null {
  let name: string;
  try {
    name = decodeURIComponent(encoded);
  } catch {
    return null;
  }
  return name !== "" && encodeName(name) === encoded ? name : null;
}

/** The keys of one (queue, group); `data` is also its member in the index. */
export interface GroupKeys {
  queue: string;
  group: string;
  hb: string;
  data: string;
  mark: string;
  ttl: string;
  events: string;
  meta: string;
  stuck: string;
}

/** Key names under one prefix. */
export class Keyspace {
  readonly groups: string;
  readonly events: string;
  readonly ttl: string;
  readonly stuck: string;
  readonly expects: string;
  readonly protocol: string;
  /** The fleet indexes (standalone): groups by their newest beat's microsecond, and by a
   * lower bound of their oldest beat's (the scripts keep them). */
  readonly newest: string;
  readonly oldest: string;
  /** The fleet index of the groups' own TTLs (standalone): each group's hash key scored by
   * its `ttl` setting in ms (setting.lua keeps it with the setting). */
  readonly ttls: string;
  /** The epoch marker (docs/protocol.md): in the slot of `events`, written by the scripts. */
  readonly epoch: string;

  constructor(readonly prefix: string) {
    if (!prefix || /[{}*?[\]\\ \t\r\n\0]/.test(prefix)) {
      throw new TypeError(`prefix must be printable, without braces, glob characters or whitespace: ${JSON.stringify(prefix)}`);
    }
    this.groups = `${prefix}:groups`;
    this.events = `${prefix}:events`;
    this.ttl = `${prefix}:ttl`;
    this.stuck = `${prefix}:stuck`;
    this.expects = `${prefix}:expects`;
    this.protocol = `${prefix}:protocol`;
    this.newest = `${prefix}:newest`;
    this.oldest = `${prefix}:oldest`;
    this.ttls = `${prefix}:ttls`;
    this.epoch = `${prefix}:{${this.events}}:epoch`;
  }

  group(queue: string, group: string): GroupKeys {
    const tag = `${this.prefix}:{${encodeName(queue)}}`;
    const base = `${tag}:${encodeName(group)}`;
    return {
      queue,
      group,
      hb: `${base}:hb`,
      data: `${base}:c`,
      mark: `${base}:ix`,
      ttl: `${base}:ttl`,
      events: `${tag}:events`,
      meta: `${base}:m`,
      stuck: `${base}:stuck`,
    };
  }

  queueExpect(queue: string): string {
    return `${this.prefix}:{${encodeName(queue)}}:expect`;
  }

  /** The queue of a member of `P:expects`, or null when it is not one a client wrote. */
  queueOfExpect(key: string): string | null {
    const head = `${this.prefix}:{`;
    const tail = "}:expect";
    if (!key.startsWith(head) || !key.endsWith(tail)) return null;
    const queue = decodeName(key.slice(head.length, -tail.length));
    return queue !== null && this.queueExpect(queue) === key ? queue : null;
  }

  /** The `ZRANGEBYLEX` bounds of one queue's index members. */
  queueRange(queue: string): [string, string] {
    const tag = `${this.prefix}:{${encodeName(queue)}}:`;
    return [`[${tag}`, `(${tag.slice(0, -1)};`];
  }

  /** The keys of the group an index member names; a foreign member is a data error. */
  fromMember(member: string): GroupKeys {
    const head = `${this.prefix}:{`;
    const rest = member.startsWith(head) ? member.slice(head.length) : "";
    const at = rest.indexOf("}:");
    const queue = at > 0 ? decodeName(rest.slice(0, at)) : null;
    const tail = at > 0 ? rest.slice(at + 2) : "";
    const group = tail.endsWith(":c") ? decodeName(tail.slice(0, -2)) : null;
    const keys = queue !== null && group !== null ? this.group(queue, group) : null;
    if (keys === null || keys.data !== member) {
      throw new PresenceDataError(
        `the index ${this.groups} holds a member this package did not write: '${member.slice(0, 80)}'`,
      );
    }
    return keys;
  }
}

/** Compare two strings by Unicode code point (the byte order of their UTF-8), which is the
 * protocol's order of names; JavaScript's `<` compares UTF-16 code units instead. */
export function byCodePoint(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, "utf8"), Buffer.from(b, "utf8"));
}

/** The canonical metadata spelling: JSON, keys in code-point order, no spaces, UTF-8 as is
 * (Python's `json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)`), of a
 * checked mapping. Written pair by pair: an object would put integer-like keys ("10", "9")
 * first in numeric order and would take a `__proto__` key for its prototype. */
export function encodeMeta(meta: Readonly<Record<string, string>> | ReadonlyMap<string, string>): string {
  const entries: [string, string][] = meta instanceof Map ? [...(meta as ReadonlyMap<string, string>)] : Object.entries(meta);
  entries.sort(([a], [b]) => byCodePoint(a, b));
  return "{" + entries.map(([key, value]) => `${JSON.stringify(key)}:${JSON.stringify(value)}`).join(",") + "}";
}

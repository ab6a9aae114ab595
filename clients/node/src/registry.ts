/** `PresenceRegistry`: heartbeats, reads and prunes of one prefix on a standalone Redis, in
 * the wire protocol of docs/protocol.md, with the repository's own Lua scripts. */
import type { Redis } from "ioredis";
import { PresenceBatchError, PresenceDataError, PresenceError, PresenceMetaError, PresenceProtocolError, refusal, translate } from "./errors";
import { byCodePoint, encodeMeta, type GroupKeys, Keyspace, PROTOCOL_VERSION } from "./keys";
import { type ScriptName, script } from "./scripts";
import { checkLease, checkMeta, checkMinActive, checkName, checkNs, checkTtl, MAX_MIN_ACTIVE, MAX_TTL_MS, type Meta } from "./validation";

export const DEFAULT_PRESENCE_TTL_MS = 30_000;
export const DEFAULT_STUCK_AFTER_MS = 300_000;
export const DEFAULT_MAX_FUTURE_MS = 10_000;
export const DEFAULT_EVENTS_KEPT = 10_000;
export const EVENT_LOG_TTL_MS = 86_400_000;
export const INDEX_MARK_MS = 60_000;
export const TTL_CACHE_MS = 10_000;
const MAX_BEATS_PER_CALL = 250;
const GROUPS_PER_PAGE = 100;
const CONSUMERS_PER_CALL = 500;
const PRUNE_GROUPS_PER_CALL = 10;
const PRUNE_BUDGET = 100;
const NS_PER_MS = 1_000_000n;
const STORED = /^(\d{1,19}) (\d{1,19}) (\d{1,19})(?: (\d{1,19}))?$/;

/** An instant in nanoseconds since the epoch: a bigint, or its decimal string. */
export type Ns = bigint | string;

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
}

/** What a fleet read set aside instead of failing (docs/protocol.md, section 9). */
export interface Skipped {
  key: string;
  reason: string;
}

/** A fleet read's answer: its rows, and the keys it set aside. */
export type WithSkipped<T> = T[] & { skipped: Skipped[] };

export interface GroupCount {
  queue: string;
  group: string;
  active: number;
}

export interface GroupPresence {
  queue: string;
  group: string;
  active: number;
  stale: number;
  expired: number;
  minActive: number | null;
  below: boolean;
}

/** `[queue, group, consumer, leaseCount]` (the lease count defaults to 0). */
export type Beat = [string, string, string, number?];

export interface ReadOptions {
  nowNs?: Ns;
  /** The TTL to classify with; by default each group's shared TTL (docs/protocol.md, 8). */
  ttlMs?: number;
  queue?: string;
  group?: string;
}

export interface SnapshotOptions extends ReadOptions {
  stuckAfterMs?: number;
  withMeta?: boolean;
}

export interface RegistryOptions {
  prefix?: string;
  /** The clock guard: refuse a beat whose explicit `nowNs` is further ahead of the server
   * clock (null: no guard). */
  maxFutureMs?: number | null;
  eventsKept?: number;
  /** Called with each key a fleet read set aside (default: `process.emitWarning`). */
  onSkipped?: (skipped: Skipped) => void;
}

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

function storedSetting(key: string, value: string | null, max = MAX_TTL_MS): number | null {
  if (value === null) return null;
  if (!/^\d{1,13}$/.test(value) || Number(value) < 1 || Number(value) > max) {
    throw new PresenceDataError(`${key} holds a TTL this package did not write: '${value.slice(0, 40)}'`);
  }
  return Number(value);
}

function quoted(text: string): string {
  // eslint-disable-next-line no-control-regex -- control characters are what it escapes
  return '"' + text.slice(0, 80).replace(/[\x00-\x1f\x7f"\\]/g, (c) => "\\x" + c.charCodeAt(0).toString(16).padStart(2, "0")) + '"';
}

interface Stored {
  registered: bigint;
  heartbeat: bigint;
  lease: number;
  progress: bigint | null;
}

function parseStored(gk: GroupKeys, consumer: string, value: string): Stored {
  const found = STORED.exec(value);
  if (found === null) {
    throw new PresenceDataError(
      `redis-presence key ${gk.data} field ${quoted(consumer)} holds a value this package did not write: ${quoted(value)}`,
    );
  }
  return {
    registered: BigInt(found[1]),
    heartbeat: BigInt(found[2]),
    lease: Number(found[3]),
    progress: found[4] === undefined ? null : BigInt(found[4]),
  };
}

function decodeMeta(gk: GroupKeys, consumer: string, value: string): Record<string, string> {
  try {
    const meta: unknown = JSON.parse(value);
    if (typeof meta === "object" && meta !== null && !Array.isArray(meta) && Object.values(meta).every((v) => typeof v === "string")) {
      return meta as Record<string, string>;
    }
  } catch {
    // a data error, below
  }
  throw new PresenceDataError(`redis-presence key ${gk.meta} field '${consumer.slice(0, 80)}' holds metadata this package did not write`);
}

function withSkipped<T>(items: T[], skipped: Skipped[]): WithSkipped<T> {
  const out = items as WithSkipped<T>;
  out.skipped = unique(skipped);
  return out;
}

function unique(skipped: Skipped[]): Skipped[] {
  const seen = new Map<string, Skipped>();
  for (const item of skipped) if (!seen.has(item.key)) seen.set(item.key, item);
  return [...seen.values()];
}

function groupName(gk: GroupKeys): string {
  return `${gk.queue}/${gk.group}`;
}

/** Heartbeats, reads and prunes of one prefix on a standalone Redis server (ioredis). */
export class PresenceRegistry {
  readonly keys: Keyspace;
  readonly maxFutureMs: number | null;
  readonly eventsKept: number;
  private readonly onSkipped: (skipped: Skipped) => void;
  private readonly settings = new Map<string, { value: number | null; at: number }>();
  private protocolAt: number | null = null;
  private readonly beatCalls = new Map<string, { head: (string | number)[]; count: number; until: number }>();
  private claimed = false;

  constructor(
    readonly redis: Redis,
    options: RegistryOptions = {},
  ) {
    this.keys = new Keyspace(options.prefix ?? "presence");
    this.maxFutureMs = options.maxFutureMs === undefined ? DEFAULT_MAX_FUTURE_MS : options.maxFutureMs;
    this.eventsKept = options.eventsKept ?? DEFAULT_EVENTS_KEPT;
    this.onSkipped =
      options.onSkipped ??
      ((item) => process.emitWarning(`redis-presence set aside ${item.key}: ${item.reason}`, "PresenceDataWarning"));
  }

  // -- writes ------------------------------------------------------------------------

  /** Record or refresh one consumer: one EVALSHA of heartbeat.lua (after a read of the
   * group's shared TTL, at most once every TTL_CACHE_MS). */
  async heartbeat(queue: string, group: string, consumer: string, leaseCount = 0, options: { nowNs?: Ns } = {}): Promise<void> {
    checkName("queue", queue);
    checkName("group", group);
    checkName("consumer", consumer);
    const lease = checkLease(leaseCount);
    const now = options.nowNs === undefined ? "" : checkNs(options.nowNs);
    // The hot path: a group's KEYS and shared TTL, kept ready while the TTL may be trusted,
    // under a key that tells every pair of names apart (the queue's length first: names may
    // hold any character).
    const cached = `${queue.length}:${queue}${group}`;
    let ready = this.beatCalls.get(cached);
    if (ready === undefined || performance.now() > ready.until) {
      const gk = this.keys.group(queue, group);
      const [ttl] = await this.sharedTtls([gk]);
      const until = Math.min(...[this.keys.ttl, gk.ttl].map((key) => this.settings.get(key)?.at ?? 0)) + TTL_CACHE_MS;
      if (this.beatCalls.size >= 4096) this.beatCalls.clear();
      const keys = this.writeKeys([gk]);
      ready = { head: [...keys, ttl, this.eventsKept, EVENT_LOG_TTL_MS, this.guard()], count: keys.length, until };
      this.beatCalls.set(cached, ready);
    }
    await this.call("heartbeat", ready.head, [now, consumer, lease], ready.count);
    if (!this.claimed) await this.claim();
  }

  /** After this client's first beat that wrote: claim the prefix for protocol version 1
   * (`SET NX`; once, never for a refused beat). */
  private async claim(): Promise<void> {
    await this.redis.set(this.keys.protocol, PROTOCOL_VERSION, "NX");
    this.claimed = true;
  }

  /** Write many beats, each atomically, in one call of heartbeat_many.lua per 250 beats;
   * returns how many. Bad data costs only the beats it spoils (`PresenceBatchError`). */
  async heartbeatMany(beats: Beat[], options: { nowNs?: Ns } = {}): Promise<number> {
    const checked = beats.map(([q, g, c, lease]) => [checkName("queue", q), checkName("group", g), checkName("consumer", c), checkLease(lease ?? 0)] as const);
    if (checked.length === 0) return 0;
    const now = checkNs(options.nowNs);
    const groups = new Map<string, GroupKeys>();
    for (const [q, g] of checked) {
      const gk = this.keys.group(q, g);
      if (!groups.has(gk.data)) groups.set(gk.data, gk);
    }
    const every = [...groups.values()];
    const ttls = new Map(every.map((gk, i) => [gk.data, i]));
    const ttlValues = await this.sharedTtls(every);
    const failed = new Map<string, PresenceError>();
    const unwritten: [string, string, string][] = [];
    const replies: Promise<unknown[] | PresenceError>[] = [];
    const calls: { names: GroupKeys[]; batch: (typeof checked)[number][] }[] = [];
    for (let start = 0; start < checked.length; start += MAX_BEATS_PER_CALL) {
      const batch = checked.slice(start, start + MAX_BEATS_PER_CALL);
      const numbers = new Map<string, number>();
      const names: GroupKeys[] = [];
      const tail: (string | number)[] = [];
      for (const [q, g, c, lease] of batch) {
        const gk = this.keys.group(q, g);
        let number = numbers.get(gk.data);
        if (number === undefined) {
          number = names.push(groups.get(gk.data) as GroupKeys);
          numbers.set(gk.data, number);
        }
        tail.push(number, c, lease, 0, "");
      }
      const args = [now, INDEX_MARK_MS, this.eventsKept, EVENT_LOG_TTL_MS, this.guard(), ...names.map((gk) => ttlValues[ttls.get(gk.data) as number]), ...tail];
      calls.push({ names, batch });
      replies.push(
        this.call("heartbeat_many", this.writeKeys(names), args).then(
          (reply) => reply as unknown[],
          (error: unknown) => {
            if (error instanceof PresenceError) return error;
            throw error;
          },
        ),
      );
    }
    const answers = await Promise.all(replies);
    answers.forEach((reply, i) => {
      const { names, batch } = calls[i];
      if (reply instanceof PresenceError) {
        for (const gk of names) if (!failed.has(groupName(gk))) failed.set(groupName(gk), reply);
        for (const [q, g, c] of batch) unwritten.push([q, g, c]);
        return;
      }
      const refused = reply.slice(2) as (string | number)[];
      const whole = new Set<string>();
      const spoilt = new Set<string>();
      for (let j = 0; j + 2 < refused.length; j += 3) {
        const gk = names[Number(refused[j]) - 1];
        const consumer = String(refused[j + 1]);
        if (!failed.has(groupName(gk))) failed.set(groupName(gk), refusal(String(refused[j + 2])));
        if (consumer === "") whole.add(gk.data);
        else spoilt.add(`${gk.data}\n${consumer}`);
      }
      for (const [q, g, c] of batch) {
        const data = this.keys.group(q, g).data;
        if (whole.has(data) || spoilt.has(`${data}\n${c}`)) unwritten.push([q, g, c]);
      }
    });
    if (unwritten.length < checked.length && !this.claimed) await this.claim();
    if (unwritten.length === checked.length && answers.every((r) => r instanceof PresenceError)) throw answers[0];
    if (failed.size > 0) {
      throw new PresenceBatchError(
        `${failed.size} group(s) refused (${[...failed.keys()].join(", ")}); ${checked.length - unwritten.length} beat(s) written`,
        failed,
        checked.length - unwritten.length,
        unwritten,
      );
    }
    return checked.length;
  }

  /** Forget one consumer (graceful shutdown) and log that it left; whether it was tracked. */
  async deregister(queue: string, group: string, consumer: string, options: { nowNs?: Ns } = {}): Promise<boolean> {
    const gk = this.keys.group(checkName("queue", queue), checkName("group", group));
    checkName("consumer", consumer);
    const reply = (await this.call("deregister", this.writeKeys([gk]), [consumer, checkNs(options.nowNs), this.eventsKept, EVENT_LOG_TTL_MS])) as number[];
    return Number(reply[0]) === 1;
  }

  /** Store a consumer's metadata (`checkMeta`: a plain object or a Map of strings; an empty
   * one removes it), written only when it changed; whether the consumer is tracked (an
   * untracked one's is not stored). */
  async describe(queue: string, group: string, consumer: string, meta: Meta): Promise<boolean> {
    const gk = this.keys.group(checkName("queue", queue), checkName("group", group));
    checkName("consumer", consumer);
    const entries = checkMeta(meta);
    const value = entries.length ? encodeMeta(new Map(entries)) : "";
    const reply = (await this.call("describe", this.writeKeys([gk]), [1, consumer, value])) as number[];
    return Number(reply[0]) !== 0;
  }

  /** Remove exactly the consumers a snapshot at the same `nowNs`/`ttlMs` calls expired, and
   * log them as pruned; returns how many. */
  async pruneExpired(options: ReadOptions = {}): Promise<number> {
    const ttlMs = options.ttlMs === undefined ? undefined : checkTtl(options.ttlMs);
    const filter = this.filter(options);
    const now = (await this.now(options.nowNs)).toString();
    let removed = 0;
    const failed = new Map<string, PresenceError>();
    const left: [string, string, string][] = [];
    const skipped: Skipped[] = [];
    for await (const [groups, ttls] of this.pages(filter, ttlMs, skipped)) {
      const ttlOf = new Map(groups.map((gk, i) => [gk.data, ttls[i]]));
      let parts: [GroupKeys[], number, number][] = [];
      for (let i = 0; i < groups.length; i += PRUNE_GROUPS_PER_CALL) parts.push([groups.slice(i, i + PRUNE_GROUPS_PER_CALL), 0, 0]);
      while (parts.length) {
        const replies = await Promise.all(
          parts.map(([part, below, ties]) =>
            this.call("prune", this.writeKeys(part), [now, PRUNE_BUDGET, below, ties, this.eventsKept, EVENT_LOG_TTL_MS, ...part.map((gk) => ttlOf.get(gk.data) as number)]),
          ),
        );
        const goingOn: [GroupKeys[], number, number][] = [];
        replies.forEach((raw, i) => {
          const reply = raw as unknown[];
          const part = parts[i][0];
          removed += Number(reply[0]);
          const stop = Number(reply[1]);
          const refused = reply.slice(6) as (string | number)[];
          for (let j = 0; j + 2 < refused.length; j += 3) {
            const gk = part[Number(refused[j]) - 1];
            if (!failed.has(groupName(gk))) failed.set(groupName(gk), refusal(String(refused[j + 2])));
            if (String(refused[j + 1]) !== "") left.push([gk.queue, gk.group, String(refused[j + 1])]);
          }
          if (stop) goingOn.push([part.slice(stop - 1), Number(reply[2]), Number(reply[3])]);
        });
        parts = goingOn;
      }
    }
    if (filter.queue === undefined) {
      const serverMs = (await this.now(undefined)) / NS_PER_MS;
      const before = serverMs - BigInt(EVENT_LOG_TTL_MS);
      for (;;) {
        const old = await this.redis.zrangebyscore(this.keys.events, "-inf", `(${before}`, "LIMIT", 0, GROUPS_PER_PAGE);
        if (!old.length) break;
        await this.redis.zrem(this.keys.events, ...old);
      }
    }
    this.report(skipped);
    if (failed.size > 0) {
      throw new PresenceBatchError(`${failed.size} group(s) refused (${[...failed.keys()].join(", ")}); ${removed} consumer(s) pruned`, failed, removed, left);
    }
    return removed;
  }

  // -- reads ---------------------------------------------------------------------------

  /** Every tracked consumer (of one queue, or one group), ordered by (queue, group,
   * consumer) in code-point order, expired ones too; `skipped` lists what it set aside. */
  async snapshot(options: SnapshotOptions = {}): Promise<WithSkipped<ConsumerPresence>> {
    const ttlMs = options.ttlMs === undefined ? undefined : checkTtl(options.ttlMs);
    const stuckMs = options.stuckAfterMs === undefined ? undefined : checkTtl(options.stuckAfterMs, "stuckAfterMs");
    const filter = this.filter(options);
    const now = await this.now(options.nowNs);
    const strict = filter.queue !== undefined && filter.group !== undefined;
    const skipped: Skipped[] = [];
    const found: [GroupKeys, ConsumerPresence[]][] = [];
    const unreadable = new Map<string, string>();
    let after: string | null = null;
    do {
      let groups: GroupKeys[];
      [groups, after] = await this.listed(filter.queue, filter.group, after, skipped);
      const sizes = await this.sound(groups, (gk) => this.redis.hlen(gk.data), strict, skipped);
      const kept = groups.filter((_, i) => sizes[i] !== null);
      const ttls = ttlMs === undefined ? await this.sharedTtls(kept) : kept.map(() => ttlMs);
      const stucks = stuckMs === undefined ? await this.sharedStucks(kept) : kept.map(() => stuckMs);
      const tables = await Promise.all(kept.map((gk) => this.readGroup(gk)));
      for (let i = 0; i < kept.length; i++) {
        const gk = kept[i];
        const names = Object.keys(tables[i]).sort(byCodePoint);
        let stored: Stored[];
        try {
          stored = names.map((name) => parseStored(gk, name, tables[i][name]));
        } catch (error) {
          if (strict || !(error instanceof PresenceDataError)) throw error;
          skipped.push({ key: gk.data, reason: error.message });
          continue;
        }
        const metas = options.withMeta ? await this.metas(gk, names, unreadable) : null;
        found.push([gk, names.map((consumer, j) => this.row(gk, consumer, stored[j], now, ttls[i], stucks[i], metas?.[j] ?? {}))]);
      }
    } while (after !== null);
    found.sort(([a], [b]) => byCodePoint(a.queue, b.queue) || byCodePoint(a.group, b.group));
    this.report(skipped);
    const rows = withSkipped(found.flatMap(([, part]) => part), skipped);
    if (unreadable.size) throw new PresenceMetaError(unreadable, rows);
    return rows;
  }

  /** Active consumers per (queue, group), counted server-side; groups without one are left
   * out; sorted by (queue, group) in code-point order. */
  async countActiveByGroup(options: ReadOptions = {}): Promise<WithSkipped<GroupCount>> {
    const ttlMs = options.ttlMs === undefined ? undefined : checkTtl(options.ttlMs);
    const filter = this.filter(options);
    const now = await this.now(options.nowNs);
    const strict = filter.queue !== undefined && filter.group !== undefined;
    const skipped: Skipped[] = [];
    const counts: GroupCount[] = [];
    for await (const [groups, ttls] of this.pages(filter, ttlMs, skipped)) {
      const active = await this.above(groups, ttls.map((ttl) => horizonsNs(now, ttl)[0]), strict, skipped);
      groups.forEach((gk, i) => {
        const n = active[i];
        if (n) counts.push({ queue: gk.queue, group: gk.group, active: n });
      });
    }
    counts.sort((a, b) => byCodePoint(a.queue, b.queue) || byCodePoint(a.group, b.group));
    this.report(skipped);
    return withSkipped(counts, skipped);
  }

  /** How many consumers are tracked, in every state. */
  async size(): Promise<number> {
    const skipped: Skipped[] = [];
    let total = 0;
    let after: string | null = null;
    do {
      let groups: GroupKeys[];
      [groups, after] = await this.listed(undefined, undefined, after, skipped);
      for (const n of await this.sound(groups, (gk) => this.redis.zcard(gk.hb), false, skipped)) total += n ?? 0;
    } while (after !== null);
    this.report(skipped);
    return total;
  }

  /** Every tracked or declared group with its consumers by state and its minimum. */
  async groups(options: { nowNs?: Ns; ttlMs?: number } = {}): Promise<WithSkipped<GroupPresence>> {
    const ttlMs = options.ttlMs === undefined ? undefined : checkTtl(options.ttlMs);
    const now = await this.now(options.nowNs);
    const skipped: Skipped[] = [];
    const declared = await this.declared(skipped);
    const counts = new Map<string, [string, string, number, number, number]>();
    for await (const [groups, ttls] of this.pages({}, ttlMs, skipped)) {
      const cards = await this.sound(groups, (gk) => this.redis.zcard(gk.hb), false, skipped);
      const active = await this.above(groups, ttls.map((ttl) => horizonsNs(now, ttl)[0]), false, skipped);
      const alive = await this.above(groups, ttls.map((ttl) => horizonsNs(now, ttl)[1]), false, skipped);
      groups.forEach((gk, i) => {
        const [card, a, b] = [cards[i], active[i], alive[i]];
        if (card !== null && a !== null && b !== null) counts.set(`${gk.queue}\n${gk.group}`, [gk.queue, gk.group, a, b - a, card - b]);
      });
    }
    for (const [queue, group] of declared) {
      const key = `${queue}\n${group}`;
      if (!counts.has(key)) counts.set(key, [queue, group, 0, 0, 0]);
    }
    const minimum = new Map(declared.map(([q, g, n]) => [`${q}\n${g}`, n]));
    const out = [...counts.values()]
      .sort((a, b) => byCodePoint(a[0], b[0]) || byCodePoint(a[1], b[1]))
      .map(([queue, group, active, stale, expired]) => {
        const minActive = minimum.get(`${queue}\n${group}`) ?? null;
        return { queue, group, active, stale, expired, minActive, below: minActive !== null && active < minActive };
      });
    this.report(skipped);
    return withSkipped(out, skipped);
  }

  // -- shared settings and declared groups ---------------------------------------------

  /** Store the TTL every client of the prefix shares (null forgets it), for the prefix or
   * one group (`queue` and `group`): one call of setting.lua, which checks the protocol
   * version in the same call. */
  async setTtl(ttlMs: number | null, where: { queue?: string; group?: string } = {}): Promise<void> {
    const key = this.settingKey(where, "ttl");
    await this.call("setting", [key, this.keys.protocol], [ttlMs === null ? "" : checkTtl(ttlMs)]);
    this.settings.clear();
    this.beatCalls.clear();
  }

  /** The shared TTL of one group (or the prefix), read now, and where it comes from. */
  async ttlSource(where: { queue?: string; group?: string } = {}): Promise<[number, "group" | "prefix" | "default"]> {
    const key = this.settingKey(where, "ttl");
    const [prefix, own] = await Promise.all([this.redis.get(this.keys.ttl), key === this.keys.ttl ? null : this.redis.get(key)]);
    const mine = storedSetting(key, own);
    if (mine !== null) return [mine, "group"];
    const shared = storedSetting(this.keys.ttl, prefix);
    return shared !== null ? [shared, "prefix"] : [DEFAULT_PRESENCE_TTL_MS, "default"];
  }

  /** Declare that `group` must have at least `minActive` active readers of `queue` (an
   * integer in [0, MAX_MIN_ACTIVE]; one call of expect.lua: the protocol version checked,
   * the declaration and its index written). */
  async expect(queue: string, group: string, minActive = 1): Promise<void> {
    const key = this.keys.queueExpect(checkName("queue", queue));
    checkName("group", group);
    checkMinActive(minActive);
    await this.call("expect", [key, this.keys.expects, this.keys.protocol], [group, minActive]);
  }

  /** Forget a declared group; whether it was declared (one call of unexpect.lua). */
  async unexpect(queue: string, group: string): Promise<boolean> {
    const key = this.keys.queueExpect(checkName("queue", queue));
    const [removed] = (await this.call("unexpect", [key, this.keys.expects, this.keys.protocol], [checkName("group", group)])) as number[];
    return Number(removed) === 1;
  }

  /** Every declared group and its minimum, as `[queue, group, minActive]` sorted (what
   * this client cannot decode set aside and reported). */
  async expected(): Promise<[string, string, number][]> {
    const skipped: Skipped[] = [];
    const out = await this.declared(skipped);
    this.report(skipped);
    return out;
  }

  private async declared(skipped: Skipped[]): Promise<[string, string, number][]> {
    const out: [string, string, number][] = [];
    for (const key of await this.redis.zrange(this.keys.expects, 0, -1)) {
      const queue = this.keys.queueOfExpect(key);
      if (queue === null) {
        skipped.push({ key, reason: `the index ${this.keys.expects} holds a member this package did not write: '${key.slice(0, 80)}'` });
        continue;
      }
      for (const [group, least] of Object.entries(await this.redis.hgetall(key))) {
        if (/^\d{1,15}$/.test(least) && Number(least) <= MAX_MIN_ACTIVE) out.push([queue, group, Number(least)]);
        else skipped.push({ key, reason: `${key} field '${group.slice(0, 80)}' holds a minimum this package did not write: '${least.slice(0, 40)}'` });
      }
    }
    return out.sort((a, b) => byCodePoint(a[0], b[0]) || byCodePoint(a[1], b[1]));
  }

  // -- shared steps --------------------------------------------------------------------

  private guard(): string | number {
    return this.maxFutureMs === null ? "" : this.maxFutureMs;
  }

  private filter(options: ReadOptions): { queue?: string; group?: string } {
    return {
      queue: options.queue === undefined ? undefined : checkName("queue", options.queue),
      group: options.group === undefined ? undefined : checkName("group", options.group),
    };
  }

  private settingKey(where: { queue?: string; group?: string }, kind: "ttl" | "stuck"): string {
    if ((where.queue === undefined) !== (where.group === undefined)) throw new TypeError("a setting is the prefix's (no queue, no group) or one group's (both)");
    if (where.queue === undefined || where.group === undefined) return kind === "ttl" ? this.keys.ttl : this.keys.stuck;
    return this.keys.group(checkName("queue", where.queue), checkName("group", where.group))[kind];
  }

  /** The KEYS of a script: each group's five keys, then the indexes, the epoch marker and
   * the protocol version, which every write script checks before it writes. */
  private writeKeys(groups: GroupKeys[]): string[] {
    const keys = groups.flatMap((gk) => [gk.hb, gk.data, gk.mark, gk.events, gk.meta]);
    return [...keys, this.keys.groups, this.keys.events, this.keys.epoch, this.keys.protocol];
  }

  /** One EVALSHA of `lua/<name>.lua` (SCRIPT LOAD and again after NOSCRIPT). */
  private async call(name: ScriptName, keys: (string | number)[], args: (string | number)[], count = keys.length): Promise<unknown> {
    const found = script(name);
    try {
      return await this.redis.evalsha(found.sha, count, ...keys, ...args);
    } catch (error) {
      if (!(error instanceof Error) || !error.message.startsWith("NOSCRIPT")) throw translate(error);
    }
    await this.redis.script("LOAD", found.source);
    try {
      return await this.redis.evalsha(found.sha, count, ...keys, ...args);
    } catch (error) {
      throw translate(error);
    }
  }

  private async now(nowNs: Ns | undefined): Promise<bigint> {
    if (nowNs !== undefined) return BigInt(checkNs(nowNs));
    const [seconds, micros] = await this.redis.time();
    return (BigInt(seconds) * 1_000_000n + BigInt(micros)) * 1000n;
  }

  /** One page of indexed groups (of one queue, or one group) after `after`, and where the
   * next page starts (null: the last); a foreign member is set aside in `skipped`. */
  private async listed(queue: string | undefined, group: string | undefined, after: string | null, skipped: Skipped[]): Promise<[GroupKeys[], string | null]> {
    if (queue !== undefined && group !== undefined) return [[this.keys.group(queue, group)], null];
    const [first, high] = queue !== undefined ? this.keys.queueRange(queue) : ["-", "+"];
    const low = after !== null ? `(${after}` : first;
    const members = await this.redis.zrangebylex(this.keys.groups, low, high, "LIMIT", 0, GROUPS_PER_PAGE);
    const groups: GroupKeys[] = [];
    for (const member of members) {
      try {
        const gk = this.keys.fromMember(member);
        if (group === undefined || gk.group === group) groups.push(gk);
      } catch (error) {
        if (!(error instanceof PresenceDataError)) throw error;
        skipped.push({ key: member, reason: error.message });
      }
    }
    return [groups, members.length === GROUPS_PER_PAGE ? members[members.length - 1] : null];
  }

  /** Every page of indexed groups (of one queue, or one group) with each group's TTL:
   * `ttlMs`, or its shared one. */
  private async *pages(filter: { queue?: string; group?: string }, ttlMs: number | undefined, skipped: Skipped[]): AsyncGenerator<[GroupKeys[], number[]]> {
    let after: string | null = null;
    do {
      let groups: GroupKeys[];
      [groups, after] = await this.listed(filter.queue, filter.group, after, skipped);
      yield [groups, ttlMs === undefined ? await this.sharedTtls(groups) : groups.map(() => ttlMs)];
    } while (after !== null);
  }

  /** One command per group; a data error (a key of another type) is null in place and its
   * group set aside, unless `strict`. */
  private async sound<T>(groups: GroupKeys[], ask: (gk: GroupKeys) => Promise<T>, strict: boolean, skipped: Skipped[]): Promise<(T | null)[]> {
    const answers = await Promise.allSettled(groups.map(ask));
    return answers.map((answer, i) => {
      if (answer.status === "fulfilled") return answer.value;
      const error = translate(answer.reason);
      if (strict || !(error instanceof PresenceDataError)) throw error;
      skipped.push({ key: groups[i].data, reason: error.message });
      return null;
    });
  }

  private async readGroup(gk: GroupKeys): Promise<Record<string, string>> {
    const size = await this.redis.hlen(gk.data);
    if (size <= CONSUMERS_PER_CALL) return this.redis.hgetall(gk.data);
    const table: Record<string, string> = {};
    let cursor = "0";
    do {
      const [next, flat] = await this.redis.hscan(gk.data, cursor, "COUNT", CONSUMERS_PER_CALL);
      for (let i = 0; i < flat.length; i += 2) table[flat[i]] = flat[i + 1];
      cursor = next;
    } while (cursor !== "0");
    return table;
  }

  private async metas(gk: GroupKeys, names: string[], unreadable: Map<string, string>): Promise<Record<string, string>[]> {
    const out: Record<string, string>[] = [];
    for (let i = 0; i < names.length; i += CONSUMERS_PER_CALL) {
      const part = names.slice(i, i + CONSUMERS_PER_CALL);
      const values = await this.redis.hmget(gk.meta, ...part);
      values.forEach((value, j) => {
        if (value === null) return out.push({});
        try {
          return out.push(decodeMeta(gk, part[j], value));
        } catch (error) {
          if (!(error instanceof PresenceDataError)) throw error;
          unreadable.set(`${gk.queue}/${gk.group}/${part[j]}`, error.message);
          return out.push({});
        }
      });
    }
    return out;
  }

  private row(gk: GroupKeys, consumer: string, s: Stored, now: bigint, ttlMs: number, stuckMs: number, meta: Record<string, string>): ConsumerPresence {
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
    };
  }

  /** Consumers of each group whose last beat is after its horizon (ns): ZCOUNT above the
   * horizon's microsecond, plus those on it whose nanosecond rest is above (read from
   * their stored values); null for a group set aside. */
  private async above(groups: GroupKeys[], horizons: bigint[], strict: boolean, skipped: Skipped[]): Promise<(number | null)[]> {
    const edges = horizons.map((h) => h / 1000n);
    const counts = await this.sound(groups, (gk) => this.redis.zcount(gk.hb, `(${edges[groups.indexOf(gk)]}`, "+inf"), strict, skipped);
    return Promise.all(
      groups.map(async (gk, i) => {
        if (counts[i] === null) return null;
        let n = counts[i] as number;
        for (let offset = 0; ; offset += CONSUMERS_PER_CALL) {
          const ties = await this.redis.zrangebyscore(gk.hb, String(edges[i]), String(edges[i]), "LIMIT", offset, CONSUMERS_PER_CALL);
          if (!ties.length) break;
          const values = await this.redis.hmget(gk.data, ...ties);
          for (let j = 0; j < ties.length; j++) {
            const value = values[j];
            if (value === null) continue;
            let beat: bigint;
            try {
              beat = parseStored(gk, ties[j], value).heartbeat;
            } catch (error) {
              if (strict || !(error instanceof PresenceDataError)) throw error;
              skipped.push({ key: gk.data, reason: error.message });
              return null;
            }
            if (beat > horizons[i]) n += 1;
          }
          if (ties.length < CONSUMERS_PER_CALL) break;
        }
        return n;
      }),
    );
  }

  /** Each group's shared TTL, read with the protocol version when this client has not
   * read them for TTL_CACHE_MS. */
  private async sharedTtls(groups: GroupKeys[]): Promise<number[]> {
    await this.refresh(groups, "ttl");
    const shared = this.settings.get(this.keys.ttl)?.value ?? DEFAULT_PRESENCE_TTL_MS;
    return groups.map((gk) => this.settings.get(gk.ttl)?.value ?? shared);
  }

  private async sharedStucks(groups: GroupKeys[]): Promise<number[]> {
    await this.refresh(groups, "stuck");
    const shared = this.settings.get(this.keys.stuck)?.value ?? DEFAULT_STUCK_AFTER_MS;
    return groups.map((gk) => this.settings.get(gk.stuck)?.value ?? shared);
  }

  private async refresh(groups: GroupKeys[], kind: "ttl" | "stuck"): Promise<void> {
    const limit = performance.now() - TTL_CACHE_MS;
    const wanted = [...new Set([kind === "ttl" ? this.keys.ttl : this.keys.stuck, ...groups.map((gk) => gk[kind])])];
    const due = wanted.filter((key) => (this.settings.get(key)?.at ?? -Infinity) < limit);
    const checking = this.protocolAt === null || this.protocolAt < limit;
    if (!due.length && !checking) return;
    const [version, ...values] = await Promise.all([
      checking ? this.redis.get(this.keys.protocol) : null,
      ...due.map((key) => this.redis.get(key)),
    ]);
    const at = performance.now();
    if (checking) {
      if (version !== null && version !== PROTOCOL_VERSION) {
        throw new PresenceProtocolError(
          `${this.keys.protocol} says this prefix was written by protocol version ${quoted(version.slice(0, 40))}; this package speaks version ${PROTOCOL_VERSION} (docs/protocol.md)`,
        );
      }
      this.protocolAt = at;
    }
    due.forEach((key, i) => this.settings.set(key, { value: storedSetting(key, values[i]), at }));
  }

  private report(skipped: Skipped[]): void {
    for (const item of unique(skipped)) this.onSkipped(item);
  }
}

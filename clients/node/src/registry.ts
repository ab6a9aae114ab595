/** `PresenceRegistry`: heartbeats, reads and prunes of one prefix on a standalone Redis or a
 * Redis Cluster, in the wire protocol (version 2) of docs/protocol.md, with the repository's
 * own Lua scripts. On a cluster the scripts get no standalone tail of KEYS (the indexes, the
 * epoch marker, the protocol version live in other slots) and this client keeps the index
 * of groups by the protocol of docs/protocol.md section 14, as the Python package's
 * redis_presence/plans/index.py does. */
import { randomBytes } from "node:crypto";
import type { Cluster, Redis } from "ioredis";
import { type BeatReply, type BeatSpec, processInstance, type Written } from "./beats";
import { ChangeReader, type Changes, type ChangesOptions, type FollowMessage, type FollowOptions } from "./changes";
import { PresenceBatchError, PresenceDataError, PresenceError, PresenceMetaError, PresenceProtocolError, refusal, translate } from "./errors";
import { ACCEPTED_VERSIONS, byCodePoint, encodeMeta, type GroupKeys, Keyspace, PROTOCOL_VERSION } from "./keys";
import {
  aside,
  type ConsumerPresence,
  decodeMeta,
  groupName,
  groupsSetAside,
  horizonsNs,
  NS_PER_MS,
  pair,
  parseStored,
  quoted,
  row,
  type Skipped,
  storedMinActive,
  type Stored,
  unique,
  type WithSkipped,
  withSkipped,
} from "./replies";
import { type ScriptName, script } from "./scripts";
import { DEFAULT_PRESENCE_TTL_MS, type Kind, prefixError, type Setting, settled, sound, Spoilt, storedSetting } from "./settings";
import { checkCapacity, checkDraining, checkInstance, checkLease, checkMeta, checkMinActive, checkName, checkNs, checkRetention, checkTtl, type Meta } from "./validation";

export { type BeatReply, type BeatSpec, processInstance, type Written } from "./beats";
export { classify, type ConsumerPresence, horizonsNs, type PresenceState, type Skipped, type WithSkipped } from "./replies";
export { DEFAULT_PRESENCE_TTL_MS, DEFAULT_STUCK_AFTER_MS } from "./settings";
export const DEFAULT_MAX_FUTURE_MS = 10_000;
export const DEFAULT_EVENTS_KEPT = 10_000;
export const EVENT_LOG_TTL_MS = 86_400_000;
export const INDEX_MARK_MS = 60_000;
export const TTL_CACHE_MS = 10_000;
const MAX_BEATS_PER_CALL = 250;
const GROUPS_PER_PAGE = 100;
const CONSUMERS_PER_CALL = 500;
const PRUNE_GROUPS_PER_CALL = 100;
/** Automatic removal's default retention, in TTLs (DEFAULT_RETENTION_TTLS of the Python
 * package: docs/concepts.md, "Retention"). */
export const DEFAULT_RETENTION_TTLS = 60;
const PRUNE_BUDGET = 100;

/** An instant in nanoseconds since the epoch: a bigint, or its decimal string. */
export type Ns = bigint | string;

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
  /** Sum of the capacities of the active consumers that report one (null: none does). */
  capacity: number | null;
  /** `capacity` minus those consumers' leases, at least 0 (null: no capacity reported). */
  free: number | null;
  /** Active or stale consumers that say they are draining. */
  draining: number;
  /** Active or stale consumers in conflict (another process beat under their name within
   * the TTL). */
  conflicts: number;
}

/** `[queue, group, consumer, leaseCount]` (the lease count defaults to 0), or a `BeatSpec`
 * (which may also report capacity and draining). */
export type Beat = [string, string, string, number?] | BeatSpec;

/** What a beat reports besides its lease count (protocol version 2): undefined or null keep
 * the stored value. */
export interface BeatOptions {
  nowNs?: Ns;
  /** How many leases the consumer can hold at once (0: not reported). */
  capacity?: number | null;
  /** The consumer is finishing what it holds and takes no more work; a draining beat
   * acknowledges a drain request. */
  draining?: boolean | null;
}

export interface ReadOptions {
  nowNs?: Ns;
  /** The TTL to classify with; by default each group's shared TTL (docs/protocol.md, 8). */
  ttlMs?: number;
  queue?: string;
  group?: string;
}

export interface PruneOptions extends ReadOptions {
  /** Remove only consumers expired for longer than this (ms); 0 (the default): every
   * expired one; null: DEFAULT_RETENTION_TTLS times each group's TTL. */
  retentionMs?: number | null;
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
  /** The instance token every beat carries (1 to 32 of `[A-Za-z0-9_.-]`; default:
   * `processInstance()`, 16 hex digits drawn once per process). A consumer name that beats
   * under two tokens at once is flagged as a conflict. */
  instance?: string;
  /** Whether `redis` is a Redis Cluster client (default: an ioredis `Cluster`, which says
   * `isCluster`, is one; a `Redis` is not). */
  clustered?: boolean;
}

/** What a group row adds from its consumers' stored values (protocol version 2). */
type Capacities = Pick<GroupPresence, "capacity" | "free" | "draining" | "conflicts">;

/** A group's capacity, free slots, draining and conflicting consumers from its stored values
 * at `now` under `ttlMs` (a value this client cannot read counts in none of them: the
 * counts by state, from the sorted set, say what they say of it). */
function capacities(gk: GroupKeys, table: Record<string, string>, now: bigint, ttlMs: number): Capacities {
  let capacity: number | null = null;
  let leases = 0;
  let draining = 0;
  let conflicts = 0;
  for (const [consumer, value] of Object.entries(table)) {
    let r: ConsumerPresence;
    try {
      r = row(gk, consumer, parseStored(gk, consumer, value), now, ttlMs, 1, {});
    } catch (error) {
      if (error instanceof PresenceDataError) continue;
      throw error;
    }
    if (r.state === "expired") continue; // live consumers only, as the Python package's LiveTally
    if (r.state === "active" && r.capacity !== null) {
      capacity = (capacity ?? 0) + r.capacity;
      leases += r.leaseCount;
    }
    if (r.draining) draining += 1;
    if (r.conflict) conflicts += 1;
  }
  return { capacity, free: capacity === null ? null : Math.max(0, capacity - leases), draining, conflicts };
}

/** `items` in parts of one queue each (`queueOf`), in the order each queue first appears,
 * each part in the order of `items`: a cluster's script calls touch one slot each. */
function byQueue<T>(items: readonly T[], queueOf: (item: T) => string): T[][] {
  const parts = new Map<string, T[]>();
  for (const item of items) {
    const queue = queueOf(item);
    const part = parts.get(queue);
    if (part === undefined) parts.set(queue, [item]);
    else part.push(item);
  }
  return [...parts.values()];
}

/** Whether `redis` is an ioredis `Cluster` (which says so in `isCluster`). */
function isCluster(redis: Redis | Cluster): boolean {
  return (redis as { isCluster?: unknown }).isCluster === true;
}

/** Heartbeats, reads and prunes of one prefix on a standalone Redis server or a Redis
 * Cluster (an ioredis `Redis` or `Cluster`). */
export class PresenceRegistry {
  readonly keys: Keyspace;
  /** Whether this registry runs on a Redis Cluster: each script call touches one queue's
   * slot, and this client keeps the indexes, the epoch marker and the protocol claim. */
  readonly clustered: boolean;
  readonly maxFutureMs: number | null;
  readonly eventsKept: number;
  readonly instance: string;
  private readonly onSkipped: (skipped: Skipped) => void;
  private readonly settings = new Map<string, { value: Setting; at: number }>();
  private protocolAt: number | null = null;
  /** The prefix's mode as last read in `P:protocol` ("1" or "2"; "2" before it was read):
   * what a cluster's scripts, which cannot read it, are told. */
  private mode = PROTOCOL_VERSION;
  private readonly beatCalls = new Map<string, { head: (string | number)[]; tail: (string | number)[]; count: number; until: number }>();
  private claimed = false;
  private reader: ChangeReader | null = null;

  constructor(
    readonly redis: Redis | Cluster,
    options: RegistryOptions = {},
  ) {
    this.keys = new Keyspace(options.prefix ?? "presence");
    if (options.clustered !== undefined && typeof options.clustered !== "boolean") throw new TypeError(`clustered must be a boolean, got ${typeof options.clustered}`);
    this.clustered = options.clustered ?? isCluster(redis);
    this.maxFutureMs = options.maxFutureMs === undefined ? DEFAULT_MAX_FUTURE_MS : options.maxFutureMs;
    this.eventsKept = options.eventsKept ?? DEFAULT_EVENTS_KEPT;
    this.instance = options.instance === undefined ? processInstance() : checkInstance(options.instance);
    this.onSkipped =
      options.onSkipped ??
      ((item) => process.emitWarning(`redis-presence set aside ${item.key}: ${item.reason}`, "PresenceDataWarning"));
  }

  // -- writes ------------------------------------------------------------------------

  /** Record or refresh one consumer: one EVALSHA of heartbeat.lua (after a read of the
   * group's shared TTL, at most once every TTL_CACHE_MS; on a cluster, followed by the index
   * writes of a group without a mark or of an event it logged); whether it was asked to
   * drain. */
  async heartbeat(queue: string, group: string, consumer: string, leaseCount = 0, options: BeatOptions = {}): Promise<BeatReply> {
    checkName("queue", queue);
    checkName("group", group);
    checkName("consumer", consumer);
    const lease = checkLease(leaseCount);
    const now = options.nowNs === undefined ? "" : checkNs(options.nowNs);
    const capacity = checkCapacity(options.capacity);
    const draining = checkDraining(options.draining);
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
      // On a cluster the call ends with the mark's lifetime and the mode read with the TTL.
      const tail = this.clustered ? [INDEX_MARK_MS, this.mode] : [];
      ready = { head: [...keys, ttl, this.eventsKept, EVENT_LOG_TTL_MS, this.guard()], tail, count: keys.length, until };
      this.beatCalls.set(cached, ready);
    }
    const reply = await this.call("heartbeat", ready.head, [now, consumer, lease, capacity ?? "", draining === null ? "" : draining ? "1" : "0", this.instance, ...ready.tail], ready.count);
    let drain = reply;
    if (this.clustered) {
      // {list, logged, drain}: step 1 of the index protocol (a group without a mark is listed).
      const [list, logged, asked] = reply as (string | number)[];
      const gk = this.keys.group(queue, group);
      await this.listOnCluster(Number(list) ? [gk] : [], [[gk.events, Number(logged)]]);
      drain = asked;
    }
    if (!this.claimed) await this.claim();
    return { drainRequested: Number(drain) === 1 };
  }

  /** After this client's first beat that wrote: claim the prefix for protocol version 2
   * (`SET NX`: a prefix of version 1 stays 1 until it is migrated; once, never for a
   * refused beat). */
  private async claim(): Promise<void> {
    await this.redis.set(this.keys.protocol, PROTOCOL_VERSION, "NX");
    this.claimed = true;
  }

  /** Write many beats, each atomically, in one call of heartbeat_many.lua per 250 beats;
   * returns how many. Bad data costs only the beats it spoils (`PresenceBatchError`). The
   * drain requests the replies carry: `heartbeatManyWithDrains`. */
  async heartbeatMany(beats: Beat[], options: { nowNs?: Ns } = {}): Promise<number> {
    return (await this.heartbeatManyWithDrains(beats, options)).count;
  }

  /** `heartbeatMany`, answering also which written beats' consumers were asked to drain
   * (a `PresenceBatchError` carries them too, in `drainRequested`). */
  async heartbeatManyWithDrains(beats: Beat[], options: { nowNs?: Ns } = {}): Promise<Written> {
    const checked = beats.map((beat) => {
      if (typeof beat !== "object" || beat === null) throw new TypeError(`beats must hold [queue, group, consumer, leaseCount] lists or BeatSpec objects, got ${beat === null ? "null" : typeof beat}`);
      const [q, g, c, lease, capacity, draining] = Array.isArray(beat) ? [beat[0], beat[1], beat[2], beat[3], undefined, undefined] : [beat.queue, beat.group, beat.consumer, beat.leaseCount, beat.capacity, beat.draining];
      return [checkName("queue", q), checkName("group", g), checkName("consumer", c), checkLease(lease ?? 0), checkCapacity(capacity), checkDraining(draining)] as const;
    });
    const drainRequested: [string, string, string][] = [];
    if (checked.length === 0) return { count: 0, drainRequested };
    const now = checkNs(options.nowNs);
    const groups = new Map<string, GroupKeys>();
    for (const [q, g] of checked) {
      const gk = this.keys.group(q, g);
      if (!groups.has(gk.data)) groups.set(gk.data, gk);
    }
    const every = [...groups.values()];
    // A group whose shared TTL cannot be read is refused (its beats unwritten), and every
    // other group written: bad data costs only what it spoils.
    const ttlOf = new Map<string, number>();
    const failed = new Map<string, PresenceError>();
    (await this.settingsOf(every, undefined, null)).ttls.forEach((ttl, i) => {
      if (ttl instanceof Spoilt) failed.set(groupName(every[i]), ttl.error());
      else ttlOf.set(every[i].data, ttl);
    });
    const unwritten: [string, string, string][] = [];
    const writing: typeof checked = [];
    for (const beat of checked) {
      if (ttlOf.has(this.keys.group(beat[0], beat[1]).data)) writing.push(beat);
      else unwritten.push([beat[0], beat[1], beat[2]]);
    }
    const replies: Promise<unknown[] | PresenceError>[] = [];
    const calls: { names: GroupKeys[]; batch: (typeof checked)[number][] }[] = [];
    // One call per MAX_BEATS_PER_CALL beats; on a cluster, of one queue (one slot) each.
    const chunks: (typeof checked)[number][][] = [];
    for (const part of this.clustered ? byQueue(writing, (beat) => beat[0]) : [writing]) {
      for (let start = 0; start < part.length; start += MAX_BEATS_PER_CALL) chunks.push(part.slice(start, start + MAX_BEATS_PER_CALL));
    }
    for (const batch of chunks) {
      const numbers = new Map<string, number>();
      const names: GroupKeys[] = [];
      const tail: (string | number)[] = [];
      for (const [q, g, c, lease, capacity, draining] of batch) {
        const gk = this.keys.group(q, g);
        let number = numbers.get(gk.data);
        if (number === undefined) {
          number = names.push(groups.get(gk.data) as GroupKeys);
          numbers.set(gk.data, number);
        }
        tail.push(number, c, lease, 0, "", capacity ?? "", draining === null ? "" : draining ? "1" : "0");
      }
      const args = [now, INDEX_MARK_MS, this.eventsKept, EVENT_LOG_TTL_MS, this.guard(), this.instance, this.clustered ? this.mode : "", ...names.map((gk) => ttlOf.get(gk.data) as number), ...tail];
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
    const unlisted: GroupKeys[] = [];
    const logged: [string, number][] = [];
    answers.forEach((reply, i) => {
      const { names, batch } = calls[i];
      if (reply instanceof PresenceError) {
        for (const gk of names) if (!failed.has(groupName(gk))) failed.set(groupName(gk), reply);
        for (const [q, g, c] of batch) unwritten.push([q, g, c]);
        return;
      }
      if (this.clustered) {
        // The groups the call found without a mark, and the millisecond of its last event.
        for (const number of (reply[0] ?? []) as (string | number)[]) unlisted.push(names[Number(number) - 1]);
        logged.push([names[0].events, Number(reply[1])]);
      }
      const drains = (reply[2] ?? []) as (string | number)[];
      const asked = new Set<string>();
      for (let j = 0; j + 1 < drains.length; j += 2) asked.add(`${names[Number(drains[j]) - 1].data}\n${String(drains[j + 1])}`);
      const refused = reply.slice(3) as (string | number)[];
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
        else if (asked.has(`${data}\n${c}`)) {
          asked.delete(`${data}\n${c}`); // once, however often the batch beats it
          drainRequested.push([q, g, c]);
        }
      }
    });
    if (this.clustered) await this.listOnCluster(unlisted, logged);
    if (unwritten.length < checked.length && !this.claimed) await this.claim();
    if (answers.length && unwritten.length === checked.length && answers.every((r) => r instanceof PresenceError)) throw answers[0];
    if (failed.size > 0) {
      const error = new PresenceBatchError(
        `${failed.size} group(s) refused (${[...failed.keys()].join(", ")}); ${checked.length - unwritten.length} beat(s) written`,
        failed,
        checked.length - unwritten.length,
        unwritten,
      );
      error.drainRequested = drainRequested;
      throw error;
    }
    return { count: checked.length, drainRequested };
  }

  /** Ask one consumer to drain (finish what it holds, take no more, then leave): its next
   * beat's reply says so until it beats draining. One call of drain.lua, which logs a
   * `drain_requested` event; whether the consumer is tracked (an untracked one: nothing
   * written). A prefix of protocol version 1 refuses it (PresenceProtocolError: run
   * `redis-presence migrate`). */
  async requestDrain(queue: string, group: string, consumer: string, options: { nowNs?: Ns } = {}): Promise<boolean> {
    const gk = this.keys.group(checkName("queue", queue), checkName("group", group));
    checkName("consumer", consumer);
    const now = checkNs(options.nowNs);
    if (!this.clustered) {
      const reply = (await this.call("drain", this.writeKeys([gk]), [consumer, now, this.eventsKept, EVENT_LOG_TTL_MS])) as number[];
      return Number(reply[0]) === 1;
    }
    await this.protocolChecked(); // the script cannot read it on a cluster: it is told the mode
    const reply = (await this.call("drain", this.writeKeys([gk]), [consumer, now, this.eventsKept, EVENT_LOG_TTL_MS, this.mode])) as number[];
    await this.listOnCluster([], [[gk.events, Number(reply[1])]]);
    return Number(reply[0]) === 1;
  }

  /** Forget one consumer (graceful shutdown) and log that it left; whether it was tracked. */
  async deregister(queue: string, group: string, consumer: string, options: { nowNs?: Ns } = {}): Promise<boolean> {
    const gk = this.keys.group(checkName("queue", queue), checkName("group", group));
    checkName("consumer", consumer);
    const now = checkNs(options.nowNs);
    if (this.clustered) await this.protocolChecked(); // else the script checks it
    const reply = (await this.call("deregister", this.writeKeys([gk]), [consumer, now, this.eventsKept, EVENT_LOG_TTL_MS])) as number[];
    if (this.clustered) {
      // {existed, emptied, logged}: a group the call left empty is unlisted, then re-checked.
      await this.listOnCluster([], [[gk.events, Number(reply[2])]]);
      if (Number(reply[1])) await this.unlist([gk]);
    }
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
    if (this.clustered) await this.protocolChecked(); // else the script checks it
    const reply = (await this.call("describe", this.writeKeys([gk]), [1, consumer, value])) as number[];
    return Number(reply[0]) !== 0;
  }

  /** Remove exactly the consumers a snapshot at the same `nowNs`/`ttlMs` calls expired for
   * longer than `retentionMs` (0 by default), and log them as pruned; returns how many. */
  async pruneExpired(options: PruneOptions = {}): Promise<number> {
    const ttlMs = options.ttlMs === undefined ? undefined : checkTtl(options.ttlMs);
    const retention = options.retentionMs === undefined ? 0 : checkRetention(options.retentionMs);
    const keep = (ttl: number) => (retention === null ? DEFAULT_RETENTION_TTLS * ttl : retention);
    const filter = this.filter(options);
    const now = (await this.now(options.nowNs)).toString();
    let removed = 0;
    const failed = new Map<string, PresenceError>();
    const left: [string, string, string][] = [];
    const skipped: Skipped[] = [];
    // A group whose shared TTL cannot be read is left in place, and named (as a group with a
    // key of another type is), and every other group pruned.
    const refuse = (gk: GroupKeys, spoilt: Spoilt) => {
      if (!failed.has(groupName(gk))) failed.set(groupName(gk), spoilt.error());
    };
    for await (const [groups, ttls] of this.pages(filter, ttlMs, skipped, refuse)) {
      const ttlOf = new Map(groups.map((gk, i) => [gk.data, ttls[i]]));
      // At most PRUNE_GROUPS_PER_CALL groups a call; on a cluster, of one queue (one slot).
      let parts: [GroupKeys[], number, number][] = [];
      for (const part of this.clustered ? byQueue(groups, (gk) => gk.queue) : [groups]) {
        for (let i = 0; i < part.length; i += PRUNE_GROUPS_PER_CALL) parts.push([part.slice(i, i + PRUNE_GROUPS_PER_CALL), 0, 0]);
      }
      const emptied: GroupKeys[] = [];
      const logged: [string, number][] = [];
      while (parts.length) {
        const replies = await Promise.all(
          parts.map(([part, below, ties]) =>
            this.call("prune", this.writeKeys(part), [now, PRUNE_BUDGET, below, ties, this.eventsKept, EVENT_LOG_TTL_MS, ...part.map((gk) => ttlOf.get(gk.data) as number), ...part.map((gk) => keep(ttlOf.get(gk.data) as number))]),
          ),
        );
        const goingOn: [GroupKeys[], number, number][] = [];
        replies.forEach((raw, i) => {
          const reply = raw as unknown[];
          const part = parts[i][0];
          removed += Number(reply[0]);
          const stop = Number(reply[1]);
          if (this.clustered) {
            // The millisecond of its last event, and the groups it found empty.
            logged.push([part[0].events, Number(reply[4])]);
            for (const number of (reply[5] ?? []) as (string | number)[]) emptied.push(part[Number(number) - 1]);
          }
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
      if (this.clustered) {
        await this.listOnCluster([], logged);
        if (emptied.length) await this.unlist(emptied);
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
   * consumer) in code-point order, expired ones too; `skipped` lists what it set aside: a
   * consumer whose stored value another program wrote (its group's others are read) and,
   * unless one group is named, a group with a key of another type or a spoilt shared
   * setting (one named group throws its data error). */
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
      const sized = groups.filter((_, i) => sizes[i] !== null);
      const settings = await this.settingsOf(sized, ttlMs, stuckMs);
      const kept: [GroupKeys, number, number][] = [];
      sized.forEach((gk, i) => {
        const [ttl, stuck] = [settings.ttls[i], settings.stucks[i]];
        const spoilt = ttl instanceof Spoilt ? ttl : stuck instanceof Spoilt ? stuck : null;
        if (spoilt === null) kept.push([gk, ttl as number, stuck as number]);
        else if (strict) throw spoilt.error();
        else skipped.push(aside(gk, spoilt.reason));
      });
      const tables = await Promise.all(kept.map(([gk]) => this.readGroup(gk)));
      for (let i = 0; i < kept.length; i++) {
        const [gk, ttl, stuck] = kept[i];
        // A stored value this client cannot read costs its own row only.
        const stored = new Map<string, Stored>();
        for (const name of Object.keys(tables[i]).sort(byCodePoint)) {
          try {
            stored.set(name, parseStored(gk, name, tables[i][name]));
          } catch (error) {
            if (!(error instanceof PresenceDataError)) throw error;
            skipped.push({ ...aside(gk, error.message), consumer: name });
          }
        }
        const names = [...stored.keys()];
        const metas = options.withMeta ? await this.metas(gk, names, unreadable) : null;
        found.push([gk, names.map((consumer, j) => row(gk, consumer, stored.get(consumer) as Stored, now, ttl, stuck, metas?.[j] ?? {}))]);
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
    const spoilt = strict ? null : (gk: GroupKeys, value: Spoilt) => skipped.push(aside(gk, value.reason));
    for await (const [groups, ttls] of this.pages(filter, ttlMs, skipped, spoilt)) {
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
    const counts = new Map<string, [string, string, number, number, number, Capacities]>();
    const spoilt = (gk: GroupKeys, value: Spoilt) => skipped.push(aside(gk, value.reason));
    for await (const [groups, ttls] of this.pages({}, ttlMs, skipped, spoilt)) {
      const cards = await this.sound(groups, (gk) => this.redis.zcard(gk.hb), false, skipped);
      const active = await this.above(groups, ttls.map((ttl) => horizonsNs(now, ttl)[0]), false, skipped);
      const alive = await this.above(groups, ttls.map((ttl) => horizonsNs(now, ttl)[1]), false, skipped);
      const tables = await this.sound(groups, (gk) => this.readGroup(gk), false, skipped);
      groups.forEach((gk, i) => {
        const [card, a, b, table] = [cards[i], active[i], alive[i], tables[i]];
        if (card !== null && a !== null && b !== null && table !== null) {
          counts.set(pair(gk.queue, gk.group), [gk.queue, gk.group, a, b - a, card - b, capacities(gk, table, now, ttls[i])]);
        }
      });
    }
    for (const [queue, group] of declared) {
      const key = pair(queue, group);
      if (!counts.has(key)) counts.set(key, [queue, group, 0, 0, 0, { capacity: null, free: null, draining: 0, conflicts: 0 }]);
    }
    // A group set aside is left out, declared or not: never shown without consumers.
    for (const key of groupsSetAside(skipped)) counts.delete(key);
    const minimum = new Map(declared.map(([q, g, n]) => [pair(q, g), n]));
    const out = [...counts.values()]
      .sort((a, b) => byCodePoint(a[0], b[0]) || byCodePoint(a[1], b[1]))
      .map(([queue, group, active, stale, expired, more]) => {
        const minActive = minimum.get(pair(queue, group)) ?? null;
        return { queue, group, active, stale, expired, minActive, below: minActive !== null && active < minActive, ...more };
      });
    this.report(skipped);
    return withSkipped(out, skipped);
  }

  // -- events (src/changes.ts) ---------------------------------------------------------

  /** The events after `cursor` up to `nowNs` (the server clock by default), in order, at
   * most about `limit` (1000), and the cursor to go on from (`more`: ask again at once);
   * no cursor starts now. Cursors are the Python package's, byte for byte. Throws
   * `PresenceResyncRequired` when the cursor cannot go on (take a fresh snapshot). */
  async changes(options: ChangesOptions = {}): Promise<Changes> {
    return this.events().changes(options);
  }

  /** A snapshot message, then each event as it happens and a cursor message after each ask
   * (every `intervalMs`), and a new snapshot whenever the cursor cannot go on; ends when
   * `signal` aborts. */
  async *follow(options: FollowOptions = {}): AsyncGenerator<FollowMessage, void, undefined> {
    yield* this.events().follow(options);
  }

  private events(): ChangeReader {
    this.reader ??= new ChangeReader({
      keys: this.keys,
      clustered: this.clustered,
      groupsPerCall: GROUPS_PER_PAGE,
      consumersPerCall: CONSUMERS_PER_CALL,
      send: (command, args, options = {}) => {
        // One key's command, routed by that key on a cluster. ioredis knows no key of TIME
        // (routed by `nodeKey`) nor of XINFO STREAM (its key is the second argument): on a
        // cluster each goes behind an EXISTS of that key in a pipeline, which ioredis sends
        // to the key's node, instead of to any node (and a MOVED for XINFO).
        const routeBy = command === "TIME" ? options.nodeKey : command === "XINFO" ? String(args[1]) : undefined;
        if (this.clustered && routeBy !== undefined) return this.routed(routeBy, command, args);
        const sent = options.buffers ? this.redis.callBuffer(command, ...args) : this.redis.call(command, ...args);
        return sent.catch((error: unknown) => Promise.reject(translate(error)));
      },
      checkProtocol: async () => void (await this.refresh([], [])),
      sharedTtls: async (groups) => (await this.settingsOf(groups, undefined, null)).ttls,
      report: (skipped) => this.report(skipped),
      snapshot: (nowNs, queue, group) => this.snapshot({ nowNs, queue, group }),
    });
    return this.reader;
  }

  // -- shared settings and declared groups ---------------------------------------------

  /** Store the TTL every client of the prefix shares (null forgets it), for the prefix or
   * one group (`queue` and `group`): one call of setting.lua, which checks the protocol
   * version and keeps a group's own TTL in the fleet index `P:ttls` in the same call. */
  async setTtl(ttlMs: number | null, where: { queue?: string; group?: string } = {}): Promise<void> {
    const key = this.settingKey(where, "ttl");
    const value = ttlMs === null ? "" : checkTtl(ttlMs);
    if (this.clustered) {
      await this.protocolChecked(); // another slot: checked first; nobody keeps P:ttls there
      await this.call("setting", [key], [value]);
    } else {
      // A group's own TTL: its hash key (its member in P:groups) for P:ttls.
      const own = where.queue === undefined || where.group === undefined ? [] : [this.keys.group(where.queue, where.group).data];
      await this.call("setting", [key, this.keys.protocol, this.keys.ttls], [value, ...own]);
    }
    this.settings.clear();
    this.beatCalls.clear();
  }

  /** The shared TTL of one group (or the prefix), read now, and where it comes from. */
  async ttlSource(where: { queue?: string; group?: string } = {}): Promise<[number, "group" | "prefix" | "default"]> {
    const key = this.settingKey(where, "ttl");
    const [prefix, own] = await Promise.all([this.getSetting(this.keys.ttl), key === this.keys.ttl ? null : this.getSetting(key)]);
    const mine = storedSetting(key, own, "ttl");
    if (mine instanceof Spoilt) throw mine.error();
    if (mine !== null) return [mine, "group"];
    const shared = storedSetting(this.keys.ttl, prefix, "ttl");
    if (shared instanceof Spoilt) throw prefixError(shared, "ttl");
    return shared !== null ? [shared, "prefix"] : [DEFAULT_PRESENCE_TTL_MS, "default"];
  }

  /** Declare that `group` must have at least `minActive` active readers of `queue` (an
   * integer in [1, MAX_MIN_ACTIVE]: `unexpect` stops declaring it); one call of expect.lua:
   * the protocol version checked, the declaration and its index written. */
  async expect(queue: string, group: string, minActive = 1): Promise<void> {
    const key = this.keys.queueExpect(checkName("queue", queue));
    checkName("group", group);
    checkMinActive(minActive);
    if (!this.clustered) {
      await this.call("expect", [key, this.keys.expects, this.keys.protocol], [group, minActive]);
      return;
    }
    // Other slots: the version checked first, the queue listed after its declaration (so a
    // racing unexpect's re-check sees it).
    await this.protocolChecked();
    await this.call("expect", [key], [group, minActive]);
    await this.command(() => this.redis.zadd(this.keys.expects, 0, key));
  }

  /** Forget a declared group; whether it was declared (one call of unexpect.lua). */
  async unexpect(queue: string, group: string): Promise<boolean> {
    const key = this.keys.queueExpect(checkName("queue", queue));
    checkName("group", group);
    if (!this.clustered) {
      const [removed] = (await this.call("unexpect", [key, this.keys.expects, this.keys.protocol], [group])) as number[];
      return Number(removed) === 1;
    }
    await this.protocolChecked();
    const [removed, left] = (await this.call("unexpect", [key], [group])) as number[];
    if (!Number(left)) {
      // As the index of groups (docs/protocol.md section 14): unlist, re-check, list again when a
      // racing expect declared a group meanwhile.
      await this.command(() => this.redis.zrem(this.keys.expects, key));
      if (await this.command(() => this.redis.exists(key))) await this.command(() => this.redis.zadd(this.keys.expects, 0, key));
    }
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

  /** The declared groups: the index a page of GROUPS_PER_PAGE queues at a time (the
   * protocol version checked with the first), each queue's declarations HSCANned
   * CONSUMERS_PER_CALL at a time; a member or a minimum this client did not write, and a
   * queue's declarations of another type, set aside in `skipped`. */
  private async declared(skipped: Skipped[]): Promise<[string, string, number][]> {
    const out = new Map<string, [string, string, number]>(); // HSCAN may name a field twice
    let low = "-";
    for (let first = true; ; first = false) {
      const [members] = await Promise.all([
        this.redis.zrangebylex(this.keys.expects, low, "+", "LIMIT", 0, GROUPS_PER_PAGE),
        first ? this.refresh([], []) : null, // the protocol version, when due
      ]);
      for (const key of members) {
        const queue = this.keys.queueOfExpect(key);
        if (queue === null) {
          skipped.push({ key, reason: `the index ${this.keys.expects} holds a member this package did not write: '${key.slice(0, 80)}'` });
          continue;
        }
        let cursor = "0";
        do {
          let flat: string[];
          try {
            [cursor, flat] = await this.redis.hscan(key, cursor, "COUNT", CONSUMERS_PER_CALL);
          } catch (error) {
            const failure = translate(error);
            if (!(failure instanceof PresenceDataError)) throw failure;
            skipped.push({ key, reason: failure.message, queue }); // a key of another type
            break;
          }
          for (let i = 0; i < flat.length; i += 2) {
            const [group, least] = [flat[i], flat[i + 1]];
            const minimum = storedMinActive(least);
            if (minimum !== null) out.set(pair(queue, group), [queue, group, minimum]);
            else skipped.push({ key, reason: `${key} field '${group.slice(0, 80)}' holds a minimum this package did not write: '${least.slice(0, 40)}'`, queue });
          }
        } while (cursor !== "0");
      }
      if (members.length < GROUPS_PER_PAGE) break;
      low = `(${members[members.length - 1]}`;
    }
    return [...out.values()].sort((a, b) => byCodePoint(a[0], b[0]) || byCodePoint(a[1], b[1]));
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

  /** The KEYS of a script: each group's five keys, then, on a standalone server only, the
   * indexes, the epoch marker, the protocol version (which every write script checks before
   * it writes, and which says how it writes) and the fleet indexes of newest and oldest
   * beats; a script runs on a cluster iff it gets no index (`INDEX` in lua/lib.lua). */
  private writeKeys(groups: GroupKeys[]): string[] {
    const keys = groups.flatMap((gk) => [gk.hb, gk.data, gk.mark, gk.events, gk.meta]);
    if (this.clustered) return keys;
    return [...keys, this.keys.groups, this.keys.events, this.keys.epoch, this.keys.protocol, this.keys.newest, this.keys.oldest];
  }

  // -- the cluster's index protocol (docs/protocol.md section 14; plans/index.py of the Python
  // package): the index of groups, the event index and the epoch marker live in other slots
  // than the queues, so the caller writes them after each script.

  /** After a script on a cluster: `ZADD P:groups` the groups it found without a mark (step
   * 1), `ZADD GT P:events` the event logs it wrote to (scored by the event's millisecond;
   * 0: none) and, when it logged one, `SET NX` the epoch marker (a new token each time: a
   * registry that wrote the one lost must not bring it back). */
  private async listOnCluster(groups: GroupKeys[], logged: [string, number][]): Promise<void> {
    const writes: Promise<unknown>[] = [];
    if (groups.length) writes.push(this.command(() => this.redis.zadd(this.keys.groups, ...groups.flatMap((gk) => [0, gk.data]))));
    const logs = logged.filter(([, ms]) => ms).flatMap(([log, ms]) => [ms, log]);
    if (logs.length) {
      writes.push(this.command(() => this.redis.zadd(this.keys.events, "GT", ...logs)));
      writes.push(this.command(() => this.redis.set(this.keys.epoch, randomBytes(16).toString("hex"), "NX")));
    }
    await Promise.all(writes);
  }

  /** Step 2 of the cluster's index protocol: `ZREM` the groups a script left empty, re-check
   * each (`EXISTS` of its sorted set), `ZADD` back those a racing heartbeat filled again.
   * Without the re-check a live group can be lost. */
  private async unlist(groups: GroupKeys[]): Promise<void> {
    await this.command(() => this.redis.zrem(this.keys.groups, ...groups.map((gk) => gk.data)));
    const alive = await Promise.all(groups.map((gk) => this.command(() => this.redis.exists(gk.hb))));
    const back = groups.filter((_, i) => alive[i]).flatMap((gk) => [0, gk.data]);
    if (back.length) await this.command(() => this.redis.zadd(this.keys.groups, ...back));
  }

  /** Refuse a prefix of another protocol version, read when this client has not read it
   * for TTL_CACHE_MS: what a write checks on a cluster, where its script cannot read
   * `P:protocol` (another slot); it also keeps the mode the scripts are told. */
  private async protocolChecked(): Promise<void> {
    await this.refresh([], []);
  }

  /** The server clock on a cluster: `TIME` of the node that holds the index of groups (a
   * pipeline goes to the node of its keys), so one registry reads one node's clock. */
  private async indexTime(): Promise<[string, string]> {
    const replies = (await this.command(() => this.redis.pipeline().exists(this.keys.groups).time().exec())) ?? [];
    const [failure, reply] = replies[1] ?? [new Error("TIME got no reply"), null];
    if (failure) throw translate(failure);
    return reply as [string, string];
  }

  /** `command` sent to the node that holds `key` (a pipeline goes to the node of its first
   * key): for the commands whose key ioredis cannot find. */
  private async routed(key: string, command: string, args: (string | number)[]): Promise<unknown> {
    const replies = (await this.command(() => this.redis.pipeline().exists(key).call(command, ...args).exec())) ?? [];
    const [failure, reply] = replies[1] ?? [new Error(`${command} got no reply`), null];
    if (failure) throw translate(failure);
    return reply;
  }

  /** One plain command, its driver error translated. */
  private async command<T>(send: () => Promise<T>): Promise<T> {
    try {
      return await send();
    } catch (error) {
      throw translate(error);
    }
  }

  /** One EVALSHA of `lua/<name>.lua` (SCRIPT LOAD and again after NOSCRIPT). */
  private async call(name: ScriptName, keys: (string | number)[], args: (string | number)[], count = keys.length): Promise<unknown> {
    const found = script(name);
    try {
      return await this.redis.evalsha(found.sha, count, ...keys, ...args);
    } catch (error) {
      if (!(error instanceof Error) || !error.message.startsWith("NOSCRIPT")) throw translate(error);
    }
    // Standalone: the server; a cluster: every primary (a script may go to any slot's node).
    if (!this.clustered) await this.redis.script("LOAD", found.source);
    else await Promise.all((this.redis as Cluster).nodes("master").map((node) => node.script("LOAD", found.source)));
    try {
      return await this.redis.evalsha(found.sha, count, ...keys, ...args);
    } catch (error) {
      throw translate(error);
    }
  }

  private async now(nowNs: Ns | undefined): Promise<bigint> {
    if (nowNs !== undefined) return BigInt(checkNs(nowNs));
    const [seconds, micros] = this.clustered ? await this.indexTime() : await this.redis.time();
    return (BigInt(seconds) * 1_000_000n + BigInt(micros)) * 1000n;
  }

  /** One page of indexed groups (of one queue, or one group) after `after`, and where the
   * next page starts (null: the last); a foreign member is set aside in `skipped`. */
  private async listed(queue: string | undefined, group: string | undefined, after: string | null, skipped: Skipped[]): Promise<[GroupKeys[], string | null]> {
    if (queue !== undefined && group !== undefined) return [[this.keys.group(queue, group)], null];
    const [first, high] = queue !== undefined ? this.keys.queueRange(queue) : ["-", "+"];
    const low = after !== null ? `(${after}` : first;
    const [members] = await Promise.all([
      this.redis.zrangebylex(this.keys.groups, low, high, "LIMIT", 0, GROUPS_PER_PAGE),
      after === null ? this.refresh([], []) : null, // the protocol version with the first page, when due
    ]);
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
   * `ttlMs`, or its shared one; a group whose own shared TTL cannot be read is handed to
   * `spoilt` and left out (`spoilt` null: its data error is thrown). */
  private async *pages(
    filter: { queue?: string; group?: string },
    ttlMs: number | undefined,
    skipped: Skipped[],
    spoilt: ((gk: GroupKeys, value: Spoilt) => unknown) | null,
  ): AsyncGenerator<[GroupKeys[], number[]]> {
    let after: string | null = null;
    do {
      let groups: GroupKeys[];
      [groups, after] = await this.listed(filter.queue, filter.group, after, skipped);
      const { ttls } = await this.settingsOf(groups, ttlMs, null);
      const kept: GroupKeys[] = [];
      const values: number[] = [];
      groups.forEach((gk, i) => {
        const ttl = ttls[i];
        if (!(ttl instanceof Spoilt)) {
          kept.push(gk);
          values.push(ttl);
        } else if (spoilt === null) throw ttl.error();
        else spoilt(gk, ttl);
      });
      yield [kept, values];
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
      skipped.push(aside(groups[i], error.message));
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

  /** Consumers of each group whose last beat is after its horizon (ns): ZCOUNT above the
   * horizon's microsecond, plus those on it whose nanosecond rest is above (read from
   * their stored values: one this client cannot read is not counted, and set aside in
   * `skipped`); null for a group set aside (unless `strict`: its data error). */
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
              if (!(error instanceof PresenceDataError)) throw error;
              skipped.push({ ...aside(gk, error.message), consumer: ties[j] });
              continue;
            }
            if (beat > horizons[i]) n += 1;
          }
          if (ties.length < CONSUMERS_PER_CALL) break;
        }
        return n;
      }),
    );
  }

  /** Each group's shared TTL (its data error, or the prefix's, when it cannot be read). */
  private async sharedTtls(groups: GroupKeys[]): Promise<number[]> {
    return sound((await this.settingsOf(groups, undefined, null)).ttls);
  }

  /** Each group's TTL and progress budget: the given ones (`ttlMs`, `stuckMs`; null: not
   * needed), else its shared ones (its own, else the prefix's, else the default), read with
   * the protocol version in one round trip when this client has not read them for
   * TTL_CACHE_MS; Spoilt for a group whose own cannot be read (a spoilt one of the prefix
   * throws its data error where a group needs it). */
  private async settingsOf(
    groups: GroupKeys[],
    ttlMs: number | undefined,
    stuckMs: number | undefined | null,
  ): Promise<{ ttls: (number | Spoilt)[]; stucks: (number | Spoilt)[] }> {
    const kinds: Kind[] = [...(ttlMs === undefined ? ["ttl" as const] : []), ...(stuckMs === undefined ? ["stuck" as const] : [])];
    const seen = await this.refresh(groups, kinds);
    return {
      ttls: ttlMs === undefined ? settled(seen, this.keys.ttl, groups, "ttl") : groups.map(() => ttlMs),
      stucks: stuckMs === undefined ? settled(seen, this.keys.stuck, groups, "stuck") : stuckMs === null ? [] : groups.map(() => stuckMs),
    };
  }

  /** The settings of `kinds` of the prefix and of each group, from the cache, reading (in
   * one round trip, with the protocol version when due) those older than TTL_CACHE_MS; what
   * this read saw, by key (its own: another call may empty the cache meanwhile). */
  private async refresh(groups: GroupKeys[], kinds: Kind[]): Promise<Map<string, Setting>> {
    const limit = performance.now() - TTL_CACHE_MS;
    const seen = new Map<string, Setting>();
    const due: [string, Kind][] = [];
    for (const kind of kinds) {
      for (const key of [kind === "ttl" ? this.keys.ttl : this.keys.stuck, ...groups.map((gk) => gk[kind])]) {
        if (seen.has(key) || due.some(([k]) => k === key)) continue;
        const cached = this.settings.get(key);
        if (cached !== undefined && cached.at >= limit) seen.set(key, cached.value);
        else due.push([key, kind]);
      }
    }
    const checking = this.protocolAt === null || this.protocolAt < limit;
    if (!due.length && !checking) return seen;
    const [version, ...values] = await Promise.all([
      checking ? this.redis.get(this.keys.protocol).catch((error: unknown) => Promise.reject(translate(error))) : null,
      ...due.map(([key]) => this.getSetting(key)),
    ]);
    const at = performance.now();
    if (checking) {
      if (version !== null && !ACCEPTED_VERSIONS.includes(version)) {
        throw new PresenceProtocolError(
          `${this.keys.protocol} says this prefix was written by protocol version ${quoted(version.slice(0, 40))}; this package speaks version ${PROTOCOL_VERSION} (docs/protocol.md)`,
        );
      }
      this.protocolAt = at;
      this.mode = version === "1" ? "1" : PROTOCOL_VERSION;
    }
    due.forEach(([key, kind], i) => {
      const value = storedSetting(key, values[i], kind);
      this.settings.set(key, { value, at });
      seen.set(key, value);
    });
    return seen;
  }

  /** `GET` of a setting: its value, null, or the data error of a key of another type. */
  private async getSetting(key: string): Promise<string | null | PresenceDataError> {
    try {
      return await this.redis.get(key);
    } catch (error) {
      const failure = translate(error);
      if (failure instanceof PresenceDataError) return failure;
      throw failure;
    }
  }

  /** One report (`onSkipped`) for each key a read set aside: the whole group, or the
   * consumers of it it set aside (how many, and the first one's reason). */
  private report(skipped: Skipped[]): void {
    const byKey = new Map<string, Skipped[]>();
    for (const item of unique(skipped)) {
      const items = byKey.get(item.key);
      if (items === undefined) byKey.set(item.key, [item]);
      else items.push(item);
    }
    for (const [key, items] of byKey) {
      const whole = items.find((item) => item.consumer === undefined);
      const n = items.length;
      const reason = whole?.reason ?? `${n === 1 ? "1 consumer" : `${n} consumers`}, read the group's others: ${items[0].reason}`;
      this.onSkipped({ key, reason, queue: items[0].queue, group: items[0].group });
    }
  }
}

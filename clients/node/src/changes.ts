/** `changes` and `follow`: the events across the queues' event logs after a cursor (the
 * stale and expired ones derived from the sorted sets), as the Python package's
 * redis_presence/plans/changes.py reads them (docs/protocol.md, section 6), and the cursor
 * to go on from. The registry hands in how it sends a command; nothing here holds state
 * across calls but a follower's `HeldGroups`. */
import { setTimeout as sleep } from "node:timers/promises";
import { PresenceDataError, PresenceError, PresenceResyncRequired } from "./errors";
import {
  checkChangesLimit,
  checkCursorClock,
  checkCursorFilter,
  checkEpoch,
  checkIntervalMs,
  DEFAULT_CHANGES_LIMIT,
  DEFAULT_FOLLOW_INTERVAL_MS,
  decodeCursor,
  encodeCursor,
  EVENT_LOG_TTL_MS,
  type EventCursor,
  eventWindow,
  floorDiv,
  foreignEntries,
  groupEvent,
  HeldGroups,
  type LogEntry,
  LOG_LAG_MS,
  loggedEvents,
  type Ordered,
  type PresenceEvent,
  sameId,
  sortedEvents,
  streamId,
  type Window,
} from "./events";
import { byCodePoint, decodeName, encodeName, type GroupKeys, type Keyspace } from "./keys";
import { type ConsumerPresence, NS_PER_MS, type Skipped } from "./replies";
import { Spoilt } from "./settings";
import { checkName, checkNs } from "./validation";

/** What `changes` answers: the events in order, the cursor to go on from, and `more`: the
 * answer stopped at its `limit` in the middle of its window (ask again at once). */
export interface Changes {
  events: PresenceEvent[];
  cursor: string;
  more: boolean;
}

export interface ChangesOptions {
  /** Where to go on from (undefined or null: start now, no events). */
  cursor?: string | null;
  /** The instant to give events up to (default: the server clock). */
  nowNs?: bigint | string;
  queue?: string;
  group?: string;
  /** About how many events at most (a log entry is never split): 1 to 100000. */
  limit?: number;
}

export interface FollowOptions {
  /** Go on from here at once (from `changes` or a `cursor` message), without a first snapshot. */
  cursor?: string | null;
  queue?: string;
  group?: string;
  /** How often to ask for changes (ms; default 1000). */
  intervalMs?: number;
  /** Stops the iteration (it ends, without an error). */
  signal?: AbortSignal;
}

/** What `follow` yields first, and again whenever it had to resync: every consumer at
 * `nowNs`, and the cursor its events go on from. */
export interface FollowSnapshot {
  kind: "snapshot";
  rows: ConsumerPresence[];
  cursor: string;
  nowNs: bigint;
}

/** What `follow` yields after each read: the events so far were given, and `cursor` (at
 * `nowNs`) is where to resume from. */
export interface FollowCursor {
  kind: "cursor";
  cursor: string;
  nowNs: bigint;
}

/** One message of `follow`: a snapshot, an event, or a cursor to resume from (tell them by
 * `kind`). */
export type FollowMessage = FollowSnapshot | PresenceEvent | FollowCursor;

/** What the registry lends the event reads. */
export interface ChangeHost {
  readonly keys: Keyspace;
  /** Whether the registry talks to a Redis Cluster (a follower waits longer there). */
  readonly clustered: boolean;
  /** How many groups (and log reads) one round trip asks about, and how many consumers. */
  readonly groupsPerCall: number;
  readonly consumersPerCall: number;
  /** One command of one key (a keyless one, TIME, answered by the node of `nodeKey`),
   * its error translated; with `buffers`, the reply's strings as Buffers. */
  send(command: string, args: (string | number)[], options?: { nodeKey?: string; buffers?: boolean }): Promise<unknown>;
  /** The check of the prefix's protocol version, when due. */
  checkProtocol(): Promise<void>;
  /** Each group's shared TTL (Spoilt: its own cannot be read; a spoilt one of the prefix throws). */
  sharedTtls(groups: GroupKeys[]): Promise<(number | Spoilt)[]>;
  report(skipped: Skipped[]): void;
  snapshot(nowNs: bigint, queue: string | undefined, group: string | undefined): Promise<ConsumerPresence[]>;
}

function text(value: unknown): string {
  return Buffer.isBuffer(value) ? value.toString("utf8") : String(value);
}

/** An `XINFO STREAM` reply (flat pairs) as a Map. */
function info(reply: unknown): Map<string, unknown> {
  const out = new Map<string, unknown>();
  if (!Array.isArray(reply)) return out;
  for (let i = 0; i + 1 < reply.length; i += 2) out.set(text(reply[i]), reply[i + 1]);
  return out;
}

/** The id of the last entry ever added to a log (its XINFO STREAM), if any. */
function lastGenerated(reply: unknown): string | null {
  const last = info(reply).get("last-generated-id");
  if (last === undefined || last === null) return null;
  const id = text(last);
  return id === "0-0" ? null : id;
}

/** Whether a log (its XINFO STREAM) lost entries this reader has not read: it was trimmed,
 * and its first entry is past where the reader goes on. */
function trimmedPast(reply: unknown, start: string): boolean {
  const fields = info(reply);
  const added = Number(text(fields.get("entries-added") ?? 0));
  const length = Number(text(fields.get("length") ?? 0));
  const first = fields.get("first-entry");
  if (added <= length || !Array.isArray(first) || !first.length) return false;
  const [a, b] = [streamId(text(first[0])), streamId(start.replace(/^\(/, ""))];
  return a[0] > b[0] || (a[0] === b[0] && a[1] > b[1]);
}

function noSuchKey(error: unknown): boolean {
  return error instanceof Error && error.message.toLowerCase().includes("no such key");
}

const FRESH = "take a fresh snapshot() and a fresh cursor (changes())";

/** The event reads of one registry (`PresenceRegistry.changes` and `.follow`). */
export class ChangeReader {
  constructor(private readonly host: ChangeHost) {}

  private get keys(): Keyspace {
    return this.host.keys;
  }

  /** The events after `cursor` up to `nowNs` (the server clock by default), in order, at
   * most about `limit` of them, and the cursor to go on from; no cursor starts now (no
   * events). PresenceResyncRequired when the log was trimmed past the cursor or the data it
   * was read from was lost; a RangeError naming `cursor` for one that is not one `changes`
   * returned for this filter, or whose instants are ahead of the server clock. */
  async changes(options: ChangesOptions = {}): Promise<Changes> {
    if ((options as { ttlMs?: unknown }).ttlMs !== undefined) {
      throw new TypeError("ttlMs is not an option of changes(): the stale and expired events use each group's shared TTL, as every client's do");
    }
    const now = options.nowNs === undefined ? null : BigInt(checkNs(options.nowNs));
    const queue = options.queue === undefined ? null : checkName("queue", options.queue);
    const group = options.group === undefined ? null : checkName("group", options.group);
    const limit = checkChangesLimit(options.limit ?? DEFAULT_CHANGES_LIMIT);
    const since = options.cursor === undefined || options.cursor === null ? null : decodeCursor(options.cursor);
    if (since !== null) checkCursorFilter(since, this.keys, queue, group);
    return this.read(since, now, queue, group, limit);
  }

  /** State, then diffs: a snapshot message first, then each event as it happens (asking
   * every `intervalMs`) and a cursor message after each ask, and a new snapshot whenever
   * its cursor cannot go on or a group it holds consumers of vanished without events. With
   * `cursor`, it goes on from there at once. Ends when `signal` aborts. */
  async *follow(options: FollowOptions = {}): AsyncGenerator<FollowMessage, void, undefined> {
    const interval = checkIntervalMs(options.intervalMs ?? DEFAULT_FOLLOW_INTERVAL_MS);
    const queue = options.queue === undefined ? undefined : checkName("queue", options.queue);
    const group = options.group === undefined ? undefined : checkName("group", options.group);
    const signal = options.signal;
    let cursor = options.cursor ?? null;
    if (cursor !== null) checkCursorFilter(decodeCursor(cursor), this.keys, queue ?? null, group ?? null);
    const held = new HeldGroups(this.host.clustered, queue === undefined || group === undefined);
    while (!signal?.aborted) {
      let wait = cursor === null;
      if (cursor === null) {
        const message = await this.snapshotCursor(queue, group);
        held.start(message.rows);
        if (signal?.aborted) return;
        yield message;
        cursor = message.cursor;
      }
      try {
        for (;;) {
          if (wait) {
            try {
              await sleep(interval, undefined, { signal });
            } catch (error) {
              if (signal?.aborted) return;
              throw error;
            }
          }
          if (signal?.aborted) return;
          const page = await this.changes({ cursor, queue, group });
          cursor = page.cursor;
          wait = !page.more; // a window given in pages goes on at once
          for (const event of page.events) {
            held.apply(event);
            yield event;
          }
          const read = decodeCursor(cursor);
          if (wait && held.size) {
            // a whole window read: are the groups it holds consumers of still there?
            const due = held.due(this.host.groupsPerCall);
            held.check(due, await this.vanished(due, held.indexed), read.serverMs);
          }
          yield { kind: "cursor", cursor, nowNs: read.nowNs };
        }
      } catch (error) {
        if (!(error instanceof PresenceResyncRequired)) throw error;
        cursor = null;
      }
    }
  }

  /** A snapshot (under the shared TTL) and the cursor its events go on from, at one instant. */
  async snapshotCursor(queue: string | undefined, group: string | undefined): Promise<FollowSnapshot> {
    const { cursor } = await this.read(null, null, queue ?? null, group ?? null, DEFAULT_CHANGES_LIMIT);
    const now = decodeCursor(cursor).nowNs;
    return { kind: "snapshot", rows: await this.host.snapshot(now, queue, group), cursor, nowNs: now };
  }

  /** Which of these groups are gone: "keys" (no heartbeats), "index" (with `indexed`: the
   * index of groups does not list it); by `HeldGroups.of(queue, group)`. */
  async vanished(groups: [string, string][], indexed: boolean): Promise<Map<string, "keys" | "index">> {
    const asked = groups.map(([q, g]) => this.keys.group(q, g));
    const [cards, listed] = await Promise.all([
      Promise.all(asked.map((gk) => this.host.send("ZCARD", [gk.hb]))),
      indexed ? Promise.all(asked.map((gk) => this.host.send("ZRANGEBYLEX", [this.keys.groups, `[${gk.data}`, `[${gk.data}`]))) : null,
    ]);
    const gone = new Map<string, "keys" | "index">();
    asked.forEach((gk, i) => {
      if (!Number(cards[i])) gone.set(HeldGroups.of(gk.queue, gk.group), "keys");
      else if (listed !== null && !(listed[i] as unknown[]).length) gone.set(HeldGroups.of(gk.queue, gk.group), "index");
    });
    return gone;
  }

  private eventsLog(queue: string): string {
    return `${this.keys.prefix}:{${encodeName(queue)}}:events`;
  }

  /** The queue whose event log `key` is; a key this client would not spell (a foreign
   * member of the event index) is a data error, as in the Python package. */
  private queueOfEvents(key: string): string {
    const head = `${this.keys.prefix}:{`;
    const tail = "}:events";
    const queue = key.startsWith(head) && key.endsWith(tail) ? decodeName(key.slice(head.length, -tail.length)) : null;
    if (queue === null || this.eventsLog(queue) !== key) {
      throw new PresenceDataError(`the event index ${this.keys.events} holds a member this package did not write: '${key.slice(0, 80)}'`);
    }
    return queue;
  }

  private async read(since: EventCursor | null, nowNs: bigint | null, queue: string | null, group: string | null, limit: number): Promise<Changes> {
    // The epoch marker lives in the slot of the event index: TIME and GET go to one node.
    const [clock, marker] = await Promise.all([
      this.host.send("TIME", [], { nodeKey: this.keys.events }) as Promise<[string, string]>,
      this.host.send("GET", [this.keys.epoch]) as Promise<string | null>,
      this.host.checkProtocol(),
    ]);
    const epoch = marker === null ? null : text(marker);
    const serverNs = (BigInt(text(clock[0])) * 1_000_000n + BigInt(text(clock[1]))) * 1000n;
    const serverMs = serverNs / NS_PER_MS;
    const now = nowNs ?? serverNs;
    const cursor = (nowAt: bigint, ms: bigint, positions: Map<string, string>, window: Window | null = null): string =>
      encodeCursor({ nowNs: nowAt, serverMs: ms, positions, epoch, prefix: this.keys.prefix, queue, group, window });
    if (since === null) return { events: [], cursor: cursor(now, serverMs, await this.logEnds(serverMs, queue)), more: false };
    checkEpoch(since, epoch);
    checkCursorClock(since, serverMs, nowNs);
    if (serverMs - since.serverMs > BigInt(EVENT_LOG_TTL_MS - LOG_LAG_MS)) {
      throw new PresenceResyncRequired(`this cursor is older than the event logs last: ${FRESH}`, "old");
    }
    const at: Window = since.window ?? { nowNs: now > since.nowNs ? now : since.nowNs, serverMs, recent: new Map(), log: ["", ""], derived: null };
    const events: Ordered[] = [];
    const recent = new Map(at.recent);
    let step: Window | null = at;
    if (at.log !== null) {
      // Entries another program wrote: set aside, one report a log (never a crash).
      const foreign = new Map<string, { queue: string; aside: [string, string][] }>();
      step = await this.logged(since, at, recent, events, queue, group, limit, foreign);
      this.host.report([...foreign].flatMap(([log, { queue: q, aside }]) => foreignEntries(log, q, aside)));
    }
    if (step !== null && step.derived !== null && at.nowNs > since.nowNs) {
      step = await this.crossed(since.nowNs, step, events, queue, group, limit);
    } else if (step !== null && step.log === null) step = null;
    if (step !== null) {
      return { events: sortedEvents(events), cursor: cursor(since.nowNs, since.serverMs, since.positions, { ...step, recent }), more: true };
    }
    // Places still within the lag that this window did not move keep their value.
    for (const [logQueue, kept] of since.positions) {
      if (!recent.has(logQueue) && streamId(kept)[0] >= at.serverMs - BigInt(LOG_LAG_MS)) recent.set(logQueue, kept);
    }
    return { events: sortedEvents(events), cursor: cursor(at.nowNs, at.serverMs, recent), more: false };
  }

  /** The logged events after the cursor's place in each log, up to the window's ms, a log at
   * a time in the order of their queues, into `events` until it holds `limit`. Returns where
   * the window stands then: in a log (not done), or at the derived events. A log is read
   * from its place inclusive: the entry there must still be its first answer, else what the
   * reader saw is gone and it must resync. */
  private async logged(
    since: EventCursor,
    at: Window,
    recent: Map<string, string>,
    events: Ordered[],
    queue: string | null,
    group: string | null,
    limit: number,
    foreign: Map<string, { queue: string; aside: [string, string][] }>,
  ): Promise<Window> {
    const oldest = since.serverMs - BigInt(LOG_LAG_MS);
    const start = `${oldest > 0n ? oldest : 0n}-0`;
    const listed = await this.recentLogs(oldest, queue);
    const every = new Map<string, string>(); // log -> queue
    for (const log of listed) every.set(log, this.queueOfEvents(log));
    for (const q of since.positions.keys()) every.set(this.eventsLog(q), q);
    let logs = [...every].map(([log, q]) => [q, log] as [string, string]).sort((a, b) => byCodePoint(a[0], b[0]) || byCodePoint(a[1], b[1]));
    let [reached, after] = at.log as [string, string];
    logs = logs.filter(([q]) => byCodePoint(q, reached) >= 0);
    const most = Math.min(this.host.consumersPerCall, limit);
    const lagFloor = at.serverMs - BigInt(LOG_LAG_MS);
    while (logs.length) {
      const batch = logs.slice(0, this.host.groupsPerCall);
      const places = batch.map(([q]) => (q === reached && after ? after : (since.positions.get(q) ?? "")));
      const counts = places.map((place) => (place ? most + 1 : most));
      const replies = (await Promise.all(
        batch.map(([, log], i) => this.host.send("XRANGE", [log, places[i] || start, at.serverMs.toString(), "COUNT", counts[i]], { buffers: true })),
      )) as LogEntry[][];
      const lost = batch
        .map(([, log], i) => [log, places[i], replies[i]] as const)
        .filter(([, place, entries]) => place && (!entries.length || !sameId(entries[0][0].toString("utf8"), place)))
        .map(([log, place]) => [log, place] as [string, string]);
      if (lost.length) await this.resyncLost(lost);
      const fresh = batch.filter((_, i) => replies[i].length && !places[i]).map(([, log]) => log);
      if (fresh.length) {
        // was a log this reader holds no place in trimmed past where it goes on?
        const infos = await Promise.all(fresh.map((log) => this.host.send("XINFO", ["STREAM", log])));
        fresh.forEach((log, i) => {
          if (trimmedPast(infos[i], start)) throw new PresenceResyncRequired(`the event log ${log} was trimmed past this cursor: ${FRESH}`, "trimmed");
        });
      }
      let broke = false;
      for (let i = 0; i < batch.length; i++) {
        const [logQueue, log] = batch[i];
        const [place, n, entries] = [places[i], counts[i], replies[i]];
        let last = place;
        let found = foreign.get(log);
        if (found === undefined) foreign.set(log, (found = { queue: logQueue, aside: [] }));
        for (const entry of place ? entries.slice(1) : entries) {
          last = entry[0].toString("utf8");
          for (const item of loggedEvents(this.keys, logQueue, entry, found.aside)) {
            if (group === null || item.event.group === group) events.push(item);
          }
          if (streamId(last)[0] >= lagFloor) recent.set(logQueue, last);
          if (events.length >= limit) return { ...at, log: [logQueue, last] };
        }
        if (entries.length === n) {
          // more of this log: go on from its last entry
          [reached, after] = [logQueue, last];
          broke = true;
          break;
        }
      }
      if (!broke) {
        [reached, after] = ["", ""];
        const done = new Set(batch.map(([q]) => q));
        logs = logs.filter(([q]) => !done.has(q));
        continue;
      }
      logs = logs.filter(([q]) => byCodePoint(q, reached) >= 0);
    }
    return { ...at, log: null, derived: ["", 0, 0n, 0n] };
  }

  /** PresenceResyncRequired for the logs that no longer hold the entry a reader read last,
   * saying whether the first was trimmed past it or lost it. */
  private async resyncLost(lost: [string, string][]): Promise<never> {
    const [log, place] = lost[0];
    let reply: unknown;
    let failure: unknown = null;
    try {
      reply = await this.host.send("XINFO", ["STREAM", log]);
    } catch (error) {
      failure = error;
    }
    if (failure === null && trimmedPast(reply, place)) {
      throw new PresenceResyncRequired(`the event log ${log} was trimmed past this cursor: ${FRESH}`, "trimmed");
    }
    if (failure !== null && !noSuchKey(failure)) throw failure;
    const where = failure !== null ? "is gone" : `no longer holds ${place}`;
    throw new PresenceResyncRequired(
      `Redis lost events this cursor read: the event log ${log} ${where}, the last entry read there (a failover to a replica that missed the last writes, or keys deleted by hand): ${FRESH}`,
      "lost",
    );
  }

  /** The event logs with an event since `oldestMs` (one queue's, when given). */
  private async recentLogs(oldestMs: bigint, queue: string | null): Promise<string[]> {
    if (queue !== null) return [this.eventsLog(queue)];
    const logs: string[] = [];
    const page = this.host.groupsPerCall;
    for (let offset = 0; ; offset += page) {
      const found = (await this.host.send("ZRANGEBYSCORE", [this.keys.events, oldestMs.toString(), "+inf", "LIMIT", offset, page])) as string[];
      logs.push(...found.map(text));
      if (found.length < page) return logs;
    }
  }

  /** Where a new cursor goes on in each recently written log: after its last entry. */
  private async logEnds(serverMs: bigint, queue: string | null): Promise<Map<string, string>> {
    const logs = await this.recentLogs(serverMs - BigInt(LOG_LAG_MS), queue);
    const infos = await Promise.all(logs.map((log) => this.host.send("XINFO", ["STREAM", log]).catch((error: unknown) => error)));
    const ends = new Map<string, string>();
    logs.forEach((log, i) => {
      const reply = infos[i];
      if (reply instanceof Error) {
        if (noSuchKey(reply)) return; // the log went (expired) since it was listed
        throw reply;
      }
      const last = lastGenerated(reply);
      if (last !== null) ends.set(this.queueOfEvents(log), last);
    });
    return ends;
  }

  /** One page of indexed groups (of one queue, or one group) from the member `start` on
   * (inclusive; null: the first), and the member the next page starts after. */
  private async listed(queue: string | null, group: string | null, start: string | null, skipped: Skipped[]): Promise<[GroupKeys[], string | null]> {
    if (queue !== null && group !== null) return [[this.keys.group(queue, group)], null];
    const [first, high] = queue !== null ? this.keys.queueRange(queue) : ["-", "+"];
    const low = start !== null ? `[${start}` : first;
    const page = this.host.groupsPerCall;
    const [members] = await Promise.all([
      this.host.send("ZRANGEBYLEX", [this.keys.groups, low, high, "LIMIT", 0, page]) as Promise<string[]>,
      this.host.checkProtocol(),
    ]);
    const groups: GroupKeys[] = [];
    for (const member of members) {
      try {
        groups.push(this.keys.fromMember(text(member)));
      } catch (error) {
        if (!(error instanceof PresenceError)) throw error;
        skipped.push({ key: text(member), reason: error.message });
      }
    }
    return [group === null ? groups : groups.filter((gk) => gk.group === group), members.length === page ? text(members[members.length - 1]) : null];
  }

  /** The stale and expired events of `(sinceNs, at.nowNs]`, derived from each group's sorted
   * set, a group at a time in the order of the index, into `events` until it holds `limit`.
   * Returns where the window stands then, or null when it is done. */
  private async crossed(sinceNs: bigint, at: Window, events: Ordered[], queue: string | null, group: string | null, limit: number): Promise<Window | null> {
    let [member, kindAt, scoreAt, skipAt] = at.derived as [string, number, bigint, bigint];
    const most = Math.min(this.host.consumersPerCall, limit);
    const kinds = ["stale", "expired"] as const;
    const skipped: Skipped[] = [];
    for (;;) {
      const [listedGroups, goingOn] = await this.listed(queue, group, member || null, skipped);
      // A group whose shared TTL cannot be read: set aside (its data error, when it is the
      // one group the changes are read of).
      const settings = await this.host.sharedTtls(listedGroups);
      const groups: GroupKeys[] = [];
      const ttls: number[] = [];
      listedGroups.forEach((gk, i) => {
        const ttl = settings[i];
        if (!(ttl instanceof Spoilt)) {
          groups.push(gk);
          ttls.push(ttl);
        } else if (queue !== null && group !== null) throw ttl.error();
        else skipped.push({ key: gk.data, reason: ttl.reason, queue: gk.queue, group: gk.group });
      });
      const reads: { gk: GroupKeys; number: 0 | 1; ttl: number; low: bigint; high: bigint; first: bigint; skip: bigint }[] = [];
      groups.forEach((gk, g) => {
        kinds.forEach((kind, number) => {
          const here = gk.data === member;
          if (here && number < kindAt) return;
          const [low, high] = eventWindow(kind, sinceNs, at.nowNs, ttls[g]);
          const resumed = here && number === kindAt && skipAt > 0n;
          const [first, skip] = resumed ? [scoreAt, skipAt] : [floorDiv(low, 1000n), 0n];
          reads.push({ gk, number: number as 0 | 1, ttl: ttls[g], low, high, first, skip });
        });
      });
      const found = (await Promise.all(
        reads.map((r) => this.host.send("ZRANGEBYSCORE", [r.gk.hb, r.first.toString(), floorDiv(r.high, 1000n).toString(), "WITHSCORES", "LIMIT", r.skip.toString(), most])),
      )) as string[][];
      const pairs = found.map((flat) => {
        const out: [string, bigint][] = [];
        for (let i = 0; i + 1 < flat.length; i += 2) out.push([text(flat[i]), BigInt(Math.trunc(Number(text(flat[i + 1]))))]);
        return out;
      });
      const values = (await Promise.all(
        reads.map((r, i) => (pairs[i].length ? this.host.send("HMGET", [r.gk.data, ...pairs[i].map(([c]) => c)]) : Promise.resolve([]))),
      )) as (string | null)[][];
      let broke = false;
      for (let i = 0; i < reads.length; i++) {
        const part = pairs[i];
        if (!part.length) continue;
        const { gk, number, ttl, low, high, first, skip } = reads[i];
        let [score, ties] = [first, skip];
        for (let j = 0; j < part.length; j++) {
          const [consumer, atScore] = part[j];
          [score, ties] = atScore === score ? [score, ties + 1n] : [atScore, 1n];
          const value = values[i][j];
          if (value === null) continue;
          const event = groupEvent(kinds[number], gk, consumer, text(value), ttl);
          const beat = event?.lastHeartbeatNs ?? 0n;
          if (event !== null && low < beat && beat <= high) {
            events.push({ event, place: null });
            if (events.length >= limit) {
              this.host.report(skipped);
              return { ...at, derived: [gk.data, number, score, ties] };
            }
          }
        }
        if (part.length === most) {
          // more of this one: the next round goes on from it
          [member, kindAt, scoreAt, skipAt] = [gk.data, number, score, ties];
          broke = true;
          break;
        }
      }
      if (!broke) {
        if (goingOn === null) {
          this.host.report(skipped);
          return null;
        }
        // `start` is inclusive: the next page begins after this page's last group
        [member, kindAt, scoreAt, skipAt] = [goingOn + "\x00", 0, 0n, 0n];
      }
    }
  }
}

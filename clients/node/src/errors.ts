/** The errors of the client: one family, as in the Python package (docs/protocol.md). */

/** Base of every error this client throws for a Redis-side failure. */
export class PresenceError extends Error {
  override name = "PresenceError";
}

/** A key under the prefix holds data this client did not write (a key of another type, a
 * stored value that is not the protocol's). */
export class PresenceDataError extends PresenceError {
  override name = "PresenceDataError";
}

/** The prefix's `P:protocol` key names a protocol version this client does not speak (the
 * message names it); a write refused for it wrote nothing (the script checks it). */
export class PresenceProtocolError extends PresenceDataError {
  override name = "PresenceProtocolError";
}

/** `snapshot({ withMeta: true })` met metadata this client did not write: every row was read
 * (those consumers' `meta` empty) and is in `rows`; `unreadable` maps `"queue/group/consumer"`
 * to what is wrong (the Python package's `PresenceMetaError`). */
export class PresenceMetaError extends PresenceDataError {
  override name = "PresenceMetaError";
  constructor(
    readonly unreadable: Map<string, string>,
    readonly rows: unknown[],
  ) {
    const first = [...unreadable.values()][0] ?? "";
    super(unreadable.size > 1 ? `${first}; and ${unreadable.size - 1} more` : first);
  }
}

/** A beat's explicit `nowNs` is too far ahead of the server clock (the clock guard). */
export class PresenceClockError extends PresenceError {
  override name = "PresenceClockError";
}

/** Part of a batch (or a prune) was refused for bad data; the rest was done. */
export class PresenceBatchError extends PresenceError {
  override name = "PresenceBatchError";
  constructor(
    message: string,
    /** `"queue/group"` -> why that group (or one of its consumers) was refused. */
    readonly failed: Map<string, PresenceError>,
    /** How many beats were written (or consumers pruned). */
    readonly completed: number,
    /** The `[queue, group, consumer]` beats not written (or consumers left in place). */
    readonly refused: [string, string, string][],
  ) {
    super(message);
  }

  /** Of a batch of beats: the written beats whose consumer was asked to drain. */
  drainRequested: [string, string, string][] = [];
}

const DATA = "PRESENCEDATA ";
const CLOCK = "PRESENCECLOCK ";
const PROTOCOL = "PRESENCEPROTOCOL ";

/** The client's error for a script's refusal text (`WRONGTYPE ...`, `PRESENCEDATA ...`,
 * `PRESENCECLOCK ...`, `PRESENCEPROTOCOL ...`), or for a driver error reply. */
export function refusal(message: string): PresenceError {
  if (message.startsWith(PROTOCOL)) return new PresenceProtocolError(message.slice(PROTOCOL.length));
  if (message.startsWith(DATA)) return new PresenceDataError(message.slice(DATA.length));
  if (message.startsWith(CLOCK)) return new PresenceClockError(message.slice(CLOCK.length));
  if (message.startsWith("WRONGTYPE")) return new PresenceDataError(`unexpected data under the prefix: ${message}`);
  return new PresenceError(message);
}

/** A driver error as the client's error (script refusals and WRONGTYPE), else unchanged. */
export function translate(error: unknown): unknown {
  if (error instanceof Error && error.name === "ReplyError") return refusal(error.message);
  return error;
}

/** Why `changes` cannot go on from a cursor: the event log was trimmed past it (`trimmed`),
 * Redis lost what it read (`epoch`: its marker is gone or changed; `lost`: a log no longer
 * holds the entry it read last; `vanished`: a group `follow` holds consumers of is gone
 * without events), it is older than the logs last (`old`), or an earlier release made it
 * (`legacy`). */
export type ResyncReason = "trimmed" | "epoch" | "lost" | "vanished" | "old" | "legacy";

/** `changes` cannot go on from this cursor: take a fresh `snapshot` and a fresh cursor
 * (`changes()` without one); `reason` says why (the message says it in words). */
export class PresenceResyncRequired extends PresenceError {
  override name = "PresenceResyncRequired";
  constructor(
    message: string,
    readonly reason: ResyncReason,
  ) {
    super(message);
  }
}

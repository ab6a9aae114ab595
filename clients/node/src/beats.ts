/** What protocol version 2 adds to a beat (docs/protocol.md; the Python package's
 * redis_presence/beats.py): the capacity and draining a beat reports, the instance token of
 * the process that beats, and the drain requests a beat's reply carries back. */
import { randomBytes } from "node:crypto";

/** A beat of `heartbeatMany`: `[queue, group, consumer, leaseCount?]` as in version 1, or a
 * `BeatSpec` (capacity and draining: undefined or null keep the stored ones). */
export interface BeatSpec {
  queue: string;
  group: string;
  consumer: string;
  leaseCount?: number;
  capacity?: number | null;
  draining?: boolean | null;
}

/** `heartbeat`'s answer: whether the consumer was asked to drain (`requestDrain`) and has
 * not acknowledged it with a draining beat. */
export interface BeatReply {
  drainRequested: boolean;
}

/** `heartbeatManyWithDrains`'s answer: how many beats were written, and the written beats
 * whose consumer was asked to drain, as `[queue, group, consumer]` in the order given. */
export interface Written {
  count: number;
  drainRequested: [string, string, string][];
}

let drawn: string | null = null;

/** This process's instance token: 16 hex digits drawn once per process (a restarted worker
 * beats with a new one, which is how a duplicate consumer name is told from a restart). */
export function processInstance(): string {
  if (drawn === null) drawn = randomBytes(8).toString("hex");
  return drawn;
}

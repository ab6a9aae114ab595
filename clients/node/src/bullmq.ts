/** The BullMQ recipe (docs/protocol.md's clients, README "Node.js"): a worker beats on each
 * lock renewal with its active job count as lease_count, beats when a job starts or ends,
 * beats idle when the queue is drained (and every `idleBeatMs` while it waits), and
 * deregisters when it closes. Structural types: this module does not import bullmq. */
import type { PresenceRegistry } from "./registry";

/** What the recipe needs of a BullMQ `Worker`: its events. */
export interface WorkerEvents {
  on(event: "active" | "completed" | "failed" | "drained" | "closing" | "locksRenewed" | "error", listener: (...args: never[]) => void): unknown;
}

export interface TrackOptions {
  queue: string;
  group: string;
  consumer: string;
  /** How often an idle worker beats (default: a third of the shared TTL's default). */
  idleBeatMs?: number;
  /** Where a failed beat goes (default: ignored; the next beat retries). */
  onError?: (error: unknown) => void;
}

/** Make `worker`'s presence visible through `presence`; returns a function that stops it
 * (deregisters the worker), resolved once the deregister is done, whoever began it. */
export function trackBullMQWorker(worker: WorkerEvents, presence: PresenceRegistry, options: TrackOptions): () => Promise<void> {
  const { queue, group, consumer } = options;
  const onError = options.onError ?? (() => undefined);
  let active = 0;
  let closed = false;
  let stopping: Promise<void> | null = null;
  const beat = () => {
    if (!closed) presence.heartbeat(queue, group, consumer, active).catch(onError);
  };
  worker.on("active", () => {
    active += 1;
    beat();
  });
  const done = () => {
    active = Math.max(0, active - 1);
    beat();
  };
  worker.on("completed", done);
  worker.on("failed", done);
  worker.on("locksRenewed", beat);
  worker.on("drained", beat);
  const timer = setInterval(beat, options.idleBeatMs ?? 10_000);
  timer.unref();
  // Every call answers the same promise: a caller that awaits it after `closing` began the
  // deregister waits for that deregister.
  const stop = () => {
    if (stopping === null) {
      closed = true;
      clearInterval(timer);
      stopping = presence.deregister(queue, group, consumer).then(() => undefined, onError);
    }
    return stopping;
  };
  worker.on("closing", () => void stop());
  beat();
  return stop;
}

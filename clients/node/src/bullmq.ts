/** The BullMQ recipe (docs/protocol.md's clients, README "Node.js"): a worker beats on each
 * lock renewal with its active job count as lease_count and its `concurrency` as capacity,
 * beats when a job starts or ends, beats idle when the queue is drained (and every
 * `idleBeatMs` while it waits), beats draining from `closing` on and deregisters once
 * `closed`. A beat whose reply says a drain was requested (`requestDrain`) closes the worker
 * (by default): it finishes the jobs it holds, then leaves. Structural types: this module
 * does not import bullmq. */
import type { PresenceRegistry } from "./registry";

/** What the recipe needs of a BullMQ `Worker`: its events, its concurrency (reported as
 * capacity when it is a number) and `close` (what a drain request calls by default). */
export interface WorkerEvents {
  on(event: "active" | "completed" | "failed" | "drained" | "closing" | "closed" | "locksRenewed" | "error", listener: (...args: never[]) => void): unknown;
  readonly concurrency?: unknown;
  close?(): Promise<unknown>;
}

export interface TrackOptions {
  queue: string;
  group: string;
  consumer: string;
  /** How often an idle worker beats (default: a third of the shared TTL's default). */
  idleBeatMs?: number;
  /** Where a failed beat goes (default: ignored; the next beat retries). */
  onError?: (error: unknown) => void;
  /** Called once when a beat's reply says a drain was requested (default: `worker.close()`,
   * which lets the worker finish its active jobs, beating draining, and then deregisters
   * it; `() => worker.pause()` keeps it present, paused, instead). */
  onDrainRequested?: () => unknown;
}

/** Make `worker`'s presence visible through `presence`; returns a function that stops it
 * (deregisters the worker), resolved once the deregister is done, whoever began it. */
export function trackBullMQWorker(worker: WorkerEvents, presence: PresenceRegistry, options: TrackOptions): () => Promise<void> {
  const { queue, group, consumer } = options;
  const onError = options.onError ?? (() => undefined);
  const onDrain = options.onDrainRequested ?? (() => worker.close?.());
  let active = 0;
  let closing = false;
  let closed = false;
  let drainAsked = false;
  let stopping: Promise<void> | null = null;
  // Beats in flight: the deregister waits for them, so that none lands after it (a beat whose
  // shared TTL is being read has not reached the server yet) and brings the worker back.
  const flying = new Set<Promise<void>>();
  const capacity = () => {
    const n = worker.concurrency;
    return typeof n === "number" && Number.isInteger(n) && n >= 0 ? n : null;
  };
  const drained = () => {
    if (drainAsked || closing) return;
    drainAsked = true;
    Promise.resolve()
      .then(onDrain)
      .catch(onError);
  };
  const beat = () => {
    if (closed) return;
    const flight: Promise<void> = presence
      .heartbeat(queue, group, consumer, active, { capacity: capacity(), draining: closing })
      .then((reply) => {
        if (reply.drainRequested) drained();
      })
      .catch(onError)
      .finally(() => flying.delete(flight));
    flying.add(flight);
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
  // Every call answers the same promise: a caller that awaits it after `closed` began the
  // deregister waits for that deregister.
  const stop = () => {
    if (stopping === null) {
      closed = true;
      clearInterval(timer);
      stopping = Promise.allSettled([...flying])
        .then(() => presence.deregister(queue, group, consumer))
        .then(() => undefined, onError);
    }
    return stopping;
  };
  // Closing: the worker finishes its active jobs and takes no more; it says so (draining,
  // which also acknowledges a drain request) until it is closed, then leaves.
  worker.on("closing", () => {
    closing = true;
    beat();
  });
  worker.on("closed", () => void stop());
  beat();
  return stop;
}

/** The shared settings (docs/protocol.md, section 8): the TTL and the progress budget stored
 * for a prefix or a group, as this client reads them, a spoilt one included. */
import { PresenceDataError } from "./errors";
import type { GroupKeys } from "./keys";
import { MAX_TTL_MS } from "./validation";

export const DEFAULT_PRESENCE_TTL_MS = 30_000;
export const DEFAULT_STUCK_AFTER_MS = 300_000;

/** Which shared setting: the TTL or the progress budget. */
export type Kind = "ttl" | "stuck";

const WHAT: Record<Kind, string> = { ttl: "a TTL", stuck: "a progress budget" };
const DEFAULTS: Record<Kind, number> = { ttl: DEFAULT_PRESENCE_TTL_MS, stuck: DEFAULT_STUCK_AFTER_MS };

/** A shared setting this client cannot read (a value, or a key type, it did not write): why.
 * The cache keeps it as it keeps a value, and it is thrown afresh where it is needed. */
export class Spoilt {
  constructor(readonly reason: string) {}

  error(): PresenceDataError {
    return new PresenceDataError(this.reason);
  }
}

/** A setting as read: the stored ms, Spoilt, or null (nothing stored). */
export type Setting = number | Spoilt | null;

/** A stored setting from its `GET` reply (a data error there: a key of another type). */
export function storedSetting(key: string, reply: string | null | PresenceDataError, kind: Kind): Setting {
  if (reply === null) return null;
  if (reply instanceof PresenceDataError) return new Spoilt(`${key} holds another type of data than ${WHAT[kind]}: ${reply.message}`);
  if (!/^\d{1,13}$/.test(reply) || Number(reply) < 1 || Number(reply) > MAX_TTL_MS) {
    return new Spoilt(`${key} holds ${WHAT[kind]} this package did not write: '${reply.slice(0, 40)}'`);
  }
  return Number(reply);
}

/** The data error of a spoilt setting of the prefix: every group without its own uses it, so
 * it is no group's to set aside (docs/protocol.md, section 8). */
export function prefixError(spoilt: Spoilt, kind: Kind): PresenceDataError {
  const fix = kind === "ttl" ? "setTtl, or redis-presence ttl set / unset" : "the Python package's set_stuck_after";
  return new PresenceDataError(
    `${spoilt.reason}; it is the prefix's shared ${WHAT[kind].slice(2)}, which every group without its own uses, so every read that needs it fails until it is stored again or deleted (${fix})`,
  );
}

/** Each group's setting of `kind` from what a read saw (`seen`, by key): its own, else the
 * prefix's (`prefixKey`), else the default; Spoilt for a group whose own cannot be read (its
 * group's alone); a spoilt one of the prefix throws where a group has none of its own. */
export function settled(seen: ReadonlyMap<string, Setting>, prefixKey: string, groups: readonly GroupKeys[], kind: Kind): (number | Spoilt)[] {
  const prefix = seen.get(prefixKey) ?? null;
  return groups.map((gk) => {
    const own = seen.get(gk[kind]) ?? null;
    if (own !== null) return own;
    if (prefix instanceof Spoilt) throw prefixError(prefix, kind);
    return prefix ?? DEFAULTS[kind];
  });
}

/** The values of `settings` that could be read, or their error (a spoilt one throws). */
export function sound(settings: (number | Spoilt)[]): number[] {
  return settings.map((value) => {
    if (value instanceof Spoilt) throw value.error();
    return value;
  });
}

/** redis-presence for Node.js: wire protocol 2, reading version 1 too (docs/protocol.md of the repository). */
export * from "./errors";
export { ACCEPTED_VERSIONS, byCodePoint, decodeName, encodeMeta, encodeName, Keyspace, PROTOCOL_VERSION, type GroupKeys } from "./keys";
export * from "./registry";
export * from "./validation";
export { LUA_FOLDER, SCRIPT_NAMES, script, type Script, type ScriptName } from "./scripts";
export { trackBullMQWorker, type TrackOptions, type WorkerEvents } from "./bullmq";
export { type Changes, type ChangesOptions, type FollowCursor, type FollowMessage, type FollowOptions, type FollowSnapshot } from "./changes";
export { DEFAULT_CHANGES_LIMIT, DEFAULT_FOLLOW_INTERVAL_MS, EVENT_KINDS, type EventKind, LOG_LAG_MS, MAX_CHANGES_LIMIT, type PresenceEvent } from "./events";

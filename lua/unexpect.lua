-- unexpect.lua: forget a declared group (what unexpect() sends).
-- KEYS[1] the queue's declarations (P:{q}:expect, a hash), then on a standalone server only
--         KEYS[2] the index of declared queues (P:expects) and KEYS[3] the protocol version
--         (on a cluster both live in other slots: the caller checks the version first)
-- ARGV[1] the group (its raw name)
-- Returns {removed, left}: 1 when the group was declared (0: it was not), and how many
-- groups the queue still declares. On a standalone server a queue left with none leaves the
-- index in this call; on a cluster the caller unlists it, re-checks it and lists it again
-- when a racing expect declared a group meanwhile (as the index of groups,
-- docs/protocol.md, section 14). Refused before anything is written: a prefix of another
-- protocol version (check_protocol).
local refused = check_protocol(3)
if refused then return refused end
local removed = redis.call('HDEL', KEYS[1], ARGV[1])
local left = redis.call('HLEN', KEYS[1])
if KEYS[2] and left == 0 then redis.call('ZREM', KEYS[2], KEYS[1]) end
return {removed, left}

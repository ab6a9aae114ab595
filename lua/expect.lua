-- expect.lua: declare that a group must have active readers (what expect() sends): its
-- minimum in its queue's declarations, and the queue in the index of declared queues.
-- KEYS[1] the queue's declarations (P:{q}:expect, a hash), then on a standalone server only
--         KEYS[2] the index of declared queues (P:expects) and KEYS[3] the protocol version
--         (on a cluster both live in other slots: the caller checks the version first and
--         lists the queue after this call, so a racing unexpect's re-check sees it)
-- ARGV[1] the group (its raw name), ARGV[2] its minimum (a decimal integer >= 1)
-- Returns 0. Refused before anything is written: a prefix of another protocol version
-- (check_protocol).
local refused = check_protocol(3)
if refused then return refused end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if KEYS[2] then redis.call('ZADD', KEYS[2], 0, KEYS[1]) end
return 0

-- deregister.lua: forget one consumer (graceful shutdown).
-- KEYS[1] zset consumer -> heartbeat microseconds, KEYS[2] hash of stored values,
-- KEYS[3] index mark of the group, KEYS[4] set, the index; only when it shares the node
-- ARGV[1] consumer, ARGV[2] the group's index member
-- Returns {existed (0/1), emptied (0/1)}; emptied = 1 asks the caller to remove the group
-- from the index itself (only on a cluster).
local err = expect_types(1, 3, {'zset', 'hash', 'string'})
  or (KEYS[4] and expect_types(4, 4, {'set'}))
if err then return err end

local existed = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
local emptied = 0
if existed == 1 and redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('DEL', KEYS[2], KEYS[3])
  if KEYS[4] then
    redis.call('SREM', KEYS[4], ARGV[2])
  else
    emptied = 1
  end
end
return {existed, emptied}

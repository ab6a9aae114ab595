-- deregister.lua: forget one consumer (graceful shutdown).
-- KEYS: group_keys(1) of lib.lua (sorted set, hash, index mark), then INDEX on a
--       standalone server
-- ARGV[1] consumer
-- Returns {existed (0/1), emptied (0/1)}; emptied = 1 asks the caller to remove the group
-- from the index itself (only on a cluster, where there is no INDEX).
local err = expect_types(1, KEYS_PER_GROUP, {'zset', 'hash', 'string'})
  or (INDEX and expect_types(#KEYS, #KEYS, {'zset'}))
if err then return err end

local zset, data, mark = group_keys(1)
local existed = redis.call('ZREM', zset, ARGV[1])
redis.call('HDEL', data, ARGV[1])
local emptied = 0
if existed == 1 and redis.call('EXISTS', zset) == 0 then
  redis.call('DEL', data, mark)
  if INDEX then
    redis.call('ZREM', INDEX, data)
  else
    emptied = 1
  end
end
return {existed, emptied}

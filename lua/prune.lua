-- prune.lua: remove the expired consumers of the given groups.
-- KEYS: group_keys(g) of lib.lua for each group g = 1..GROUPS, then INDEX on a standalone
--       server
-- ARGV[1] now_ns as a decimal string, or '' for the server clock; ARGV[2] ttl_ms
-- ARGV[2 + g] the index member of group g
-- Returns {removed, g...}: how many consumers went, then the numbers of the groups that are
-- empty (emptied now or before) and that the caller must remove from the index itself (only
-- on a cluster, where there is no INDEX).
-- Expired <=> (now - hb) // 1 ms > 2 ttl <=> hb <= now - (2 ttl + 1) ms: every score below
-- the horizon, and on the horizon's microsecond those whose nanosecond rest is <= now's.
-- Cost: O(log n) per group plus O(1) per removed consumer; kept consumers are not visited.
local err = expect_types(1, GROUPS * KEYS_PER_GROUP, {'zset', 'hash', 'string'})
  or (INDEX and expect_types(#KEYS, #KEYS, {'set'}))
if err then return err end

local now_us, now_rest = now_parts(ARGV[1])
local horizon = now_us - (2 * tonumber(ARGV[2]) + 1) * 1000
local edge = int_str(horizon)
local removed = 0
local emptied = {}
for g = 1, GROUPS do
  local zset, data, mark = group_keys(g)
  local doomed = redis.call('ZRANGEBYSCORE', zset, '-inf', '(' .. edge)
  for _, consumer in ipairs(redis.call('ZRANGEBYSCORE', zset, edge, edge)) do
    local value = redis.call('HGET', data, consumer)
    local _, rest = split_ns(stored_heartbeat(value or '0 0 0'))
    if rest <= now_rest then doomed[#doomed + 1] = consumer end
  end
  for i = 1, #doomed, 1000 do
    local chunk = {unpack(doomed, i, math.min(i + 999, #doomed))}
    redis.call('ZREM', zset, unpack(chunk))
    redis.call('HDEL', data, unpack(chunk))
  end
  removed = removed + #doomed
  -- An empty group is unlisted even when nothing expired: on a cluster, a heartbeat that
  -- races with a deregister can leave an empty group in the index (docs/index-protocol.md).
  if redis.call('EXISTS', zset) == 0 then
    redis.call('DEL', data, mark)
    if INDEX then
      redis.call('SREM', INDEX, ARGV[2 + g])
    else
      emptied[#emptied + 1] = g
    end
  end
end
local out = {removed}
for _, g in ipairs(emptied) do out[#out + 1] = g end
return out

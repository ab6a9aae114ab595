-- prune.lua: remove the expired consumers of the given groups, visiting at most a budget,
-- and log who was pruned.
-- KEYS: group_keys(g) of lib.lua for each group g = 1..GROUPS, then INDEX and EVENTS on a
--       standalone server
-- ARGV[1] now_ns as a decimal string (the caller reads the server clock once for a whole
--         prune); ARGV[2] budget: the most consumers this call visits; ARGV[3] where group 1
--         resumes among the consumers on the horizon's microsecond (0: start); ARGV[4] how
--         many entries an event log keeps, ARGV[5] how long it lasts after its last entry
--         (ms); ARGV[5 + g] the TTL of group g in ms
-- Returns {removed, stop, offset, logged, g...}: how many consumers went; 0, or the number
-- of the group where the budget ran out and the offset to resume it at (the caller sends
-- that group and the ones after it again); the millisecond of the last event this call
-- logged (0: none; only on a cluster); then the groups found empty (emptied now or before),
-- which the caller must remove from the index itself (only on a cluster).
-- Expired <=> (now - hb) // 1 ms > 2 ttl <=> hb <= now - (2 ttl + 1) ms: every score below
-- the horizon, and on the horizon's microsecond those whose nanosecond rest is <= now's.
-- Cost: O(log n) per group plus O(1) per visited consumer, at most `budget` in all: kept
-- consumers are not visited, but for those on the horizon's microsecond.
local err = expect_types(1, GROUPS * KEYS_PER_GROUP, {'zset', 'hash', 'string', 'stream'})
  or (INDEX and expect_types(#KEYS - 1, #KEYS, {'zset', 'zset'}))
if err then return err end

local now_us, now_rest, now = now_parts(ARGV[1])
local left = tonumber(ARGV[2])
local kept_log, log_ms = ARGV[4], ARGV[5]
local removed, stop, resume, logged = 0, 0, 0, 0
local emptied = {}
for g = 1, GROUPS do
  local zset, data, mark = group_keys(g)
  local edge = int_str(now_us - (2 * tonumber(ARGV[5 + g]) + 1) * 1000)
  local offset = g == 1 and tonumber(ARGV[3]) or 0
  local doomed = redis.call('ZRANGEBYSCORE', zset, '-inf', '(' .. edge, 'LIMIT', 0, left)
  left = left - #doomed
  if left == 0 then
    stop, resume = g, offset
  else
    local ties = redis.call('ZRANGEBYSCORE', zset, edge, edge, 'LIMIT', offset, left)
    local kept = 0
    for _, consumer in ipairs(ties) do
      local value = redis.call('HGET', data, consumer)
      local _, rest = split_ns(stored_heartbeat(value or '0 0 0'))
      if rest <= now_rest then doomed[#doomed + 1] = consumer else kept = kept + 1 end
    end
    left = left - #ties
    if left == 0 then stop, resume = g, offset + kept end
  end
  if #doomed > 0 then
    local values = redis.call('HMGET', data, unpack(doomed))
    local fields = {}
    for i, consumer in ipairs(doomed) do
      fields[#fields + 1] = 'c' .. consumer
      fields[#fields + 1] = now .. ' ' .. (values[i] or '0 0 0')
    end
    redis.call('ZREM', zset, unpack(doomed))
    redis.call('HDEL', data, unpack(doomed))
    removed = removed + #doomed
    logged = append_event(g, kept_log, log_ms, 'pruned', fields)
  end
  if stop ~= 0 then break end
  -- An empty group is unlisted even when nothing expired: on a cluster, a heartbeat that
  -- races with a deregister can leave an empty group in the index (docs/index-protocol.md).
  if redis.call('EXISTS', zset) == 0 then
    redis.call('DEL', data, mark)
    if INDEX then
      redis.call('ZREM', INDEX, data)
    else
      emptied[#emptied + 1] = g
    end
  end
end
if INDEX then logged = 0 end
local out = {removed, stop, resume, logged}
for _, g in ipairs(emptied) do out[#out + 1] = g end
return out

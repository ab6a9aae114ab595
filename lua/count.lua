-- count.lua: active consumers of each given group at one instant (a read: EVALSHA_RO runs it).
-- KEYS: group_keys(g) of lib.lua for each group g = 1..GROUPS (the marks are not read)
-- ARGV[1] now_ns as a decimal string, or '' for the server clock; ARGV[2] ttl_ms
-- Returns one count per group, in KEYS order.
-- Active <=> (now - hb) // 1 ms <= ttl <=> hb > now - (ttl + 1) ms. With microsecond scores:
-- every score above the horizon counts, and a heartbeat on the horizon's microsecond counts
-- when its nanosecond rest is above now's. Cost: O(log n) per group, whatever n is.
local now_us, now_rest = now_parts(ARGV[1])
local horizon = now_us - (tonumber(ARGV[2]) + 1) * 1000
local edge = int_str(horizon)
local counts = {}
for g = 1, GROUPS do
  local zset, data = group_keys(g)
  local n = redis.call('ZCOUNT', zset, '(' .. edge, '+inf')
  for _, consumer in ipairs(redis.call('ZRANGEBYSCORE', zset, edge, edge)) do
    local value = redis.call('HGET', data, consumer)
    if value then
      local _, rest = split_ns(stored_heartbeat(value))
      if rest > now_rest then n = n + 1 end
    end
  end
  counts[g] = n
end
return counts

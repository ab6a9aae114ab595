-- heartbeat_many.lua: record or refresh a batch of consumers of one queue (or of every
-- queue on a standalone server), each beat applied atomically. heartbeat_many() and the
-- reporters' flushes send it; a single heartbeat() sends heartbeat.lua.
-- KEYS, for each group g = 1..G:
--   KEYS[3g-2] zset  consumer -> last heartbeat in microseconds (score)
--   KEYS[3g-1] hash  consumer -> 'registered_ns last_heartbeat_ns lease_count'
--   KEYS[3g]   string, index mark: set while the group is known to be in the index
--              (used on a cluster only)
--   KEYS[3G+1] set   the index of (queue, group) members; only when it shares the node
-- ARGV[1] now_ns as a decimal string, or '' for the server clock (TIME)
-- ARGV[2] G, ARGV[3] lifetime of an index mark in milliseconds
-- ARGV[4 .. 3+G] the index member of each group
-- then one 4-tuple per beat: group number, consumer, lease_count, delay_us
--   (delay_us: how long before now the beat happened; the beat is stamped now - delay)
-- Returns the numbers of the groups the caller must add to the index itself (only when
-- KEYS[3G+1] is absent, i.e. on a cluster).
--
-- A key of another type is refused before anything is written, so a batch is all or
-- nothing. The index gets one TYPE, and on a cluster each mark one TYPE, which also tells
-- whether it exists; the first beat's HGET checks its hash, and its ZADD, the first write of
-- all, its sorted set (Redis refuses a command on a key of another type before it writes).
-- Every other group's sorted set and hash get one TYPE each first.
local groups = tonumber(ARGV[2])
local mark_ms = ARGV[3]
local index = KEYS[3 * groups + 1]
local first = 4 + groups  -- ARGV position of the first beat
if index then
  local err = expect_types(3 * groups + 1, 3 * groups + 1, {'set'})
  if err then return err end
end
local marked = {}
for g = 1, groups do
  if not index then
    local kind = redis.call('TYPE', KEYS[3 * g])['ok']
    if kind ~= 'none' and kind ~= 'string' then return refuse(3 * g, 'string') end
    marked[g] = kind == 'string'
  end
  if g ~= tonumber(ARGV[first]) then
    local err = expect_types(3 * g - 2, 3 * g - 1, {'zset', 'hash'})
    if err then return err end
  end
end

local now_us, now_rest, now_str = now_parts(ARGV[1])
for i = first, #ARGV, 4 do
  local g = tonumber(ARGV[i])
  local consumer = ARGV[i + 1]
  local delay = tonumber(ARGV[i + 3])
  local us, stamp = now_us, now_str
  if delay > 0 then
    us = now_us - delay
    if us < 0 then us = 0 end
    stamp = int_str(us) .. string.format('%03d', now_rest)
  end
  local data = KEYS[3 * g - 1]
  local old = redis.pcall('HGET', data, consumer)
  if type(old) == 'table' and old.err then return failed(old, 3 * g - 1, 'hash') end
  local added = redis.pcall('ZADD', KEYS[3 * g - 2], us, consumer)
  if type(added) == 'table' and added.err then return failed(added, 3 * g - 2, 'zset') end
  local registered = stamp
  if old then registered = string.match(old, '^%d+') end
  redis.call('HSET', data, consumer, registered .. ' ' .. stamp .. ' ' .. ARGV[i + 2])
end

-- Standalone: list every group of the batch (SADD is idempotent, and heals a deleted index).
if index then
  redis.call('SADD', index, unpack(ARGV, 4, 3 + groups))
  return {}
end
local missing = {}
for g = 1, groups do
  if not marked[g] then
    redis.call('SET', KEYS[3 * g], '1', 'PX', mark_ms)
    missing[#missing + 1] = g
  end
end
return missing

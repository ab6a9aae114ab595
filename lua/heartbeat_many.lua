-- heartbeat_many.lua: record or refresh a batch of consumers of one queue (or of every
-- queue on a standalone server), each beat applied atomically. heartbeat_many() and the
-- reporters' flushes send it; a single heartbeat() sends heartbeat.lua.
-- KEYS: group_keys(g) of lib.lua for each group g = 1..GROUPS, then INDEX on a standalone
--       server
-- ARGV[1] now_ns as a decimal string, or '' for the server clock (TIME)
-- ARGV[2] lifetime of an index mark in milliseconds (used on a cluster only)
-- then one 4-tuple per beat: group number, consumer, lease_count, delay_us
--   (delay_us: how long before now the beat happened; the beat is stamped now - delay)
-- Returns the numbers of the groups the caller must add to the index itself (only on a
-- cluster, where there is no INDEX).
--
-- A key of another type is refused before anything is written, so a batch is all or
-- nothing. The index gets one TYPE, and on a cluster each mark one TYPE, which also tells
-- whether it exists; the first beat's write_beat checks its own group's hash and sorted set
-- (Redis refuses a command on a key of another type before it writes). Every other group's
-- sorted set and hash get one TYPE each first.
local mark_ms = ARGV[2]
local first = 3  -- ARGV position of the first beat
if INDEX then
  local err = expect_types(#KEYS, #KEYS, {'zset'})
  if err then return err end
end
local marked = {}
for g = 1, GROUPS do
  local _, _, mark, at = group_keys(g)
  if not INDEX then
    local kind = redis.call('TYPE', mark)['ok']
    if kind ~= 'none' and kind ~= 'string' then return refuse(at + 2, 'string') end
    marked[g] = kind == 'string'
  end
  if g ~= tonumber(ARGV[first]) then
    local err = expect_types(at, at + 1, {'zset', 'hash'})
    if err then return err end
  end
end

local now_us, now_rest, now_str = now_parts(ARGV[1])
for i = first, #ARGV, 4 do
  local delay = tonumber(ARGV[i + 3])
  local us, stamp = now_us, now_str
  if delay > 0 then
    us = now_us - delay
    if us < 0 then us = 0 end
    stamp = int_str(us) .. string.format('%03d', now_rest)
  end
  local err = write_beat(tonumber(ARGV[i]), ARGV[i + 1], us, stamp, ARGV[i + 2])
  if err then return err end
end

-- Standalone: list every group of the batch (idempotent, and heals a deleted index).
if INDEX then
  local members = {}
  for g = 1, GROUPS do
    local _, data = group_keys(g)
    members[#members + 1] = 0
    members[#members + 1] = data
  end
  redis.call('ZADD', INDEX, unpack(members))
  return {}
end
local missing = {}
for g = 1, GROUPS do
  if not marked[g] then
    local _, _, mark = group_keys(g)
    redis.call('SET', mark, '1', 'PX', mark_ms)
    missing[#missing + 1] = g
  end
end
return missing

-- heartbeat_many.lua: record or refresh a batch of consumers of one queue (or of every
-- queue on a standalone server), each beat applied atomically. heartbeat_many() and the
-- reporters' flushes send it; a single heartbeat() sends heartbeat.lua.
-- KEYS: group_keys(g) of lib.lua for each group g = 1..GROUPS, then INDEX and EVENTS on a
--       standalone server
-- ARGV[1] now_ns as a decimal string, or '' for the server clock (TIME)
-- ARGV[2] lifetime of an index mark in milliseconds (used on a cluster only)
-- ARGV[3] how many entries an event log keeps, ARGV[4] how long it lasts after its last
-- entry, in ms
-- ARGV[4 + g] the shared TTL of group g in ms
-- then one 4-tuple per beat: group number, consumer, lease_count, delay_us
--   (delay_us: how long before now the beat happened; the beat is stamped now - delay)
-- Returns {} on a standalone server; on a cluster {groups, logged}: the numbers of the
-- groups the caller must add to the index itself, and the millisecond of the last event
-- this call logged (0: none), which the caller lists in the event index.
--
-- Events, one log entry per (kind, group): joined for a consumer the group did not hold
-- (at its stamp), recovered for one that was not active now and is after its beat (at now).
-- A key of another type is refused before anything is written, so a batch is all or
-- nothing: every key gets one TYPE first (the index, each mark, sorted set, hash and log).
local mark_ms, kept, log_ms = ARGV[2], ARGV[3], ARGV[4]
local first = 5 + GROUPS  -- ARGV position of the first beat
if INDEX then
  local err = expect_types(#KEYS - 1, #KEYS, {'zset', 'zset'})
  if err then return err end
end
local marked = {}
for g = 1, GROUPS do
  local _, _, mark, _, at = group_keys(g)
  if not INDEX then
    local kind = redis.call('TYPE', mark)['ok']
    if kind ~= 'none' and kind ~= 'string' then return refuse(at + 2, 'string') end
    marked[g] = kind == 'string'
  end
  local err = expect_types(at, at + 1, {'zset', 'hash'}) or check_log(g)
  if err then return err end
end

local now_us, now_rest, now_str = now_parts(ARGV[1])
local events = {}  -- events[g] = {joined = {...}, recovered = {...}}
for i = first, #ARGV, 4 do
  local g, consumer, lease = tonumber(ARGV[i]), ARGV[i + 1], ARGV[i + 2]
  local delay = tonumber(ARGV[i + 3])
  local us, stamp = now_us, now_str
  if delay > 0 then
    us = now_us - delay
    if us < 0 then us = 0 end
    stamp = int_str(us) .. string.format('%03d', now_rest)
  end
  local old = read_beat(g, consumer)
  local err, value = write_beat(g, consumer, old, us, stamp, lease)
  if err then return err end
  local kind, at = nil, nil
  if not old then
    kind, at = 'joined', stamp
  elseif inactive_at(stored_heartbeat(old), now_us, now_rest, tonumber(ARGV[4 + g]))
      and not inactive_at(stamp, now_us, now_rest, tonumber(ARGV[4 + g])) then
    kind, at = 'recovered', now_str
  end
  if kind then
    events[g] = events[g] or {}
    local fields = events[g][kind] or {}
    fields[#fields + 1] = 'c' .. consumer
    fields[#fields + 1] = at .. ' ' .. value
    events[g][kind] = fields
  end
end
local logged = 0
for g = 1, GROUPS do
  if events[g] then
    for _, kind in ipairs({'joined', 'recovered'}) do
      if events[g][kind] then logged = append_event(g, kept, log_ms, kind, events[g][kind]) end
    end
  end
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
return {missing, logged}

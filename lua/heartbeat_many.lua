-- heartbeat_many.lua: record or refresh a batch of consumers of one queue (or of every
-- queue on a standalone server), each beat applied atomically. heartbeat_many() and the
-- reporters' flushes send it; a single heartbeat() sends heartbeat.lua.
-- KEYS: group_keys(g) and meta_key(g) of lib.lua for each group g = 1..GROUPS (metadata: not
--       used here), then INDEX, EVENTS, EPOCH and the protocol version on a standalone server
-- ARGV[1] now_ns as a decimal string, or '' for the server clock (TIME)
-- ARGV[2] lifetime of an index mark in milliseconds (used on a cluster only)
-- ARGV[3] how many entries an event log keeps, ARGV[4] how long it lasts after its last
-- entry, in ms; ARGV[5] the clock guard: the most ms an explicit now_ns may be ahead of the
-- server clock ('': no guard)
-- ARGV[5 + g] the shared TTL of group g in ms
-- then one 5-tuple per beat: group number, consumer, lease_count, delay_us, progress_us
--   (delay_us: how long before now the beat happened; the beat is stamped now - delay;
--   progress_us: '' when the beat records no progress, else how long before now the last
--   progress happened, recorded as now - progress_us)
-- Returns {groups, logged, refused...}: on a cluster, groups are the numbers of the groups
-- the caller must add to the index itself and logged the millisecond of the last event this
-- call logged (0: none), which the caller lists in the event index ({} and 0 on a
-- standalone server); refused is a flat list of (group number, consumer, why) for what was
-- not written: consumer '' for a group refused whole, else that consumer's beats.
--
-- Events, one log entry per (kind, group): joined for a consumer the group did not hold
-- (at its stamp), recovered for one that was not active now and is after its beat (at now).
--
-- Isolation: bad data costs only what it spoils. Before anything is written, every key gets
-- one TYPE (the indexes, each mark, sorted set, hash and log) and every beat's stored value
-- is read and checked: a group with a key of another type is refused whole, a consumer
-- whose stored value this package did not write has its beats refused, and everything
-- else is written; the reply says what was refused and why. A prefix of another protocol
-- version (check_protocol, standalone only), a now_ns too far ahead of the server clock, or
-- an index of another type, refuses the whole call.
local mark_ms, kept, log_ms, max_future = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local first = 6 + GROUPS  -- ARGV position of the first beat
local refused = check_protocol(PROTOCOL_AT)
if refused then return refused end
local future = future_problem(ARGV[1], max_future)
if future then return redis.error_reply(future) end
if INDEX then
  local err = check_indexes()
  if err then return err end
end
local problem, marked = {}, {}
for g = 1, GROUPS do
  local _, _, mark, _, at = group_keys(g)
  if not INDEX then  -- marks are a cluster's
    local kind = redis.call('TYPE', mark)['ok']
    if kind ~= 'none' and kind ~= 'string' then problem[g] = refusal(at + 2, 'string') end
    marked[g] = kind == 'string'
  end
  problem[g] = problem[g] or type_problem(at, at + 1, {'zset', 'hash'})
    or type_problem(at + 3, at + 3, {'stream'})
end
-- Each beat's stored value, read once and checked before any write (false: none); spoilt[g]
-- maps the consumers of group g whose value this package did not write to why.
local olds, spoilt = {}, {}
for i = first, #ARGV, 5 do
  local g, consumer = tonumber(ARGV[i]), ARGV[i + 1]
  if not problem[g] then
    local _, data, _, _, at = group_keys(g)
    local old = redis.call('HGET', data, consumer)
    if old and not parse_beat(old) then
      spoilt[g] = spoilt[g] or {}
      spoilt[g][consumer] = corrupt(at + 1, consumer, old)
    end
    olds[i] = old
  end
end

local now_us, now_rest, now_str = now_parts(ARGV[1])
local events = {}  -- events[g] = {joined = {...}, recovered = {...}}
local latest = {}  -- latest[g][consumer]: the value this call wrote (a consumer beats twice)
for i = first, #ARGV, 5 do
  local g, consumer, lease = tonumber(ARGV[i]), ARGV[i + 1], ARGV[i + 2]
  if not problem[g] and not (spoilt[g] and spoilt[g][consumer]) then
    local delay = tonumber(ARGV[i + 3])
    local us, stamp = now_us, now_str
    if delay > 0 then
      us = now_us - delay
      if us < 0 then us = 0 end
      stamp = int_str(us) .. string.format('%03d', now_rest)
    end
    local progress = nil
    if ARGV[i + 4] ~= '' then
      progress = now_str
      local back = tonumber(ARGV[i + 4])
      if back > 0 then
        local pus = now_us - back
        if pus < 0 then pus = 0 end
        progress = int_str(pus) .. string.format('%03d', now_rest)
      end
    end
    latest[g] = latest[g] or {}
    local old = latest[g][consumer] or olds[i]
    local err, value, full = write_beat(g, consumer, old, us, stamp, lease, progress)
    if err then return err end  -- not a type error (checked above): an ACL denial, say
    latest[g][consumer] = full
    local kind, at = nil, nil
    local ttl = tonumber(ARGV[5 + g])
    if not old then
      kind, at = 'joined', stamp
    elseif inactive_at(select(2, parse_beat(old)), now_us, now_rest, ttl)
        and not inactive_at(stamp, now_us, now_rest, ttl) then
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
end
local logged = 0
for g = 1, GROUPS do
  if events[g] then
    for _, kind in ipairs({'joined', 'recovered'}) do
      if events[g][kind] then logged = append_event(g, kept, log_ms, kind, events[g][kind]) end
    end
  end
end

local out = {{}, 0}
for g = 1, GROUPS do
  if problem[g] then
    out[#out + 1] = g
    out[#out + 1] = ''
    out[#out + 1] = problem[g]
  elseif spoilt[g] then
    for consumer, why in pairs(spoilt[g]) do
      out[#out + 1] = g
      out[#out + 1] = consumer
      out[#out + 1] = why
    end
  end
end
if INDEX then
  -- Standalone: list every group written (idempotent, and heals a deleted index).
  local members = {}
  for g = 1, GROUPS do
    if not problem[g] then
      local _, data = group_keys(g)
      members[#members + 1] = 0
      members[#members + 1] = data
    end
  end
  if #members > 0 then redis.call('ZADD', INDEX, unpack(members)) end
  return out
end
for g = 1, GROUPS do
  if not problem[g] and not marked[g] then
    local _, _, mark = group_keys(g)
    redis.call('SET', mark, '1', 'PX', mark_ms)
    out[1][#out[1] + 1] = g
  end
end
out[2] = logged
return out

-- heartbeat_many.lua: record or refresh a batch of consumers of one queue (or of every
-- queue on a standalone server), each beat applied atomically. heartbeat_many() and the
-- reporters' flushes send it; a single heartbeat() sends heartbeat.lua.
-- KEYS: group_keys(g) and meta_key(g) of lib.lua for each group g = 1..GROUPS (metadata: not
--       used here), then INDEX, EVENTS, EPOCH, the protocol version, NEWEST and OLDEST on a
--       standalone server
-- ARGV[1] now_ns as a decimal string, or '' for the server clock (TIME)
-- ARGV[2] lifetime of an index mark in milliseconds (used on a cluster only)
-- ARGV[3] how many entries an event log keeps, ARGV[4] how long it lasts after its last
-- entry, in ms; ARGV[5] the clock guard: the most ms an explicit now_ns may be ahead of the
-- server clock ('': no guard)
-- ARGV[6] the writing process's instance token ('-': none); ARGV[7] cluster only: the
-- protocol version the caller read ('1' writes version 1 values; '' on a standalone server)
-- ARGV[7 + g] the shared TTL of group g in ms
-- then one 7-tuple per beat: group number, consumer, lease_count, delay_us, progress_us,
--   capacity, draining (delay_us: how long before now the beat happened; the beat is
--   stamped now - delay; progress_us: '' when the beat records no progress, else how long
--   before now the last progress happened, recorded as now - progress_us; capacity '' keeps
--   the stored one; draining '' keeps the flag, else '0' or '1')
-- Returns {groups, logged, drains, refused...}: on a cluster, groups are the numbers of the
-- groups the caller must add to the index itself and logged the millisecond of the last
-- event this call logged (0: none), which the caller lists in the event index ({} and 0 on
-- a standalone server); drains a flat list of (group number, consumer) for each consumer of
-- whom a drain is requested after this call; refused is a flat list of (group number,
-- consumer, why) for what was not written: consumer '' for a group refused whole, else that
-- consumer's beats.
--
-- Events, one log entry per (kind, group): joined for a consumer the group did not hold
-- (at its stamp), recovered for one that was not active now and is after its beat (at now);
-- with version 2, draining, restarted and conflict (beat_v2 in lib.lua), each at its beat's
-- instant. The fleet indexes (standalone): NEWEST raised to a group's newest beat that is
-- due (newest_due, ZADD GT), OLDEST lowered to a consumer that joins or goes back in time
-- (ZADD LT).
--
-- Isolation: bad data costs only what it spoils. Before anything is written, every beat's
-- stored value is read (HGET, which checks the hash) and checked, and each group that may
-- log an event has its log's type checked; the first ZADD of a group, its first write,
-- checks its sorted set. A group with a key of another type is refused whole (nothing of
-- it is written), a consumer whose stored value this package did not write has its beats
-- refused, and everything else is written; the reply says what was refused and why. A
-- prefix of another protocol version (check_protocol, standalone only), a now_ns too far
-- ahead of the server clock, or an index of another type, refuses the whole call.
local mark_ms, kept, log_ms, max_future, token = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local first = 8 + GROUPS  -- ARGV position of the first beat
local TUPLE = 7
local refused = check_protocol(PROTOCOL_AT, ARGV[7])
if refused then return refused end
local future = future_problem(ARGV[1], max_future)
if future then return redis.error_reply(future) end
if INDEX then
  local err = check_indexes()
  if err then return err end
end
local problem, marked = {}, {}
if not INDEX then  -- marks are a cluster's
  for g = 1, GROUPS do
    local _, _, mark, _, at = group_keys(g)
    local kind = redis.call('TYPE', mark)['ok']
    if kind ~= 'none' and kind ~= 'string' then problem[g] = refusal(at + 2, 'string') end
    marked[g] = kind == 'string'
  end
end
local now_us, now_rest, now_str = now_parts(ARGV[1])

-- Each beat's stored value, read once and parsed before any write: olds[i] (its fields,
-- as parse_value gives them but the lease: nil for a new consumer), gone[i] (its last beat is not active now); spoilt[g]
-- maps the consumers of group g whose value this package did not write to why; due[g]
-- says that group g may log an event (a new consumer, or one not active now, or any beat
-- of version 2 that may say draining, restart or conflict: its log's type is checked).
local olds, gone, spoilt, due = {}, {}, {}, {}
for i = first, #ARGV, TUPLE do
  local g, consumer = tonumber(ARGV[i]), ARGV[i + 1]
  if not problem[g] then
    local _, data, _, _, at = group_keys(g)
    local old = redis.pcall('HGET', data, consumer)
    if type(old) == 'table' then
      if not string.find(tostring(old.err), 'WRONGTYPE', 1, true) then return old end
      problem[g] = refusal(at + 1, 'hash')
    elseif not old then
      due[g] = true
    else
      local registered, hb, _, progress, cap, flags, conflict, inst, prev = parse_value(old)
      if registered then
        olds[i] = {registered, hb, progress, cap, flags, conflict, inst, prev}
        if inactive_at(hb, now_us, now_rest, tonumber(ARGV[7 + g])) then
          gone[i], due[g] = true, true
        end
        if MODE ~= '1' and ((ARGV[i + 6] == '1' and tonumber(flags) % 2 == 0)
            or (token ~= '-' and inst ~= '-' and inst ~= token)) then
          due[g] = true  -- draining, restarted or conflict may be logged
        end
      else
        spoilt[g] = spoilt[g] or {}
        spoilt[g][consumer] = corrupt(at + 1, consumer, old)
      end
    end
  end
end
for g = 1, GROUPS do
  if due[g] and not problem[g] then
    local _, _, _, _, at = group_keys(g)
    problem[g] = type_problem(at + 3, at + 3, {'stream'})
  end
end

claim()
local events = {}  -- events[g] = {joined = {...}, recovered = {...}, ...}
local latest = {}  -- latest[g][consumer]: the value this call wrote (a consumer beats twice)
local zset_ok = {}  -- zset_ok[g]: a ZADD into group g's sorted set succeeded
local joined = {}  -- joined[g]: a consumer joined group g (its sorted set grew)
local newest = {}  -- newest[g]: the newest beat (whole us) this call wrote into group g
local oldest = {}  -- oldest[g]: the oldest beat of a consumer that joined or went back
local back = {}  -- back[g]: a known consumer of group g went back in time
local drains = {}  -- drains[g][consumer]: a drain is requested after its last beat here
for i = first, #ARGV, TUPLE do
  local g, consumer, lease = tonumber(ARGV[i]), ARGV[i + 1], ARGV[i + 2]
  if not problem[g] and not (spoilt[g] and spoilt[g][consumer]) then
    local hb_key, data, _, _, at = group_keys(g)
    local delay = tonumber(ARGV[i + 3])
    local us, stamp = now_us, now_str
    if delay > 0 then
      us = now_us - delay
      if us < 0 then us = 0 end
      stamp = int_str(us) .. string.format('%03d', now_rest)
    end
    -- The first write of each group, ZADD, checks its sorted set: a key of another type
    -- refuses the group, of which nothing was written yet.
    local added = redis.pcall('ZADD', hb_key, us, consumer)
    if type(added) == 'table' then
      if zset_ok[g] or not string.find(tostring(added.err), 'WRONGTYPE', 1, true) then
        return added  -- not a type error: an ACL denial, say
      end
      problem[g] = refusal(at, 'zset')
    else
      zset_ok[g] = true
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
      local written = latest[g]
      if not written then
        written = {}
        latest[g] = written
      end
      local ttl = tonumber(ARGV[7 + g])
      local before = written[consumer] or olds[i]
      local registered, last, kept_progress, cap, flags, conflict, inst, prev, was_gone, _
      local last_us = 0
      if before then
        if written[consumer] then
          registered, last, _, kept_progress, cap, flags, conflict, inst, prev = parse_value(before)
          was_gone = inactive_at(last, now_us, now_rest, ttl)
        else
          registered, last, kept_progress, cap, flags, conflict, inst, prev = unpack(before)
          was_gone = gone[i]
        end
        if kept_progress == '0' then kept_progress = nil end
        last_us = #last > 3 and tonumber(string.sub(last, 1, -4)) or 0
        if us < last_us then
          back[g] = true
          if not oldest[g] or us < oldest[g] then oldest[g] = us end
        end
      end
      local kind, when = nil, nil
      if not registered then
        registered = stamp
        kind, when = 'joined', stamp
        joined[g] = true
        if not oldest[g] or us < oldest[g] then oldest[g] = us end
      elseif was_gone and (delay <= 0 or not inactive_at(stamp, now_us, now_rest, ttl)) then
        kind, when = 'recovered', now_str
      end
      if (not before or newest_due(last_us, us, ttl)) and (not newest[g] or us > newest[g]) then
        newest[g] = us
      end
      progress = progress or kept_progress
      local full, drain, logs
      if MODE == '1' then
        full = registered .. ' ' .. stamp .. ' ' .. lease
        if progress then full = full .. ' ' .. progress end
      else
        full, drain, logs = beat_v2(consumer, registered, stamp, lease, progress, ARGV[i + 5],
          ARGV[i + 6], token, cap, flags, conflict, inst, prev, before and not was_gone,
          now_us, now_rest, ttl)
        drains[g] = drains[g] or {}
        drains[g][consumer] = drain or nil
      end
      redis.call('HSET', data, consumer, full)
      written[consumer] = full
      if kind then
        events[g] = events[g] or {}
        local fields = events[g][kind] or {}
        fields[#fields + 1] = 'c' .. consumer
        fields[#fields + 1] = when .. ' ' .. registered .. ' ' .. stamp .. ' ' .. lease
        events[g][kind] = fields
      end
      if logs then
        events[g] = events[g] or {}
        for _, entry in ipairs(logs) do
          local fields = events[g][entry[1]] or {}
          for _, field in ipairs(entry[2]) do fields[#fields + 1] = field end
          events[g][entry[1]] = fields
        end
      end
    end
  end
end
for g = 1, GROUPS do
  if joined[g] then grown((group_keys(g))) end
end
local logged = 0
for g = 1, GROUPS do
  if events[g] then
    for _, kind in ipairs({'joined', 'recovered', 'draining', 'restarted', 'conflict'}) do
      if events[g][kind] then logged = append_event(g, kept, log_ms, kind, events[g][kind]) end
    end
  end
end

local drained = {}
for g = 1, GROUPS do
  if drains[g] and not problem[g] then
    for consumer in pairs(drains[g]) do
      drained[#drained + 1] = g
      drained[#drained + 1] = consumer
    end
  end
end
local out = {{}, 0, drained}
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
-- Only a group this call wrote a beat into is listed (standalone) or marked (cluster): a
-- group whose every beat was refused, for a stored value this package did not write, may
-- be empty, and a listed or marked empty group would be dropped by the next prune with the
-- value it holds (docs/protocol.md, 14: a group with a mark is not empty). heartbeat.lua
-- likewise lists nothing when it refuses.
if INDEX then
  -- Standalone: list every group written (idempotent, and heals a deleted index).
  local members = {}
  for g = 1, GROUPS do
    if zset_ok[g] then
      local _, data = group_keys(g)
      members[#members + 1] = 0
      members[#members + 1] = data
    end
  end
  if #members > 0 and redis.call('ZADD', INDEX, unpack(members)) > 0 then grown(INDEX) end
  for g = 1, GROUPS do
    if not problem[g] then
      local _, data = group_keys(g)
      if newest[g] then redis.call('ZADD', NEWEST, 'GT', newest[g], data) end
      if oldest[g] then redis.call('ZADD', OLDEST, 'LT', oldest[g], data) end
      if back[g] then newest_again(g) end
    end
  end
  return out
end
for g = 1, GROUPS do
  if zset_ok[g] and not marked[g] then
    local _, _, mark = group_keys(g)
    redis.call('SET', mark, '1', 'PX', mark_ms)
    out[1][#out[1] + 1] = g
  end
end
out[2] = logged
return out

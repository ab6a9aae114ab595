-- heartbeat.lua: record or refresh one consumer (what heartbeat() sends: the hot path of
-- every broker, so it does the least that keeps the contract, the indexes and the events).
-- KEYS: group_keys(1) and meta_key(1) of lib.lua (sorted set, hash, index mark, event log,
--       metadata: not used here), then INDEX, EVENTS, EPOCH, the protocol version, NEWEST
--       and OLDEST on a standalone server
-- ARGV[1] the group's shared TTL in ms, ARGV[2] how many entries the event log keeps,
--         ARGV[3] how long it lasts after its last entry, in ms
-- ARGV[4] the clock guard: the most ms an explicit now_ns may be ahead of the server clock
--         ('': no guard; these four are the same for every beat of a group, so the caller
--         prebuilds them)
-- ARGV[5] now_ns as a decimal string, or '' for the server clock (TIME)
-- ARGV[6] consumer, ARGV[7] lease_count
-- ARGV[8] capacity ('' keeps the stored one), ARGV[9] draining ('' keeps the flag, '0' or
--         '1'), ARGV[10] the writing process's instance token ('-': none)
-- ARGV[11] cluster only: the lifetime of an index mark in milliseconds; ARGV[12] cluster
--         only: the protocol version the caller read ('1' writes version 1 values)
-- Returns, on a standalone server, 1 when a drain is requested of the consumer (after this
-- beat), else 0; on a cluster {list, logged, drain}: list = 1 when the caller must add the
-- group to the index itself (no mark), logged = the millisecond of an event this call
-- logged (0: none), which the caller lists in the event index.
--
-- Events: joined (a consumer this group did not hold) and recovered (one that was not
-- active at this instant, under the TTL); with version 2, draining, restarted and conflict
-- (beat_v2 in lib.lua). An active consumer's plain beat writes nothing more.
-- Refused before anything is written: a prefix of another protocol version (check_protocol,
-- standalone only), a now_ns too far ahead (future_problem), a key of another type (HGET
-- checks the hash, ZSCORE (a new consumer's beat only), or TYPE for a mark, the index, check_log the log, only when an
-- event is due, and ZADD, the first write of the group, the sorted set) and a stored value this package
-- did not write (parse_value). A known consumer's beat does not look at the index (its
-- group was listed when it joined): a deleted index heals with each group's next batched
-- beat (heartbeat_many) or new consumer. The fleet indexes (standalone): NEWEST is raised
-- to a beat when newest_due (ZADD GT), OLDEST lowered when a consumer joins or a beat goes
-- back in time (ZADD LT); a NEWEST of another type is refused before the group is written.
local refused = check_protocol(PROTOCOL_AT, ARGV[12])
if refused then return refused end
local future = future_problem(ARGV[5], ARGV[4])
if future then return redis.error_reply(future) end
local hb, data, mark = KEYS[1], KEYS[2], KEYS[3]
local consumer, lease = ARGV[6], ARGV[7]
local old = redis.pcall('HGET', data, consumer)
if type(old) == 'table' then return failed(old, 2, 'hash') end
local registered, last, _, progress, cap, flags, conflict, inst, prev
if old then
  registered, last, _, progress, cap, flags, conflict, inst, prev = parse_value(old)
  if not registered then return redis.error_reply(corrupt(2, consumer, old)) end
  if progress == '0' then progress = nil end
end
local listed = true  -- standalone: a group that holds the consumer was listed with it
if INDEX then
  if not old then
    listed = redis.pcall('ZSCORE', INDEX, data)
    if type(listed) == 'table' then return failed(listed, KEYS_PER_GROUP + 1, 'zset') end
  end
else
  listed = redis.call('TYPE', mark)['ok']
  if listed ~= 'none' and listed ~= 'string' then return refuse(3, 'string') end
end

local ttl = tonumber(ARGV[1])
local us, rest, stamp = now_parts(ARGV[5])
local kind = nil
local last_us = 0
if not old then
  kind = 'joined'
  registered = stamp
else
  -- inactive_at, inlined: the last beat's whole microseconds against the horizon
  local horizon = us - (ttl + 1) * 1000
  last_us = #last > 3 and tonumber(string.sub(last, 1, -4)) or 0
  if last_us < horizon or (last_us == horizon and tonumber(string.sub(last, -3)) <= rest) then
    kind = 'recovered'
  end
end
local value, drain, logs
if MODE == '1' then
  value = registered .. ' ' .. stamp .. ' ' .. lease
  if progress then value = value .. ' ' .. progress end
  drain = false
else
  value, drain, logs = beat_v2(consumer, registered, stamp, lease, progress, ARGV[8], ARGV[9],
    ARGV[10], cap, flags, conflict, inst, prev, old and not kind, us, rest, ttl)
end
if kind or logs then
  local err = check_log(1)
  if err then return err end
end
claim()
if NEWEST and (not old or newest_due(last_us, us, ttl)) then
  -- The first write: a NEWEST of another type refuses the beat, nothing written.
  local raised = redis.pcall('ZADD', NEWEST, 'GT', us, data)
  if type(raised) == 'table' then return failed(raised, GROUPS * KEYS_PER_GROUP + 5, 'zset') end
end
-- ZADD checks the sorted set (the first write on a cluster).
local added = redis.pcall('ZADD', hb, us, consumer)
if type(added) == 'table' then return failed(added, 1, 'zset') end
if not old then grown(hb) end
if OLDEST and (not old or us < last_us) then
  redis.call('ZADD', OLDEST, 'LT', us, data)
  if old then newest_again(1) end  -- it may have been the newest
end
redis.call('HSET', data, consumer, value)
local logged = 0
if kind then
  logged = append_event(1, ARGV[2], ARGV[3], kind,
    {'c' .. consumer, stamp .. ' ' .. registered .. ' ' .. stamp .. ' ' .. lease})
end
if logs then
  for _, entry in ipairs(logs) do logged = append_event(1, ARGV[2], ARGV[3], entry[1], entry[2]) end
end

local drained = 0
if drain then drained = 1 end
if INDEX then
  if not listed then
    redis.call('ZADD', INDEX, 0, data)
    grown(INDEX)
  end
  return drained
end
local list = 0
if listed == 'none' then
  redis.call('SET', mark, '1', 'PX', ARGV[11])
  list = 1
end
return {list, logged, drained}

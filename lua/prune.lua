-- prune.lua: remove the consumers of the given groups expired for longer than a retention
-- (and their metadata), visiting at most a budget, and log who was pruned (with the
-- metadata each had: log_meta in lib.lua).
-- KEYS: group_keys(g) and meta_key(g) of lib.lua for each group g = 1..GROUPS, then INDEX,
--       EVENTS, EPOCH, the protocol version, NEWEST and OLDEST on a standalone server
-- ARGV[1] now_ns as a decimal string (the caller reads the server clock once for a whole
--         prune); ARGV[2] budget: the most consumers this call visits; ARGV[3] and ARGV[4]
--         where group 1 resumes: how many consumers below the horizon's microsecond it
--         left in place (spoilt values) and where it resumes among those on that
--         microsecond (0 and 0: start); ARGV[5] how many entries an event log keeps,
--         ARGV[6] how long it lasts after its last entry (ms); ARGV[6 + g] the TTL of
--         group g in ms; ARGV[6 + GROUPS + g] (optional, absent: 0) the retention of group
--         g in ms: how long past its expiry a consumer is kept
-- Returns {removed, stop, below, ties, logged, emptied, refused...}: how many consumers
-- went; 0, or the number of the group where the budget ran out and the two offsets to
-- resume it at (the caller sends that group and the ones after it again; the next group,
-- at 0 0, when the budget ran out in a group this call emptied); the millisecond
-- of the last event this call logged (0: none; only on a cluster); the list of the groups
-- found empty (emptied now or before), which the caller must remove from the index itself
-- (only on a cluster); then a flat list of (group number, consumer, why) for what was left
-- in place: consumer '' for a group refused whole.
-- Expired for longer than the retention r <=> (now - hb) // 1 ms > 2 ttl + r <=>
-- hb <= now - (2 ttl + r + 1) ms: every score below the horizon, and on the horizon's
-- microsecond those whose nanosecond rest is <= now's (r = 0: exactly what a snapshot at
-- the same now and ttl calls expired).
-- OLDEST (standalone): every group visited and still holding consumers gets its real oldest
-- beat there (ZADD GT: a lower bound only rises, and an unchanged score writes nothing), so
-- a prune that picks its groups from OLDEST (those at or below the horizon) does not visit
-- a group again until one of its consumers can be pruned; an emptied group leaves it.
-- Cost: one command (ZRANGEBYSCORE of the oldest beat) for a group with nothing to remove,
-- which is most groups; a group with consumers to remove costs about ten more, and at most
-- MAX_WRITTEN of them are written per call (the call stops after the last, and the caller
-- sends the following groups again); then O(log n) per group plus O(1) per visited
-- consumer, at most `budget` in all: kept consumers are not visited, but for those on the
-- horizon's microsecond (and those left in place for a spoilt value, skipped by offset).
-- Isolation: a group with a key of another type that this call would touch is refused
-- whole, and an expired consumer whose stored value this package did not write is left in
-- place (nothing of either changes; the reply says why); everything else is pruned. An
-- empty group whose hash still holds stored values (of no consumer) is unlisted with those
-- values left in place, and reported as refused whole. Types
-- are checked by the reads that come first (redis.pcall, as the heartbeats do), with TYPE
-- only for the keys no read touches (the event log and the mark, before a group's first
-- write; every key but the sorted set, before an empty group's keys are deleted). A prefix
-- of another protocol version (check_protocol, standalone only) or an index of another type
-- refuses the whole call.
local err = check_protocol(PROTOCOL_AT) or (INDEX and check_indexes())
if err then return err end

-- The most groups one call writes (those with consumers to remove, about 50 us each, and
-- those found empty): the call stops after the last, and the caller sends the rest again.
local MAX_WRITTEN = 10

local now_us, now_rest, now = now_parts(ARGV[1])
local left = tonumber(ARGV[2])
local kept_log, log_ms = ARGV[5], ARGV[6]
local removed, stop, resume_below, resume_ties, logged = 0, 0, 0, 0, 0
local written = 0
local emptied, refused = {}, {}

-- Why a read on KEYS[i] that failed refuses its group: WRONGTYPE becomes refusal's text;
-- any other error (an ACL denial, say) ends the call with it.
local function why(reply, i, want)
  if string.find(tostring(reply.err), 'WRONGTYPE', 1, true) then return refusal(i, want) end
  error(reply)
end

local function refuse_group(g, problem)
  refused[#refused + 1] = g
  refused[#refused + 1] = ''
  refused[#refused + 1] = problem
end

-- Delete the mark and the metadata of group g, found empty, and unlist it; refused when
-- one of its keys is of another type (DEL would take another program's key), unless they
-- were `checked`. Its hash is never deleted: Redis removed it with the last consumer's
-- field, so a hash still there holds only stored values of no consumer, which another
-- program wrote (spoilt ones among them): left in place and reported, never silently
-- deleted.
local function drop_empty(g, at, checked)
  local problem = not checked and type_problem(at + 1, at + 4, {'hash', 'string', 'stream', 'hash'})
  if problem then return refuse_group(g, problem) end
  local _, data, mark = group_keys(g)
  written = written + 1
  redis.call('DEL', mark, meta_key(g))
  local strays = redis.call('HLEN', data)
  if strays > 0 then
    refuse_group(g, 'PRESENCEDATA redis-presence key ' .. data .. ' holds ' .. strays
      .. ' stored values of no consumer (another program wrote them): left in place')
  end
  if INDEX then
    redis.call('ZREM', INDEX, data)
    redis.call('ZREM', NEWEST, data)
    redis.call('ZREM', OLDEST, data)
  else
    emptied[#emptied + 1] = g
  end
end

for g = 1, GROUPS do
  local zset, data, _, _, at = group_keys(g)
  local retention = tonumber(ARGV[6 + GROUPS + g] or '0')
  local horizon = now_us - (2 * tonumber(ARGV[6 + g]) + retention + 1) * 1000
  -- The oldest beat (ZRANGEBYSCORE, which the janitor role may run): an empty group, or
  -- one whose oldest beat is after the horizon, has nothing to remove (one command for
  -- most groups).
  local oldest = redis.pcall('ZRANGEBYSCORE', zset, '-inf', '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if oldest.err then
    refuse_group(g, why(oldest, at, 'zset'))
  elseif #oldest == 0 then
    -- An empty group is unlisted even when nothing expired: on a cluster, a heartbeat that
    -- races with a deregister can leave an empty group in the index (docs/protocol.md, 14).
    drop_empty(g, at, false)
  elseif tonumber(oldest[2]) > horizon then
    if OLDEST then redis.call('ZADD', OLDEST, 'GT', oldest[2], data) end
  else
    local edge = int_str(horizon)
    local below = g == 1 and tonumber(ARGV[3]) or 0
    local offset = g == 1 and tonumber(ARGV[4]) or 0
    local doomed = redis.call('ZRANGEBYSCORE', zset, '-inf', '(' .. edge, 'LIMIT', below, left)
    local budget = left - #doomed
    local ties = {}
    if budget > 0 then
      ties = redis.call('ZRANGEBYSCORE', zset, edge, edge, 'LIMIT', offset, budget)
      budget = budget - #ties
    end
    -- Every visited consumer's stored value, read before anything is written (false:
    -- none, a sorted-set member without a value, which goes too); the read checks the
    -- hash's type.
    local visited = {}
    for _, consumer in ipairs(doomed) do visited[#visited + 1] = consumer end
    for _, consumer in ipairs(ties) do visited[#visited + 1] = consumer end
    local values = {}
    if #visited > 0 then values = redis.pcall('HMGET', data, unpack(visited)) end
    local problem = values.err and why(values, at + 1, 'hash')
    local gone, fields, spoilt = {}, {}, {}
    local spoilt_below, kept = 0, 0
    if not problem then
      for i, consumer in ipairs(visited) do
        local value = values[i]
        local tie = i > #doomed
        local hb = '0'
        if value then hb = select(2, parse_beat(value)) end
        if not hb then  -- a spoilt value: left in place, and skipped when the group resumes
          spoilt[#spoilt + 1] = g
          spoilt[#spoilt + 1] = consumer
          spoilt[#spoilt + 1] = corrupt(at + 1, consumer, value)
          if tie then kept = kept + 1 else spoilt_below = spoilt_below + 1 end
        elseif tie and select(2, split_ns(hb)) > now_rest then
          kept = kept + 1  -- on the horizon's microsecond, but not expired
        else
          gone[#gone + 1] = consumer
          fields[#fields + 1] = 'c' .. consumer
          fields[#fields + 1] = now .. ' ' .. (value and beat_part(value) or '0 0 0')
        end
      end
    end
    -- The metadata of those going (the read checks the hash's type), and the types of the
    -- log and of the mark (which goes if the group empties), before the first write.
    local metas = {}
    if not problem and #gone > 0 then
      metas = redis.pcall('HMGET', meta_key(g), unpack(gone))
      problem = metas.err and why(metas, at + 4, 'hash')
        or type_problem(at + 2, at + 3, {'string', 'stream'})
    end
    if problem then
      refuse_group(g, problem)
    else
      for _, item in ipairs(spoilt) do refused[#refused + 1] = item end
      left = budget
      if left == 0 then
        -- The budget ran out in this group: resume below the horizon after those left in
        -- place, and among its ties after those kept (or where they started when it ran
        -- out before them).
        stop, resume_below, resume_ties = g, below + spoilt_below, offset + kept
      end
      if #gone > 0 then
        for i, consumer in ipairs(gone) do log_meta(fields, consumer, metas[i]) end
        redis.call('ZREM', zset, unpack(gone))
        redis.call('HDEL', data, unpack(gone))
        redis.call('HDEL', meta_key(g), unpack(gone))
        removed = removed + #gone
        written = written + 1
        logged = append_event(g, kept_log, log_ms, 'pruned', fields)
        -- A group this call emptied is dropped now, even when the budget ran out in it: its
        -- mark must not outlive its last consumer (docs/protocol.md, 14: the invariant); the
        -- call then resumes at the next group, or is done after the last.
        if redis.call('EXISTS', zset) == 0 then
          drop_empty(g, at, true)
          if stop == g then
            stop, resume_below, resume_ties = g < GROUPS and g + 1 or 0, 0, 0
          end
        end
      end
      if OLDEST then
        local first = redis.call('ZRANGEBYSCORE', zset, '-inf', '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
        if #first > 0 then redis.call('ZADD', OLDEST, 'GT', first[2], data) end
      end
    end
  end
  if stop == 0 and written >= MAX_WRITTEN and g < GROUPS then
    stop, resume_below, resume_ties = g + 1, 0, 0
  end
  if stop ~= 0 then break end
end
if INDEX then logged = 0 end
local out = {removed, stop, resume_below, resume_ties, logged, emptied}
for _, item in ipairs(refused) do out[#out + 1] = item end
return out

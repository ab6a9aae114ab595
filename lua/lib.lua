-- lib.lua: helpers prepended to every operation script by redis_presence/scripts.py.
--
-- KEYS, in every script that works on groups: five keys per group, group_keys(g) and
-- meta_key(g) for g = 1..GROUPS (its sorted set of heartbeats, its hash of stored values, its
-- index mark, its queue's event log and its hash of metadata; the heartbeats never touch
-- metadata), and, on a standalone server only, the index of groups (INDEX: a sorted set
-- whose members, all of score 0, are the groups' hash keys), the index of event logs
-- (EVENTS), the epoch marker (EPOCH, a string: see mark_epoch) and the prefix's protocol
-- version (at PROTOCOL_AT: a string, see check_protocol) last. A script runs on a Redis Cluster exactly
-- when it receives no INDEX: the indexes and the version live in other slots there, and
-- the caller maintains the indexes (docs/protocol.md, section 14) and checks the version.
--
-- Timestamps never pass through a double above 2^53: a nanosecond timestamp is split into
-- whole microseconds (exact as a double and as a sorted-set score) and the 0..999 ns rest.

--
-- Sent by EVALSHA, KEYS and ARGV are the script's globals and `bind` runs first. Loaded as a
-- Redis function library (redis_presence/scripts.py, `library`), this text follows
-- `local KEYS, ARGV` and each function sets them and calls `bind` before its body runs: the
-- helpers are then defined once, when the library is loaded, not on every call.

local KEYS_PER_GROUP = 5
local GROUPS, INDEX, EVENTS, EPOCH, PROTOCOL_AT, NEWEST, OLDEST

-- The keys that follow the groups' on a standalone server: INDEX, EVENTS, EPOCH, the
-- protocol version, NEWEST and OLDEST (one more than a group's five: a call holds a
-- multiple of five keys exactly when it runs on a cluster).
local STANDALONE_TAIL = 6

-- Name the KEYS of this call: GROUPS, the indexes (nil on a cluster) and PROTOCOL_AT, where
-- the version is in KEYS (standalone).
local function bind()
  local tail = 0
  if #KEYS % KEYS_PER_GROUP ~= 0 then tail = STANDALONE_TAIL end
  GROUPS = math.floor((#KEYS - tail) / KEYS_PER_GROUP)
  if GROUPS < 0 then GROUPS = 0 end
  local base = GROUPS * KEYS_PER_GROUP
  INDEX = KEYS[base + 1]
  EVENTS = KEYS[base + 2]
  EPOCH = KEYS[base + 3]
  PROTOCOL_AT = base + 4
  NEWEST = KEYS[base + 5]
  OLDEST = KEYS[base + 6]
end
if KEYS then bind() end  -- EVALSHA (in a library KEYS is still nil here)

-- The protocol version these scripts read and write (PROTOCOL_VERSION of
-- redis_presence/keys.py; docs/protocol.md, section 1). A prefix that still says '1' is
-- written in MODE '1' (v1 values, no event of version 2: its v1 clients keep working until
-- `redis-presence migrate` moves it on); any other prefix in MODE '2'. check_protocol sets it.
local VERSION = '2'
local MODE = VERSION

-- The keys of group g: (sorted set, hash, index mark, event log) and the position of the
-- first in KEYS.
local function group_keys(g)
  local i = KEYS_PER_GROUP * (g - 1)
  return KEYS[i + 1], KEYS[i + 2], KEYS[i + 3], KEYS[i + 4], i + 1
end

-- The hash of metadata of group g (consumer -> META_VALUE of redis_presence/keys.py).
local function meta_key(g)
  return KEYS[KEYS_PER_GROUP * (g - 1) + 5]
end

-- Split a decimal nanosecond string into (microseconds, remaining nanoseconds).
local function split_ns(ns)
  if #ns <= 3 then
    return 0, tonumber(ns)
  end
  return tonumber(string.sub(ns, 1, -4)), tonumber(string.sub(ns, -3))
end

-- Zeros that pad a TIME reply's microseconds (1 to 6 digits) to six digits.
local PAD = {'00000', '0000', '000', '00', '0', ''}

-- The reader's instant: ARGV's now_ns as a decimal string, or the server clock (TIME) when
-- it is ''. Returns whole microseconds, the nanosecond rest and the decimal nanoseconds.
local function now_parts(now_ns)
  if now_ns == '' then
    local t = redis.call('TIME')
    local us = t[1] .. PAD[#t[2]] .. t[2]
    return tonumber(us), 0, us .. '000'
  end
  local us, rest = split_ns(now_ns)
  return us, rest, now_ns
end

-- Exact integer to decimal string (numbers here stay below 2^53).
local function int_str(n)
  return string.format('%.0f', n)
end

-- Why KEYS[i], which another program filled with a type other than `want`, is refused (the
-- text of a WRONGTYPE error reply; redis_presence/errors.py reads it).
local function refusal(i, want)
  local kind = redis.call('TYPE', KEYS[i])['ok']
  return 'WRONGTYPE redis-presence key ' .. KEYS[i] .. ' holds a ' .. kind .. ', expected a ' .. want
end

-- The error reply for KEYS[i] (see refusal).
local function refuse(i, want)
  return redis.error_reply(refusal(i, want))
end

-- The reply for a redis.pcall on KEYS[i] that failed: WRONGTYPE becomes `refuse`'s error,
-- any other error (an ACL denial, say) goes back unchanged.
local function failed(reply, i, want)
  if string.find(tostring(reply.err), 'WRONGTYPE', 1, true) then return refuse(i, want) end
  return reply
end

-- Why KEYS[first..last] cannot be used, or nil: each must match `kinds` cyclically or not
-- exist (one TYPE per key, before any write).
local function type_problem(first, last, kinds)
  for i = first, last do
    local want = kinds[(i - first) % #kinds + 1]
    local kind = redis.call('TYPE', KEYS[i])['ok']
    if kind ~= 'none' and kind ~= want then
      return refusal(i, want)
    end
  end
  return nil
end

-- Refuse to touch keys that another program filled with a different type, before any write
-- (type_problem as an error reply, or nil).
local function expect_types(first, last, kinds)
  local problem = type_problem(first, last, kinds)
  if problem then return redis.error_reply(problem) end
  return nil
end

-- Refuse indexes (INDEX, EVENTS, NEWEST, OLDEST) of another type than a sorted set
-- (standalone only).
local function check_indexes()
  local first = GROUPS * KEYS_PER_GROUP + 1
  return expect_types(first, first + 1, {'zset', 'zset'})
    or expect_types(first + 4, first + 5, {'zset', 'zset'})
end

-- The stored value of one consumer (redis_presence/keys.py, STORED_VALUE; docs/protocol.md,
-- section 4): version 2 writes nine fields,
--   registered_ns last_ns lease progress_ns capacity flags conflict_ns instance previous
-- (progress_ns and conflict_ns 0: none; capacity 0: not reported; flags: 1 draining, 2 a
-- drain requested; instance and previous: a writer's token, '-' for none); version 1 wrote
-- 'registered_ns last_ns lease' and ' progress_ns' once the consumer recorded progress, which
-- every reader still reads (as capacity 0, flags 0, no conflict, tokens '-').
local V2_VALUE = '^(%d+) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+) ([%w_.-]+) ([%w_.-]+)$'
local MAX_U32 = 4294967295

-- The nine fields of a stored value (decimal strings and the two tokens), a version 1 value
-- read as version 2, or nil when it is not a value this package wrote: times of at most 19
-- digits, lease, capacity and flags at most 2^32-1, tokens of at most 32 characters (so "",
-- "garbage", "-5 -5 0" and a count no client writes are refused, never read as numbers).
local function parse_value(value)
  local r, l, le, p, c, f, x, i, pv = string.match(value, V2_VALUE)
  if r then
    if #r <= 19 and #l <= 19 and #p <= 19 and #x <= 19 and #le <= 10 and #c <= 10
      and #f <= 10 and #i <= 32 and #pv <= 32 and tonumber(le) <= MAX_U32
      and tonumber(c) <= MAX_U32 and tonumber(f) <= MAX_U32 then
      return r, l, le, p, c, f, x, i, pv
    end
    return nil
  end
  local progress = '0'
  r, l, le = string.match(value, '^(%d+) (%d+) (%d+)$')
  if not r then
    r, l, le, progress = string.match(value, '^(%d+) (%d+) (%d+) (%d+)$')
    if not r or #progress > 19 then return nil end
  end
  if #r <= 19 and #l <= 19 and #le <= 10 and tonumber(le) <= MAX_U32 then
    return r, l, le, progress, '0', '0', '0', '-', '-'
  end
  return nil
end

-- The registration, the last heartbeat and the last progress (decimal ns strings; progress
-- nil before the first) of a stored value, or nil when it is not a value this package wrote.
local function parse_beat(value)
  local registered, hb, _, progress = parse_value(value)
  if not registered then return nil end
  if progress == '0' then progress = nil end
  return registered, hb, progress
end

-- The part of a stored value events carry: 'registered_ns last_heartbeat_ns lease_count'.
local function beat_part(value)
  return string.match(value, '^%d+ %d+ %d+')
end

-- `text` in double quotes, for an error message on one line: quotes, backslashes and control
-- characters as \xHH.
local function quoted(text)
  return '"' .. string.gsub(text, '[%c"\\]', function(c)
    return string.format('\\x%02x', string.byte(c))
  end) .. '"'
end

-- Refuse a prefix whose protocol version, KEYS[i], names another version than 1 or
-- VERSION, before anything is written: the error reply, or nil (an absent version is
-- VERSION). Sets MODE: '1' where the prefix says '1', else VERSION. On a cluster KEYS[i]
-- is absent (the version lives in another slot): the caller checked it and gives the mode
-- it read, `given` ('1' or anything else for VERSION). One GET, in the same script as the
-- write, so a migration that sets another version cannot slip between the check and the
-- write.
local UNCLAIMED = nil  -- the version's key, when check_protocol found it missing
local function check_protocol(i, given)
  UNCLAIMED = nil
  if not KEYS[i] then
    if given == '1' then MODE = '1' else MODE = VERSION end
    return nil
  end
  local found = redis.pcall('GET', KEYS[i])
  if type(found) == 'table' then return failed(found, i, 'string') end
  if not found then UNCLAIMED = KEYS[i] end
  if found == '1' then
    MODE = '1'
  elseif not found or found == VERSION then
    MODE = VERSION
  else
    return redis.error_reply('PRESENCEPROTOCOL ' .. KEYS[i]
      .. ' says this prefix was written by protocol version ' .. quoted(string.sub(found, 1, 40))
      .. '; this package speaks version ' .. VERSION .. ' (docs/protocol.md)')
  end
  return nil
end

-- Claim a prefix whose version was missing for VERSION (SET NX), in the script that writes
-- its first version 2 value, so no such value is ever stored under a prefix another
-- client could still claim for version 1 (standalone; a caller whose ACL lacks SET leaves
-- it to the client's own claim after the beat).
local function claim()
  if UNCLAIMED then
    redis.pcall('SET', UNCLAIMED, VERSION, 'NX')
    UNCLAIMED = nil
  end
end

-- Why field `field` of KEYS[i] (a hash of stored values) is refused: its `value` is not one
-- this package wrote (the text of a PRESENCEDATA error reply; redis_presence/errors.py).
local function corrupt(i, field, value)
  return 'PRESENCEDATA redis-presence key ' .. KEYS[i] .. ' field ' .. quoted(field)
    .. ' holds a value this package did not write: ' .. quoted(string.sub(value, 1, 80))
end

-- The clock guard: why a write at the caller's `now_ns` (a decimal string; '' is the server
-- clock, never refused) is refused when it is more than `max_future` ms ('': no guard) ahead
-- of the server clock, or nil (the text of a PRESENCECLOCK error reply).
local function future_problem(now_ns, max_future)
  if now_ns == '' or max_future == '' then return nil end
  local t = redis.call('TIME')
  local server_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local us = split_ns(now_ns)
  local ahead_us = us - server_us
  if ahead_us <= tonumber(max_future) * 1000 then return nil end
  return 'PRESENCECLOCK now_ns ' .. now_ns .. ' is ' .. int_str(math.floor(ahead_us / 1000))
    .. ' ms ahead of the server clock (more than max_future_ms=' .. max_future .. ')'
end

-- Whether a heartbeat at `hb` (decimal ns) is no longer active at (now_us, now_rest) under
-- `ttl` ms: hb <= now - (ttl + 1) ms, compared exactly on (microseconds, rest).
local function inactive_at(hb, now_us, now_rest, ttl)
  local us, rest = split_ns(hb)
  local horizon = now_us - (ttl + 1) * 1000
  return us < horizon or (us == horizon and rest <= now_rest)
end

-- NEWEST (standalone: a sorted set of the groups' hash keys) holds a lower bound of each
-- group's newest beat, in whole microseconds, never more than a quarter of the group's TTL
-- behind it: a beat raises it (ZADD GT) when its consumer joins, or when the beat is the
-- consumer's first in a new quarter-TTL window (`newest_due`), so a consumer costs one
-- ZADD per window, not one per beat, and every beat falls at most one window after one
-- that raised it. A reader asking which groups nobody reads takes the members scored at or
-- below now - TTL as candidates and checks each exactly (docs/protocol.md, section 2). A
-- consumer that leaves, or a beat that goes back in time, lowers it to the real newest
-- (`newest_again`), so it is never ahead of the group's newest beat.
local function newest_due(last_us, us, ttl)
  local window = ttl * 250
  return math.floor(us / window) ~= math.floor(last_us / window)
end

-- Lower NEWEST to group g's real newest beat (ZADD XX: a group not listed stays out), after
-- a write that may have taken its newest beat away (a consumer left, or went back in time).
-- A caller whose ACL lacks ZRANGE (a role of an earlier release) skips it: the group then
-- shows as read until its last beat is a TTL old, as a lagging bound does.
local function newest_again(g)
  if not NEWEST then return end
  local hb, data = group_keys(g)
  local top = redis.pcall('ZRANGE', hb, -1, -1, 'WITHSCORES')
  if type(top) == 'table' and top[2] then redis.call('ZADD', NEWEST, 'XX', top[2], data) end
end

-- What a beat of protocol version 2 writes (MODE '2'), from the stored value's fields
-- (`old_*`: nil for a new consumer) and the beat's: the new value, whether a drain is
-- requested after it, and the events it logs beside joined and recovered (nil, or a list
-- of {kind, fields}; see append_event). `capacity` '' keeps the stored one; `draining` ''
-- keeps the flag, '1' sets it (and acknowledges a request), '0' clears it; `token` '-' is a
-- writer without one. `active`: the stored beat is active at this instant, `stamp` the
-- beat's instant (decimal ns). `ttl` decides whether an earlier conflict is still active.
-- A token that differs from the stored one is a restart, or, when it is the stored
-- `previous` and the stored beat is active, a second live process taking turns with the
-- first: a duplicate (conflict_ns = the beat's instant; event `conflict` when no conflict was
-- active). A restart clears the draining flag and a drain request (the process they were
-- about is gone); a duplicate keeps them. docs/protocol.md, section 5.
local function beat_v2(consumer, registered, stamp, lease, progress, capacity, draining, token,
                       old_cap, old_flags, old_conflict, old_inst, old_prev, active,
                       now_us, now_rest, ttl)
  if capacity == '' then capacity = old_cap or '0' end
  local flags = old_flags or '0'
  local logs = nil
  local beat = registered .. ' ' .. stamp .. ' ' .. lease
  local inst, prev, conflict = old_inst or '-', old_prev or '-', old_conflict or '0'
  if token ~= '-' and token ~= inst then
    if inst ~= '-' then
      local kind = nil
      if active and token == prev then
        if conflict == '0' or inactive_at(conflict, now_us, now_rest, ttl) then kind = 'conflict' end
        conflict = stamp
      else
        -- Another process: what the one before said (draining) or was asked (a drain) was
        -- its own, and goes with it (unknown bits stay).
        local n = tonumber(flags)
        flags = int_str(n - n % 4)
        if active then kind = 'restarted' end
      end
      if kind then
        logs = {{kind, {'c' .. consumer, stamp .. ' ' .. beat, 'i' .. consumer, inst .. ' ' .. token}}}
      end
      prev = inst
    end
    inst = token
  end
  if draining ~= '' then
    local n = tonumber(flags)
    local was = n % 2 == 1
    if draining == '1' then
      if not was then
        n = n + 1
        logs = logs or {}
        logs[#logs + 1] = {'draining', {'c' .. consumer, stamp .. ' ' .. beat}}
      end
      if math.floor(n / 2) % 2 == 1 then n = n - 2 end
    elseif was then
      n = n - 1
    end
    flags = int_str(n)
  end
  local value = beat .. ' ' .. (progress or '0') .. ' ' .. capacity .. ' ' .. flags .. ' '
    .. conflict .. ' ' .. inst .. ' ' .. prev
  return value, math.floor(tonumber(flags) / 2) % 2 == 1, logs
end

-- A sorted set (a group's heartbeats, the index of groups) that reaches SKIPLIST_AT members
-- is moved to Redis's skiplist encoding, by adding a member longer than
-- zset-max-listpack-value and removing it in the same call: in a listpack, updating one
-- member's score rescans the whole list twice (2 to 3 us of a beat's server time at 100
-- members, against 0.6 in a skiplist, for about 100 more bytes a member), and Redis never
-- moves a sorted set back (it does so itself at 129 members). The member is not UTF-8, so
-- it is no consumer's name and no group's key, and nothing outside the call ever sees it.
-- Called after a write that added members; a caller whose ACL lacks ZCARD skips it.
local SKIPLIST_AT = 64
local SKIPLIST_MARK = '\255redis-presence: skiplist encoding\255 (not UTF-8, longer than 64 bytes) ......'
local function grown(key)
  local n = redis.pcall('ZCARD', key)
  if type(n) == 'number' and n >= SKIPLIST_AT and n <= 128 then
    redis.call('ZADD', key, 0, SKIPLIST_MARK)
    redis.call('ZREM', key, SKIPLIST_MARK)
  end
end

-- Refuse an event log of another type (call before the first write of a script that may
-- log an event); nil when it is a stream or absent.
local function check_log(g)
  local _, _, _, log, first = group_keys(g)
  return expect_types(first + 3, first + 3, {'stream'})
end

-- The epoch marker (redis_presence/keys.py, EPOCH_VALUE): written once, with SET NX, by
-- the first event logged into an empty keyspace, so that a reader whose cursor names
-- another epoch (or one while the marker is gone) knows the data it read was lost (a
-- restart without persistence, FLUSHALL). Its value is the server's clock and the event's
-- id, which no earlier epoch of this server had. On a standalone server only: a cluster's
-- caller writes it with the event index (docs/protocol.md, section 14).
-- A caller whose ACL lacks SET (a role of an earlier release) still makes its change: the
-- marker is then written by the next one that may (pcall), and only EXISTS runs once it is.
local function mark_epoch(id)
  if not EPOCH or redis.call('EXISTS', EPOCH) == 1 then return end
  local t = redis.call('TIME')
  redis.pcall('SET', EPOCH, t[1] .. '.' .. t[2] .. ':' .. id, 'NX')
end

-- The longest stored metadata a `left` or `pruned` entry carries (MAX_STORED_META_CHARS of
-- redis_presence/keys.py: the longest a valid mapping is spelled); a longer value (another
-- program's) is not copied into the log.
local MAX_LOGGED_META = 6 * 1024 + 6 * 16 + 2

-- Add the 'm' .. consumer field of a `left` or `pruned` entry to `fields`: the consumer's
-- metadata as stored when it went (`meta`: its value in meta_key(g), or false for none).
local function log_meta(fields, consumer, meta)
  if meta and #meta <= MAX_LOGGED_META then
    fields[#fields + 1] = 'm' .. consumer
    fields[#fields + 1] = meta
  end
end

-- Rewrite a log that its first XADD just created at its used size. Since Redis 7.0 a
-- stream's first node preallocates a 4,096-byte listpack (STREAM_LISTPACK_MAX_PRE_ALLOCATE,
-- or stream-node-max-bytes if lower), shrunk only once the node fills: for a queue whose log
-- holds a few entries that is most of what the queue costs. COPY duplicates each node at its
-- used size, with the stream's ids and counters (last-generated-id, entries-added,
-- max-deleted-entry-id, the first entry: docs/protocol.md, section 6), and RENAME puts the
-- copy in the log's place; later XADDs grow the node by their own size. The copy is
-- `log .. '.copy'` (redis_presence/keys.py, EVENTS_COPY_SUFFIX): the log's hash tag, so its
-- cluster slot, and a key that exists only inside this call. It is not in KEYS, as the
-- script cannot know beforehand that it will create the log; a cluster of Redis 7, Redis 8
-- or Valkey 9 lets a script or function touch an undeclared key of its keys' slot
-- (tests/test_event_log_memory.py, by FCALL and EVALSHA). Each command by pcall, so a caller whose ACL lacks
-- COPY or RENAME (a role of an earlier release), or a server that refuses either, keeps
-- the log as XADD left it: COPY never replaces (a key already there is left alone and
-- answers 0), and a copy that cannot be renamed is deleted. The TTL is set after it, by
-- the caller.
local function compact_log(log)
  local copy = log .. '.copy'
  if redis.pcall('COPY', log, copy) ~= 1 then return end
  local renamed = redis.pcall('RENAME', copy, log)
  if type(renamed) == 'table' and renamed.err then redis.pcall('DEL', copy) end
end

-- Append one entry to group g's event log (redis_presence/keys.py, EVENT_FIELDS): the kind,
-- the group's hash key, then `fields`, a flat list of 'c' .. consumer (so no name meets
-- 'k' or 'g'), 'at_ns registered_ns last_heartbeat_ns lease_count'. The log keeps about
-- `kept` entries and expires `log_ms` after its last one; on a standalone server EVENTS
-- lists it with the entry's millisecond. Returns that millisecond.
-- An XADD that creates the log is followed by compact_log: a queue's first entry otherwise
-- costs it a 4 KB node.
local function append_event(g, kept, log_ms, kind, fields)
  local _, data, _, log = group_keys(g)
  local created = redis.call('EXISTS', log) == 0
  local id = redis.call('XADD', log, 'MAXLEN', '~', kept, '*', 'k', kind, 'g', data, unpack(fields))
  if created then compact_log(log) end
  redis.call('PEXPIRE', log, log_ms)
  local ms = string.match(id, '^%d+')
  if EVENTS then redis.call('ZADD', EVENTS, ms, log) end
  mark_epoch(id)
  return tonumber(ms)
end

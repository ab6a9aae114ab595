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
-- the caller maintains the indexes (docs/index-protocol.md) and checks the version.
--
-- Timestamps never pass through a double above 2^53: a nanosecond timestamp is split into
-- whole microseconds (exact as a double and as a sorted-set score) and the 0..999 ns rest.

--
-- Sent by EVALSHA, KEYS and ARGV are the script's globals and `bind` runs first. Loaded as a
-- Redis function library (redis_presence/scripts.py, `library`), this text follows
-- `local KEYS, ARGV` and each function sets them and calls `bind` before its body runs: the
-- helpers are then defined once, when the library is loaded, not on every call.

local KEYS_PER_GROUP = 5
local GROUPS, INDEX, EVENTS, EPOCH, PROTOCOL_AT

-- Name the KEYS of this call: GROUPS, the indexes (nil on a cluster) and PROTOCOL_AT, where
-- the version is in KEYS (standalone).
local function bind()
  GROUPS = math.floor(#KEYS / KEYS_PER_GROUP)
  INDEX = KEYS[GROUPS * KEYS_PER_GROUP + 1]
  EVENTS = KEYS[GROUPS * KEYS_PER_GROUP + 2]
  EPOCH = KEYS[GROUPS * KEYS_PER_GROUP + 3]
  PROTOCOL_AT = GROUPS * KEYS_PER_GROUP + 4
end
if KEYS then bind() end  -- EVALSHA (in a library KEYS is still nil here)

-- The protocol version these scripts read and write (PROTOCOL_VERSION of
-- redis_presence/keys.py; docs/protocol.md, section 1).
local VERSION = '1'

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

-- Refuse indexes (INDEX, EVENTS) of another type than a sorted set (standalone only).
local function check_indexes()
  local first = GROUPS * KEYS_PER_GROUP + 1
  return expect_types(first, first + 1, {'zset', 'zset'})
end

-- The stored value of one consumer is 'registered_ns last_heartbeat_ns lease_count', and
-- ' last_progress_ns' after it once the consumer recorded progress (redis_presence/keys.py,
-- STORED_VALUE); heartbeat.lua and heartbeat_many.lua write it, the same way.

-- The registration, the last heartbeat and the last progress (decimal ns strings; progress
-- nil before the first) of a stored value, or nil when it is not a value the heartbeats wrote:
-- three or four decimal integers of at most 19 digits, one space between them, the lease
-- count at most 2^32-1 (so "", "garbage", "-5 -5 0" and a count no client writes are
-- refused, never read as numbers).
local function parse_beat(value)
  local registered, hb, lease = string.match(value, '^(%d+) (%d+) (%d+)$')
  local progress = nil
  if not registered then
    registered, hb, lease, progress = string.match(value, '^(%d+) (%d+) (%d+) (%d+)$')
    if not registered or #progress > 19 then return nil end
  end
  if #registered <= 19 and #hb <= 19 and #lease <= 10 and tonumber(lease) <= 4294967295 then
    return registered, hb, progress
  end
  return nil
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

-- Refuse a prefix whose protocol version, KEYS[i] (absent on a cluster: nil is returned),
-- names another version than VERSION, before anything is written: the error reply, or nil
-- (an absent version is this one). One GET, in the same script as the write, so a
-- migration that sets another version cannot slip between the check and the write.
local function check_protocol(i)
  if not KEYS[i] then return nil end
  local found = redis.pcall('GET', KEYS[i])
  if type(found) == 'table' then return failed(found, i, 'string') end
  if found and found ~= VERSION then
    return redis.error_reply('PRESENCEPROTOCOL ' .. KEYS[i]
      .. ' says this prefix was written by protocol version ' .. quoted(string.sub(found, 1, 40))
      .. '; this package speaks version ' .. VERSION .. ' (docs/protocol.md)')
  end
  return nil
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
-- caller writes it with the event index (docs/index-protocol.md).
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

-- Append one entry to group g's event log (redis_presence/keys.py, EVENT_FIELDS): the kind,
-- the group's hash key, then `fields`, a flat list of 'c' .. consumer (so no name meets
-- 'k' or 'g'), 'at_ns registered_ns last_heartbeat_ns lease_count'. The log keeps about
-- `kept` entries and expires `log_ms` after its last one; on a standalone server EVENTS
-- lists it with the entry's millisecond. Returns that millisecond.
local function append_event(g, kept, log_ms, kind, fields)
  local _, data, _, log = group_keys(g)
  local id = redis.call('XADD', log, 'MAXLEN', '~', kept, '*', 'k', kind, 'g', data, unpack(fields))
  redis.call('PEXPIRE', log, log_ms)
  local ms = string.match(id, '^%d+')
  if EVENTS then redis.call('ZADD', EVENTS, ms, log) end
  mark_epoch(id)
  return tonumber(ms)
end

-- lib.lua: helpers prepended to every operation script by redis_presence/scripts.py.
--
-- KEYS, in every script: three keys per group, group_keys(g) for g = 1..GROUPS (its sorted
-- set of heartbeats, its hash of stored values, its index mark), and, on a standalone server
-- only, the index last (INDEX: a sorted set whose members, all of score 0, are the groups'
-- hash keys). A script runs on a Redis Cluster exactly when it receives no INDEX: the index
-- lives in another slot there, and the caller maintains it (docs/index-protocol.md).
--
-- Timestamps never pass through a double above 2^53: a nanosecond timestamp is split into
-- whole microseconds (exact as a double and as a sorted-set score) and the 0..999 ns rest.

local KEYS_PER_GROUP = 3
local GROUPS = math.floor(#KEYS / KEYS_PER_GROUP)
local INDEX = KEYS[GROUPS * KEYS_PER_GROUP + 1]

-- The keys of group g: (sorted set, hash, index mark) and the position of the first in KEYS.
local function group_keys(g)
  local i = KEYS_PER_GROUP * (g - 1)
  return KEYS[i + 1], KEYS[i + 2], KEYS[i + 3], i + 1
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

-- The error reply for KEYS[i], which another program filled with a type other than `want`.
local function refuse(i, want)
  local kind = redis.call('TYPE', KEYS[i])['ok']
  return redis.error_reply('WRONGTYPE redis-presence key ' .. KEYS[i] .. ' holds a ' .. kind .. ', expected a ' .. want)
end

-- The reply for a redis.pcall on KEYS[i] that failed: WRONGTYPE becomes `refuse`'s error,
-- any other error (an ACL denial, say) goes back unchanged.
local function failed(reply, i, want)
  if string.find(tostring(reply.err), 'WRONGTYPE', 1, true) then return refuse(i, want) end
  return reply
end

-- Refuse to touch keys that another program filled with a different type, before any write.
-- KEYS[first..last] must match `kinds` cyclically (or not exist); returns an error reply or nil.
local function expect_types(first, last, kinds)
  for i = first, last do
    local want = kinds[(i - first) % #kinds + 1]
    local kind = redis.call('TYPE', KEYS[i])['ok']
    if kind ~= 'none' and kind ~= want then
      return refuse(i, want)
    end
  end
  return nil
end

-- The stored value of one consumer is 'registered_ns last_heartbeat_ns lease_count'
-- (redis_presence/keys.py, STORED_VALUE); write_beat is its only writer.

-- The last heartbeat of a stored value, as a decimal nanosecond string.
local function stored_heartbeat(value)
  return string.match(value, '^%d+ (%d+)')
end

-- Record one beat of `consumer` in group g at `us` (score) / `stamp` (decimal ns), keeping
-- the registration of an earlier beat. HGET checks the hash and ZADD, the first write, the
-- sorted set: a key of another type is refused before anything is written. Returns an
-- error reply, or nil.
local function write_beat(g, consumer, us, stamp, lease)
  local hb, data, _, first = group_keys(g)
  local old = redis.pcall('HGET', data, consumer)
  if type(old) == 'table' then return failed(old, first + 1, 'hash') end
  local added = redis.pcall('ZADD', hb, us, consumer)
  if type(added) == 'table' then return failed(added, first, 'zset') end
  local registered = stamp
  if old then registered = string.match(old, '^%d+') end
  redis.call('HSET', data, consumer, registered .. ' ' .. stamp .. ' ' .. lease)
  return nil
end

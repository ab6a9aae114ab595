-- lib.lua: helpers prepended to every operation script by redis_presence/scripts.py.
-- Timestamps never pass through a double above 2^53: a nanosecond timestamp is split into
-- whole microseconds (exact as a double and as a sorted-set score) and the 0..999 ns rest.

-- Split a decimal nanosecond string into (microseconds, remaining nanoseconds).
local function split_ns(ns)
  if #ns <= 3 then
    return 0, tonumber(ns)
  end
  return tonumber(string.sub(ns, 1, -4)), tonumber(string.sub(ns, -3))
end

-- Zeros that pad a TIME reply's microseconds (1 to 6 digits) to six digits.
local PAD = {'00000', '0000', '000', '00', '0', ''}

-- The server clock (TIME) as decimal strings: (whole microseconds, nanoseconds).
local function server_clock()
  local t = redis.call('TIME')
  local us = t[1] .. PAD[#t[2]] .. t[2]
  return us, us .. '000'
end

-- The reader's instant as decimal strings (whole microseconds, nanoseconds): ARGV's
-- now_ns, or the server clock (TIME) when it is ''.
local function now_us_str(now_ns)
  if now_ns == '' then return server_clock() end
  if #now_ns <= 3 then return '0', now_ns end
  return string.sub(now_ns, 1, -4), now_ns
end

-- The reader's instant: ARGV's now_ns, or the server clock (TIME) when it is ''.
-- Returns microseconds, the nanosecond rest and the decimal nanosecond string.
local function now_parts(now_ns)
  if now_ns == '' then
    local us, ns = server_clock()
    return tonumber(us), 0, ns
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

-- The stored value of one consumer: 'registered_ns last_heartbeat_ns lease_count'.
local function stored_heartbeat(value)
  return string.match(value, '^%d+ (%d+)')
end

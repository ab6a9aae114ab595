-- heartbeat.lua: record or refresh one consumer (what heartbeat() sends: the hot path of
-- every broker, so it does the least that keeps the contract and the index).
-- KEYS[1] zset  consumer -> last heartbeat in microseconds (score)
-- KEYS[2] hash  consumer -> 'registered_ns last_heartbeat_ns lease_count'
-- KEYS[3] standalone: the index set; cluster: the group's index mark (a string)
-- ARGV[1] now_ns as a decimal string, or '' for the server clock (TIME)
-- ARGV[2] consumer, ARGV[3] lease_count
-- ARGV[4] standalone: the group's index member; cluster: ''
-- ARGV[5] cluster only: the lifetime of an index mark in milliseconds
-- Returns 1 when the caller must add the group to the index itself (cluster, no mark), else 0.
--
-- A key of another type is refused before anything is written: HGET checks the hash,
-- SISMEMBER (or TYPE, for a mark) the third key, and ZADD, the first write, the sorted set.
-- On a standalone server the group is listed in the same call whenever it is not, so a
-- deleted index heals with the next beat of each group.
local hb, data, consumer = KEYS[1], KEYS[2], ARGV[2]
local clustered = ARGV[4] == ''

local old = redis.pcall('HGET', data, consumer)
if type(old) == 'table' then return failed(old, 2, 'hash') end
local listed
if clustered then
  listed = redis.call('TYPE', KEYS[3])['ok']
  if listed ~= 'none' and listed ~= 'string' then return refuse(3, 'string') end
else
  listed = redis.pcall('SISMEMBER', KEYS[3], ARGV[4])
  if type(listed) == 'table' then return failed(listed, 3, 'set') end
end

local us, stamp = now_us_str(ARGV[1])
local added = redis.pcall('ZADD', hb, us, consumer)
if type(added) == 'table' then return failed(added, 1, 'zset') end
local registered = stamp
if old then registered = string.match(old, '^%d+') end
redis.call('HSET', data, consumer, registered .. ' ' .. stamp .. ' ' .. ARGV[3])

if clustered then
  if listed == 'none' then
    redis.call('SET', KEYS[3], '1', 'PX', ARGV[5])
    return 1
  end
elseif listed == 0 then
  redis.call('SADD', KEYS[3], ARGV[4])
end
return 0

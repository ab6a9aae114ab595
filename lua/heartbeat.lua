-- heartbeat.lua: record or refresh one consumer (what heartbeat() sends: the hot path of
-- every broker, so it does the least that keeps the contract and the index).
-- KEYS: group_keys(1) of lib.lua (sorted set, hash, index mark), then INDEX on a
--       standalone server
-- ARGV[1] now_ns as a decimal string, or '' for the server clock (TIME)
-- ARGV[2] consumer, ARGV[3] lease_count
-- ARGV[4] cluster only: the lifetime of an index mark in milliseconds
-- Returns 1 when the caller must add the group to the index itself (cluster, no mark), else 0.
--
-- A key of another type is refused before anything is written: ZSCORE (or TYPE, for a
-- mark) checks the index, then write_beat the hash and the sorted set. On a standalone
-- server the group is listed in the same call whenever it is not, so a deleted index heals
-- with the next beat of each group.
local _, data, mark = group_keys(1)
local listed
if INDEX then
  listed = redis.pcall('ZSCORE', INDEX, data)
  if type(listed) == 'table' then return failed(listed, #KEYS, 'zset') end
else
  listed = redis.call('TYPE', mark)['ok']
  if listed ~= 'none' and listed ~= 'string' then return refuse(3, 'string') end
end

local us, _, stamp = now_parts(ARGV[1])
local err = write_beat(1, ARGV[2], us, stamp, ARGV[3])
if err then return err end

if INDEX then
  if not listed then redis.call('ZADD', INDEX, 0, data) end
elseif listed == 'none' then
  redis.call('SET', mark, '1', 'PX', ARGV[4])
  return 1
end
return 0

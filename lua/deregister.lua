-- deregister.lua: forget one consumer (graceful shutdown) and its metadata, and log that it
-- left (with the metadata it had: 'm' .. consumer, see log_meta in lib.lua).
-- KEYS: group_keys(1) and meta_key(1) of lib.lua (sorted set, hash, index mark, event log,
--       metadata), then INDEX, EVENTS, EPOCH, the protocol version, NEWEST and OLDEST
--       on a standalone server (the group leaves NEWEST and OLDEST with the index)
-- ARGV[1] consumer, ARGV[2] now_ns as a decimal string, or '' for the server clock (the
-- instant of the `left` event), ARGV[3] how many entries the event log keeps, ARGV[4] how
-- long it lasts after its last entry, in ms
-- Returns {existed (0/1), emptied (0/1), logged}: emptied = 1 asks the caller to remove
-- the group from the index itself, and logged (the millisecond of the event, 0 when the
-- consumer was not tracked) to list the log in the event index (only on a cluster).
-- Refused before anything is written: a prefix of another protocol version (check_protocol,
-- standalone only), a key of another type, a stored value this package did not write.
local err = check_protocol(PROTOCOL_AT) or expect_types(1, KEYS_PER_GROUP, {'zset', 'hash', 'string', 'stream', 'hash'})
  or (INDEX and check_indexes())
if err then return err end

local zset, data, mark = group_keys(1)
local old = redis.call('HGET', data, ARGV[1])
if old and not parse_beat(old) then return redis.error_reply(corrupt(2, ARGV[1], old)) end
local meta = redis.call('HGET', meta_key(1), ARGV[1])
local existed = redis.call('ZREM', zset, ARGV[1])
redis.call('HDEL', data, ARGV[1])
redis.call('HDEL', meta_key(1), ARGV[1])
local logged = 0
if old then
  local _, _, now = now_parts(ARGV[2])
  local fields = {'c' .. ARGV[1], now .. ' ' .. beat_part(old)}
  log_meta(fields, ARGV[1], meta)  -- what it described itself with, kept by the log
  logged = append_event(1, ARGV[3], ARGV[4], 'left', fields)
end
local emptied = 0
local gone = existed == 1 and redis.call('EXISTS', zset) == 0
if existed == 1 and not gone then newest_again(1) end  -- it may have been the newest
if gone then
  -- The hash went with its last field; one still there holds only stored values of no
  -- consumer, which another program wrote: left in place, never silently deleted.
  redis.call('DEL', mark, meta_key(1))
  if INDEX then
    redis.call('ZREM', INDEX, data)
    redis.call('ZREM', NEWEST, data)
    redis.call('ZREM', OLDEST, data)
  else
    emptied = 1
  end
end
if INDEX then logged = 0 end
return {existed, emptied, logged}

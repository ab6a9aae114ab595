-- drain.lua: ask one consumer to stop taking new work (request_drain(); Sidekiq's "quiet").
-- The request is bit 2 of its stored value's flags (docs/protocol.md, section 4): the next
-- beat's reply carries it to the consumer, and its first draining beat acknowledges it
-- (clears the bit). Every request is logged (event `drain_requested`).
-- KEYS: group_keys(1) and meta_key(1) of lib.lua (sorted set, hash, index mark, event log,
--       metadata: not used here), then INDEX, EVENTS, EPOCH, the protocol version, NEWEST
--       and OLDEST on a standalone server
-- ARGV[1] consumer, ARGV[2] now_ns as a decimal string, or '' for the server clock (the
-- instant of the event), ARGV[3] how many entries the event log keeps, ARGV[4] how long it
-- lasts after its last entry, in ms; ARGV[5] cluster only: the protocol version the caller
-- read
-- Returns {existed (0/1), logged}: existed 0 when the consumer is not tracked (nothing is
-- written); logged the millisecond of the event on a cluster (the caller lists the log in
-- the event index), else 0.
-- Refused before anything is written: a prefix of another protocol version, or one that
-- still says version 1 (its v1 clients could not carry the request: `redis-presence
-- migrate` moves it on), a key of another type, a stored value this package did not write.
local err = check_protocol(PROTOCOL_AT, ARGV[5])
if err then return err end
if MODE == '1' then
  return redis.error_reply('PRESENCEPROTOCOL this prefix still says protocol version 1, '
    .. 'whose clients cannot carry a drain request: run redis-presence migrate once every '
    .. 'client speaks version 2 (docs/protocol.md)')
end
local _, data = group_keys(1)
local consumer = ARGV[1]
local old = redis.pcall('HGET', data, consumer)
if type(old) == 'table' then return failed(old, 2, 'hash') end
if not old then return {0, 0} end
local r, l, le, p, c, f, x, i, pv = parse_value(old)
if not r then return redis.error_reply(corrupt(2, consumer, old)) end
err = check_log(1)
if err then return err end
local flags = tonumber(f)
if math.floor(flags / 2) % 2 == 0 then flags = flags + 2 end
redis.call('HSET', data, consumer, r .. ' ' .. l .. ' ' .. le .. ' ' .. p .. ' ' .. c .. ' '
  .. int_str(flags) .. ' ' .. x .. ' ' .. i .. ' ' .. pv)
local _, _, now = now_parts(ARGV[2])
local logged = append_event(1, ARGV[3], ARGV[4], 'drain_requested',
  {'c' .. consumer, now .. ' ' .. r .. ' ' .. l .. ' ' .. le})
if INDEX then logged = 0 end
return {1, logged}

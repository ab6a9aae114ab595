-- stream_reap.lua: move a dead consumer's pending entries to a live consumer of the same
-- group and, once it holds none, remove it: in one atomic call, so the consumer cannot
-- come back between the check and the act (runs on the stream's node, not presence's:
-- none of lib.lua's KEYS layout applies, and it uses none of its helpers).
-- KEYS[1] the stream
-- ARGV[1] the consumer group, ARGV[2] the consumer to reap, ARGV[3] the live consumer
-- that takes its entries, ARGV[4] min_idle_ms (the expiry horizon + 1: an entry of the
-- consumer delivered or claimed more recently means it is back), ARGV[5] the most entries
-- moved by one call (bounded work: the caller calls again), ARGV[6] '1' to remove it once
-- it holds nothing
-- Returns {moved, removed (0/1), state}: state 'done' (it holds nothing now), 'more' (it
-- still holds entries: call again) or 'fresh' (one of its entries is younger than
-- min_idle_ms: it is back, and nothing was changed).
local stream, group, dead, target = KEYS[1], ARGV[1], ARGV[2], ARGV[3]
local min_idle, count = tonumber(ARGV[4]), tonumber(ARGV[5])

local claim = {stream, group, target, min_idle}
for _, entry in ipairs(redis.call('XPENDING', stream, group, '-', '+', count, dead)) do
  -- entry = {id, consumer, idle_ms, deliveries}
  if tonumber(entry[3]) < min_idle then
    return {0, 0, 'fresh'}
  end
  claim[#claim + 1] = entry[1]
end

local moved = 0
if #claim > 4 then
  -- Every id is at least min_idle old (checked above, in this same call), so XCLAIM with
  -- that min-idle-time moves each one; JUSTID moves them without counting a delivery.
  claim[#claim + 1] = 'JUSTID'
  moved = #redis.call('XCLAIM', unpack(claim))
end
if #redis.call('XPENDING', stream, group, '-', '+', 1, dead) > 0 then
  return {moved, 0, 'more'}
end
local removed = 0
if ARGV[6] == '1' then
  -- It holds nothing now: XGROUP DELCONSUMER discards no entry.
  redis.call('XGROUP', 'DELCONSUMER', stream, group, dead)
  removed = 1
end
return {moved, removed, 'done'}

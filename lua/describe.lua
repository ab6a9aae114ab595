-- describe.lua: store consumers' metadata, each only when it changed (what describe() and a
-- reporter's flush send for the consumers whose metadata is new or changed; nothing else
-- writes metadata).
-- KEYS: group_keys(g) and meta_key(g) of lib.lua for each group g = 1..GROUPS (sorted set,
--       hash, index mark, event log, metadata), then INDEX, EVENTS and EPOCH (none used
--       here) and the protocol version on a standalone server
-- ARGV: one triple per consumer: group number, consumer, its metadata (META_VALUE of
--       redis_presence/keys.py), or '' to remove it
-- Returns one number per triple: 0 when the consumer is not tracked (nothing is written:
-- metadata lives and dies with its consumer), 1 when its metadata already was that
-- (nothing is written), 2 when it was written.
-- Refused before anything is written: a prefix of another protocol version (check_protocol,
-- standalone only), a hash of stored values or of metadata of another type.
local refused = check_protocol(PROTOCOL_AT)
if refused then return refused end
for g = 1, GROUPS do
  local _, _, _, _, at = group_keys(g)
  local err = expect_types(at + 1, at + 1, {'hash'}) or expect_types(at + 4, at + 4, {'hash'})
  if err then return err end
end
local out = {}
for i = 1, #ARGV, 3 do
  local g, consumer, value = tonumber(ARGV[i]), ARGV[i + 1], ARGV[i + 2]
  local _, data = group_keys(g)
  local meta = meta_key(g)
  local code = 1
  if not redis.call('HGET', data, consumer) then  -- HGET: the broker's ACL has it
    code = 0
  else
    local old = redis.call('HGET', meta, consumer)
    if value == '' then
      if old then
        redis.call('HDEL', meta, consumer)
        code = 2
      end
    elseif old ~= value then
      redis.call('HSET', meta, consumer, value)
      code = 2
    end
  end
  out[#out + 1] = code
end
return out

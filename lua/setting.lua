-- setting.lua: store or forget one shared setting, a TTL or a progress budget of the prefix
-- or of one group (what set_ttl() and set_stuck_after() send; docs/protocol.md, section 8).
-- KEYS[1] the setting (P:ttl, P:stuck, P:{q}:g:ttl or P:{q}:g:stuck), then on a standalone
--         server only KEYS[2] the protocol version and KEYS[3] the fleet index of the groups'
--         own TTLs (P:ttls; on a cluster both live in other slots: the caller checks the
--         version first, and nobody keeps P:ttls)
-- ARGV[1] the setting in ms (a decimal integer), or '' to forget it
-- ARGV[2] (standalone, a group's own TTL only) the group's hash key (P:{q}:g:c, its member
--         in P:groups): P:ttls then holds it scored by ARGV[1] (ZADD), or loses it (ZREM,
--         for ''); absent or '' for any other setting
-- Returns 0. Refused before anything is written: a prefix of another protocol version
-- (check_protocol), a P:ttls of another type (WRONGTYPE, from its ZADD or ZREM, the first
-- write).
local refused = check_protocol(2)
if refused then return refused end
if KEYS[3] and ARGV[2] and ARGV[2] ~= '' then
  if ARGV[1] == '' then
    redis.call('ZREM', KEYS[3], ARGV[2])
  else
    redis.call('ZADD', KEYS[3], ARGV[1], ARGV[2])
  end
end
if ARGV[1] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[1])
end
return 0

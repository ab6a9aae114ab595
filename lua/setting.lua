-- setting.lua: store or forget one shared setting, a TTL or a progress budget of the prefix
-- or of one group (what set_ttl() and set_stuck_after() send; docs/protocol.md, section 8).
-- KEYS[1] the setting (P:ttl, P:stuck, P:{q}:g:ttl or P:{q}:g:stuck), then on a standalone
--         server only KEYS[2] the protocol version (on a cluster it lives in another slot,
--         and the caller checks it first)
-- ARGV[1] the setting in ms (a decimal integer), or '' to forget it
-- Returns 0. Refused before anything is written: a prefix of another protocol version
-- (check_protocol).
local refused = check_protocol(2)
if refused then return refused end
if ARGV[1] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[1])
end
return 0

-- snapshot.lua: every stored consumer of the given groups, with the server clock.
-- KEYS[g] hash consumer -> 'registered_ns last_heartbeat_ns lease_count', one per group
-- ARGV: none
-- Returns {seconds, microseconds, {field, value, ...} per group} (TIME, then HGETALL each);
-- ages and states are derived by the caller from the one classification rule.
local t = redis.call('TIME')
local out = {t[1], t[2]}
for g = 1, #KEYS do
  out[g + 2] = redis.call('HGETALL', KEYS[g])
end
return out

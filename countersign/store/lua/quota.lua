-- quota: count what one tenant keeps in Redis, and refuse what would take it over its cap.
-- One sorted set per tenant, in a slot of its own (the tenant's hash tag): members are what the tenant keeps
-- ("a:" action id, "r:" turn key), each scored by when it is gone at the latest, so expired members fall out
-- here and nothing has to be told when a record expires. Separate from the action's scripts (another slot),
-- so it runs unchanged on Redis Cluster.
-- KEYS[1]  cs:quota:{T}
-- ARGV[1]  the cap: members one tenant may hold
-- ARGV[2]  how long a member counts, milliseconds (the longest its record may live)
-- ARGV[3]  n: how many of the members below are already stored (admitted earlier; counted whatever the cap)
-- ARGV[4..3+n]  those members
-- ARGV[4+n..]   the members this call would keep (checked against the cap)
-- returns  {"ok", count}                 counted (new members added, known ones renewed)
--          {"full", count, first_gone}   the members to check would exceed the cap: they were not added
--                                        (the stored ones were). first_gone: when the oldest stops counting, ms
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local gone = now + tonumber(ARGV[2])
local stored = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
for i = 4, 3 + stored do redis.call('ZADD', KEYS[1], gone, ARGV[i]) end
if stored > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
local count = redis.call('ZCARD', KEYS[1])
local new = 0
for i = 4 + stored, #ARGV do
  if not redis.call('ZSCORE', KEYS[1], ARGV[i]) then new = new + 1 end
end
if new > 0 and count + new > tonumber(ARGV[1]) then
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {'full', count, first[2] or tostring(now)}
end
for i = 4 + stored, #ARGV do redis.call('ZADD', KEYS[1], gone, ARGV[i]) end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {'ok', count + new}

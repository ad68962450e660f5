-- resolve: an operator settles an action that evidence could not (unknown or needs manual review).
-- KEYS[1]  cs:{A}:run
-- KEYS[2]  cs:{A}:cont
-- ARGV[1]  outcome: the serialized countersign.v1.Action
-- ARGV[2]  outcome MAC
-- ARGV[3]  reason
-- ARGV[4]  receipt status ("SUCCEEDED" wakes the continuation)
-- ARGV[5]  the replay TTL (--replay-ttl), milliseconds: from now on it is a settled outcome
-- returns  {"ok"} | {"state", state}   (only unknown and review records may be resolved by hand)
local st = redis.call('HGET', KEYS[1], 'st')
if st ~= 'unknown' and st ~= 'review' then return {'state', st or 'none'} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'st', 'settled', 'out', ARGV[1], 'omac', ARGV[2], 'reason', ARGV[3],
           'rs', ARGV[4], 'claim', 'operator', 'settled_at', now)
redis.call('PEXPIRE', KEYS[1], ARGV[5])
if ARGV[4] == 'SUCCEEDED' and redis.call('HGET', KEYS[2], 'st') == 'pending' then
  redis.call('HSET', KEYS[2], 'st', 'ready')
end
return {'ok'}

-- continuation release: a failed generation puts it back, RUNNING -> READY, only by the holder of the claim id.
-- KEYS[1]  cs:{A}:cont
-- ARGV[1]  the caller's binding
-- ARGV[2]  the caller's claim id (from its ClaimContinuation)
-- returns  {"ok"} | {"state", state} (nothing to release) | {"lost"} (another claim holds it)
--          | {"none"} | {"forbidden"}
local c = redis.call('HMGET', KEYS[1], 'st', 'b', 'claim')
if not c[1] then return {'none'} end
if c[2] ~= ARGV[1] then return {'forbidden'} end
if c[1] ~= 'running' then return {'state', c[1]} end
if c[3] ~= ARGV[2] then return {'lost'} end
redis.call('HSET', KEYS[1], 'st', 'ready', 'lease', 0, 'claim', '')
return {'ok'}

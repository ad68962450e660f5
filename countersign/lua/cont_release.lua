-- continuation release: a failed generation puts it back, RUNNING -> READY.
-- KEYS[1]  cs:{A}:cont
-- ARGV[1]  the caller's binding
-- returns  {"ok"} | {"state", state} (nothing to release) | {"none"} | {"forbidden"}
local c = redis.call('HMGET', KEYS[1], 'st', 'b')
if not c[1] then return {'none'} end
if c[2] ~= ARGV[1] then return {'forbidden'} end
if c[1] ~= 'running' then return {'state', c[1]} end
redis.call('HSET', KEYS[1], 'st', 'ready', 'lease', 0)
return {'ok'}

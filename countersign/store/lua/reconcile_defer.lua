-- reconcile defer: the lookup proved nothing; ask again after a backoff (the claim stays fenced).
-- KEYS[1]  cs:{A}:run
-- ARGV[1]  the reconciler's claim id
-- ARGV[2]  delay before the next attempt, milliseconds
-- returns  {"ok"} | {"lost", state}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local r = redis.call('HMGET', KEYS[1], 'st', 'claim')
if r[1] ~= 'unknown' or r[2] ~= ARGV[1] then return {'lost', r[1] or 'none'} end
redis.call('HSET', KEYS[1], 'rdue', now + tonumber(ARGV[2]))
return {'ok'}

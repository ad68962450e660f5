-- continuation settle: RUNNING -> SETTLED with the (guarded) reply, only by the holder of the claim id;
-- later settles by that holder get the stored reply.
-- KEYS[1]  cs:{A}:cont
-- ARGV[1]  the caller's binding
-- ARGV[2]  reply text (after the reply guard)
-- ARGV[3]  reply MAC
-- ARGV[4]  the guard's verdict (JSON)
-- ARGV[5]  the caller's claim id (from its ClaimContinuation)
-- returns  {"ok"}
--          {"settled", reply, rmac, verdict}   this holder settled it before: replay the stored reply
--          {"lost", state}                     another claim holds it (or settled it): nothing stored
--          {"not_running", state}              nobody claimed it
--          {"none"} | {"forbidden"}
local c = redis.call('HMGET', KEYS[1], 'st', 'b', 'reply', 'rmac', 'verdict', 'claim')
if not c[1] then return {'none'} end
if c[2] ~= ARGV[1] then return {'forbidden'} end
if c[1] == 'settled' then
  if c[6] ~= ARGV[5] then return {'lost', 'settled'} end
  return {'settled', c[3] or '', c[4] or '', c[5] or ''}
end
if c[1] ~= 'running' then return {'not_running', c[1]} end
if c[6] ~= ARGV[5] then return {'lost', 'running'} end
redis.call('HSET', KEYS[1], 'st', 'settled', 'reply', ARGV[2], 'rmac', ARGV[3], 'verdict', ARGV[4])
return {'ok'}

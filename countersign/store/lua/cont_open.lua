-- continuation open: a continuation of one action, PENDING (or READY when the action already
-- settled SUCCEEDED). Opening twice returns the same continuation.
-- KEYS[1]  cs:{A}:cont
-- KEYS[2]  cs:{A}:run
-- KEYS[3]  cs:{A}:card
-- ARGV[1]  the caller's binding (must be the action's)
-- ARGV[2]  key id
-- ARGV[3]  snapshot (canonical JSON)
-- ARGV[4]  the turn's key (where the turn's read facts and proposed actions are kept)
-- ARGV[5]  record MAC
-- ARGV[6]  TTL, milliseconds
-- returns  {"cont", state, kid, snapshot, turn, mac}
--          {"none"}        no such action (never issued, or expired)
--          {"forbidden"}   the action belongs to another owner or session
local c = redis.call('HMGET', KEYS[1], 'st', 'b', 'kid', 'snap', 'req', 'mac')
if c[1] then
  if c[2] ~= ARGV[1] then return {'forbidden'} end
  return {'cont', c[1], c[3], c[4], c[5], c[6]}
end
local run = redis.call('HMGET', KEYS[2], 'st', 'b', 'rs')
local owner = run[2]
if not run[1] then owner = redis.call('HGET', KEYS[3], 'b') end
if not owner then return {'none'} end
if owner ~= ARGV[1] then return {'forbidden'} end
local st = 'pending'
if run[1] == 'settled' and run[3] == 'SUCCEEDED' then st = 'ready' end
redis.call('HSET', KEYS[1], 'st', st, 'b', ARGV[1], 'kid', ARGV[2], 'snap', ARGV[3], 'req', ARGV[4],
           'mac', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return {'cont', st, ARGV[2], ARGV[3], ARGV[4], ARGV[5]}

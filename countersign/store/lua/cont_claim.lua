-- continuation claim: READY -> RUNNING for one generator at a time (a lease, owned by a claim id). A RUNNING
-- continuation whose lease lapsed is claimable again: generation writes nothing, so redoing it is safe, and the
-- new claim id fences the old generator (its settle and release are refused from now on).
-- KEYS[1]  cs:{A}:cont
-- KEYS[2]  cs:{A}:run
-- ARGV[1]  the caller's binding
-- ARGV[2]  lease, milliseconds
-- ARGV[3]  claim id (fresh per claim; returned to the winner only)
-- returns  {"won", kid, snapshot, turn, mac, run_kid, out, omac, run_binding, run_tool, run_card, run_cmac}
--                                              (the run record's sealed card lets the caller check its binding)
--          {"settled", kid, snapshot, turn, mac, reply, rmac, verdict}
--          {"running"}                         another generator holds it
--          {"not_ready", run_state, reason}    the action has no SUCCEEDED receipt (yet)
--          {"none"} | {"forbidden"}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local c = redis.call('HMGET', KEYS[1], 'st', 'b', 'lease', 'kid', 'snap', 'req', 'mac', 'reply', 'rmac', 'verdict')
if not c[1] then return {'none'} end
if c[2] ~= ARGV[1] then return {'forbidden'} end
if c[1] == 'settled' then
  return {'settled', c[4], c[5], c[6], c[7], c[8] or '', c[9] or '', c[10] or ''}
end
if c[1] == 'running' and tonumber(c[3]) > now then return {'running'} end
if c[1] == 'pending' then
  local run = redis.call('HMGET', KEYS[2], 'st', 'reason')
  return {'not_ready', run[1] or 'none', run[2] or ''}
end
redis.call('HSET', KEYS[1], 'st', 'running', 'lease', now + tonumber(ARGV[2]), 'claim', ARGV[3])
local run = redis.call('HMGET', KEYS[2], 'kid', 'out', 'omac', 'b', 'tool', 'card', 'cmac')
return {'won', c[4], c[5], c[6], c[7], run[1] or '', run[2] or '', run[3] or '', run[4] or '', run[5] or '',
        run[6] or '', run[7] or ''}

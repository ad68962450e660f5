-- settle: running|unknown -> settled (or -> unknown / review), only by the holder of the claim id.
-- KEYS[1]  cs:{A}:run
-- KEYS[2]  cs:{A}:cont   (the action's continuation; may not exist)
-- KEYS[3]  cs:{A}:audit  the action's audit anchor (lib/chain.lua)
-- KEYS[4]  cs:{A}:events the action's audit events
-- ARGV[1]  claim id of the caller
-- ARGV[2]  new state: "settled", "unknown" or "review"
-- ARGV[3]  outcome: the serialized countersign.v1.Action
-- ARGV[4]  outcome MAC
-- ARGV[5]  reason (UPPER_SNAKE, empty when succeeded)
-- ARGV[6]  receipt status: "SUCCEEDED" wakes the continuation (pending -> ready); kept as "rs"
-- ARGV[7]  the replay TTL (--replay-ttl), milliseconds: applied to a settled outcome only; an unknown or
--          review record never expires (an unresolved action is never forgotten)
-- ARGV[8..]  optional: the chain's arguments (lib/chain.lua, from index 8) with the events of this step (the
--          executor's claimed and settled), appended in the step that records the outcome
-- returns  {"ok"}               recorded (and the events appended)
--          {"conflict", seq, head}  the chain no longer ends where the events were chained to (another writer
--                               appended meanwhile): nothing changed; chain them to (seq, head) and settle again
--          {"lost", state}      the caller does not hold the claim (someone else settled or fenced it)
--          {"gone"}             no record: expired or lost by the store
local run = redis.call('HMGET', KEYS[1], 'st', 'claim', 'out')
if not run[1] then return {'gone'} end
if run[2] ~= ARGV[1] then return {'lost', run[1]} end
if run[1] == 'settled' then
  if run[3] == ARGV[3] then return {'ok'} end
  return {'lost', run[1]}
end
if run[1] ~= 'running' and run[1] ~= 'unknown' then return {'lost', run[1]} end
if #ARGV > 7 then
  local conflict = chain_check(KEYS[3], ARGV, 8)
  if conflict then return conflict end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'st', ARGV[2], 'out', ARGV[3], 'omac', ARGV[4], 'reason', ARGV[5],
           'rs', ARGV[6], 'settled_at', now)
if ARGV[2] == 'settled' then
  redis.call('PEXPIRE', KEYS[1], ARGV[7])
else
  redis.call('PERSIST', KEYS[1])
end
if ARGV[2] == 'settled' and ARGV[6] == 'SUCCEEDED' then
  if redis.call('HGET', KEYS[2], 'st') == 'pending' then
    redis.call('HSET', KEYS[2], 'st', 'ready')
  end
end
if #ARGV > 7 then chain_append(KEYS[3], KEYS[4], ARGV, 8) end
return {'ok'}

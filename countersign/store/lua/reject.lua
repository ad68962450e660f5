-- reject: ready -> rejected; a short settled record so a late Confirm gets REJECTED.
-- KEYS[1]  cs:{A}:card
-- KEYS[2]  cs:{A}:run
-- KEYS[3]  cs:{A}:audit    the action's audit anchor (lib/chain.lua)
-- KEYS[4]  cs:{A}:events   the action's audit events
-- ARGV[1]  the caller's binding
-- ARGV[2]  outcome: the serialized countersign.v1.Action in state REJECTED
-- ARGV[3]  outcome MAC
-- ARGV[4]  the replay TTL (--replay-ttl), milliseconds
-- ARGV[5..]  optional: the chain's arguments (lib/chain.lua, from index 5) with the ``rejected`` event, appended
--          in the same step
-- returns  {"rejected"}                              the card is gone; the record says REJECTED (and its event
--                                                  appended)
--          {"conflict", seq, head}                 the chain no longer ends where the event was chained to:
--                                                  nothing changed; chain it to (seq, head) and reject again
--          {"run", state, kid, out, omac, reason, binding, tool, card, cmac}
--                                                  claimed or settled before: that record
--          {"expired"}                             no card, or one past its sealed expiry
--          {"forbidden"}
local run = redis.call('HMGET', KEYS[2], 'st', 'b', 'kid', 'out', 'omac', 'reason', 'tool', 'card', 'cmac')
if run[1] then
  if run[2] ~= ARGV[1] then return {'forbidden'} end
  return {'run', run[1], run[3] or '', run[4] or '', run[5] or '', run[6] or '', run[2], run[7] or '',
          run[8] or '', run[9] or ''}
end
local card = redis.call('HMGET', KEYS[1], 'b', 'tool', 'body', 'mac', 'kid')
if not card[1] then return {'expired'} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ok, sealed = pcall(cjson.decode, card[3] or '')
if ok and type(sealed) == 'table' and tonumber(sealed['expires_at_ms'])
    and tonumber(sealed['expires_at_ms']) <= now then
  redis.call('DEL', KEYS[1])
  return {'expired'}
end
if card[1] ~= ARGV[1] then return {'forbidden'} end
if #ARGV > 4 then
  local conflict = chain_check(KEYS[3], ARGV, 5)
  if conflict then return conflict end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[2], 'st', 'settled', 'b', card[1], 'tool', card[2], 'kid', card[5],
           'card', card[3], 'cmac', card[4], 'out', ARGV[2], 'omac', ARGV[3], 'reason', 'REJECTED',
           'settled_at', now)
redis.call('PEXPIRE', KEYS[2], ARGV[4])
if #ARGV > 4 then chain_append(KEYS[3], KEYS[4], ARGV, 5) end
return {'rejected'}

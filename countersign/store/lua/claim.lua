-- claim: ready -> running for exactly one caller (docs/design.md §7, invariant I3).
-- KEYS[1]  cs:{A}:card
-- KEYS[2]  cs:{A}:run
-- ARGV[1]  the caller's binding
-- ARGV[2]  the write tools the caller's role may NOT run, as ",tool,tool,"
-- ARGV[3]  claim id (fresh per attempt; a retry of this very call sends the same id)
-- ARGV[4]  lease, milliseconds
-- returns  {"won", kid, tool, body, mac}           the caller holds the claim and must settle it (or put the
--                                                  card back with release.lua if it never sends the request)
--          {"run", state, kid, out, omac, reason, binding, tool, card, cmac}
--                                                  someone claimed it before: replay or RUNNING
--                                                  (a running record whose lease lapsed is
--                                                   stored and returned as "unknown")
--          {"expired"}                             no card and no record, or the card's sealed expiry (in its
--                                                  MAC'd body) has passed: a TTL removed by hand keeps nothing alive
--          {"forbidden"}                           the binding differs; nothing is touched
--          {"role", tool}                          the caller's role may not run the tool; card untouched
-- The run record gets no expiry: an unresolved action is never forgotten (settle.lua gives a settled one the
-- replay TTL).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local run = redis.call('HMGET', KEYS[2], 'st', 'b', 'claim', 'lease', 'kid', 'out', 'omac', 'reason',
                       'tool', 'card', 'cmac')
if run[1] then
  if run[2] ~= ARGV[1] then return {'forbidden'} end
  if run[1] == 'running' and run[3] == ARGV[3] then
    return {'won', run[5], run[9], run[10], run[11]}
  end
  if run[1] == 'running' and tonumber(run[4]) <= now then
    redis.call('HSET', KEYS[2], 'st', 'unknown', 'reason', 'LEASE_LAPSED')
    redis.call('PERSIST', KEYS[2])
    run[1] = 'unknown'
    run[8] = 'LEASE_LAPSED'
  end
  return {'run', run[1], run[5] or '', run[6] or '', run[7] or '', run[8] or '', run[2], run[9] or '',
          run[10] or '', run[11] or ''}
end
local card = redis.call('HMGET', KEYS[1], 'b', 'tool', 'body', 'mac', 'kid')
if not card[1] then return {'expired'} end
local ok, sealed = pcall(cjson.decode, card[3] or '')
if ok and type(sealed) == 'table' and tonumber(sealed['expires_at_ms'])
    and tonumber(sealed['expires_at_ms']) <= now then
  redis.call('DEL', KEYS[1])
  return {'expired'}
end
if card[1] ~= ARGV[1] then return {'forbidden'} end
if string.find(ARGV[2], ',' .. card[2] .. ',', 1, true) then return {'role', card[2]} end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[2], 'st', 'running', 'claim', ARGV[3], 'lease', now + tonumber(ARGV[4]),
           'attempt', 1, 'b', card[1], 'tool', card[2], 'kid', card[5], 'card', card[3],
           'cmac', card[4], 'claimed_at', now)
redis.call('PERSIST', KEYS[2])
return {'won', card[5], card[2], card[3], card[4]}

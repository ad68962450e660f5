-- grant_run: a write covered by a standing grant is issued directly as running, with no card (docs/design.md §12):
-- step two of a write under a grant, after grant_use.lua took a use for this action. The run record has the shape
-- claim.lua creates (the sealed card body names the grant), so execute, settle, reconcile and audit treat it as
-- any claimed action.
-- KEYS[1]  cs:{A}:card
-- KEYS[2]  cs:{A}:run
-- ARGV[1]  binding (keyed hash of tenant, actor, subject, session, admin context)
-- ARGV[2]  tool name
-- ARGV[3]  the sealed card body (canonical JSON, naming the grant)
-- ARGV[4]  its MAC
-- ARGV[5]  key id
-- ARGV[6]  claim id
-- ARGV[7]  lease, milliseconds
-- ARGV[8]  grant id
-- returns  {"won", kid, tool, body, mac}   the caller holds the claim and must settle it (or release it)
--          {"run", state, kid, out, omac, reason, binding, tool, card, cmac}
--                                          the action exists already: its record (replay, or RUNNING)
--          {"card", kid, body, mac}        a card of this action waits for the user (issued before the grant
--                                          covered it): the caller answers with it; the use is not given back
-- The run record gets no expiry: an unresolved action is never forgotten (settle.lua gives a settled one the
-- replay TTL).
local run = redis.call('HMGET', KEYS[2], 'st', 'kid', 'out', 'omac', 'reason', 'b', 'tool', 'card', 'cmac')
if run[1] then
  return {'run', run[1], run[2] or '', run[3] or '', run[4] or '', run[5] or '', run[6] or '', run[7] or '',
          run[8] or '', run[9] or ''}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local card = redis.call('HMGET', KEYS[1], 'kid', 'body', 'mac')
if card[2] then
  local ok, sealed = pcall(cjson.decode, card[2])
  local dead = ok and type(sealed) == 'table' and tonumber(sealed['expires_at_ms'])
               and tonumber(sealed['expires_at_ms']) <= now
  if not dead then return {'card', card[1] or '', card[2], card[3] or ''} end
  redis.call('DEL', KEYS[1])
end
redis.call('HSET', KEYS[2], 'st', 'running', 'claim', ARGV[6], 'lease', now + tonumber(ARGV[7]),
           'attempt', 1, 'b', ARGV[1], 'tool', ARGV[2], 'kid', ARGV[5], 'card', ARGV[3],
           'cmac', ARGV[4], 'claimed_at', now, 'grant', ARGV[8])
redis.call('PERSIST', KEYS[2])
return {'won', ARGV[5], ARGV[2], ARGV[3], ARGV[4]}

-- issue: create the confirmation card of an action unless the action already exists.
-- KEYS[1]  cs:{A}:card
-- KEYS[2]  cs:{A}:run
-- KEYS[3]  cs:{A}:audit    the action's audit anchor (lib/chain.lua)
-- KEYS[4]  cs:{A}:events   the action's audit events
-- ARGV[1]  binding (keyed hash of tenant, actor, subject, session, admin context)
-- ARGV[2]  tool name
-- ARGV[3]  card body (canonical JSON)
-- ARGV[4]  card MAC
-- ARGV[5]  key id
-- ARGV[6]  card TTL, milliseconds
-- ARGV[7]  approval: none | signed (copied from the sealed body: claim.lua compares it)
-- ARGV[8]  the approval digest an approval's dig must equal
-- ARGV[9]  the card's risk (an approval's acr must satisfy its step-up rule)
-- ARGV[10..]  optional: the chain's arguments (lib/chain.lua, from index 10) with the ``issued`` event, appended
--          with the card in this step
-- returns  {"issued"}                              the card was created (replacing one past its sealed expiry),
--                                                  and its event appended
--          {"conflict", seq, head}                 the chain no longer ends where the event was chained to:
--                                                  nothing changed; chain it to (seq, head) and issue again
--          {"card", kid, body, mac}                a card was already ready: the same card
--          {"run", state, kid, out, omac, reason, binding, tool, card, cmac}
--                                                  the action was claimed already: its record
local st = redis.call('HMGET', KEYS[2], 'st', 'kid', 'out', 'omac', 'reason', 'b', 'tool', 'card', 'cmac')
if st[1] then
  return {'run', st[1], st[2] or '', st[3] or '', st[4] or '', st[5] or '', st[6] or '', st[7] or '',
          st[8] or '', st[9] or ''}
end
local card = redis.call('HMGET', KEYS[1], 'kid', 'body', 'mac')
if card[2] then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local ok, sealed = pcall(cjson.decode, card[2])
  local dead = ok and type(sealed) == 'table' and tonumber(sealed['expires_at_ms'])
               and tonumber(sealed['expires_at_ms']) <= now
  if not dead then return {'card', card[1] or '', card[2], card[3] or ''} end
end
if #ARGV > 9 then
  local conflict = chain_check(KEYS[3], ARGV, 10)
  if conflict then return conflict end
end
redis.call('HSET', KEYS[1], 'b', ARGV[1], 'tool', ARGV[2], 'body', ARGV[3], 'mac', ARGV[4], 'kid', ARGV[5],
           'appr', ARGV[7], 'dig', ARGV[8], 'risk', ARGV[9])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
if #ARGV > 9 then chain_append(KEYS[3], KEYS[4], ARGV, 10) end
return {'issued'}

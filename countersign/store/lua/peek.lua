-- peek: where an action stands, applying the time-driven transitions (a lapsed lease -> unknown; a card
-- past its sealed expiry is gone, whatever its TTL says).
-- KEYS[1]  cs:{A}:card
-- KEYS[2]  cs:{A}:run
-- returns  {"run", state, kid, out, omac, reason, binding, tool, card, cmac}
--          {"card", kid, body, mac, binding, tool}
--          {"none"}
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local run = redis.call('HMGET', KEYS[2], 'st', 'kid', 'out', 'omac', 'reason', 'b', 'tool', 'lease', 'card', 'cmac')
if run[1] then
  if run[1] == 'running' and tonumber(run[8]) <= now then
    redis.call('HSET', KEYS[2], 'st', 'unknown', 'reason', 'LEASE_LAPSED')
    redis.call('PERSIST', KEYS[2])
    run[1] = 'unknown'
    run[5] = 'LEASE_LAPSED'
  end
  return {'run', run[1], run[2] or '', run[3] or '', run[4] or '', run[5] or '', run[6] or '', run[7] or '',
          run[9] or '', run[10] or ''}
end
local card = redis.call('HMGET', KEYS[1], 'kid', 'body', 'mac', 'b', 'tool')
if card[2] then
  local ok, sealed = pcall(cjson.decode, card[2])
  if ok and type(sealed) == 'table' and tonumber(sealed['expires_at_ms'])
      and tonumber(sealed['expires_at_ms']) <= now then
    redis.call('DEL', KEYS[1])
    return {'none'}
  end
  return {'card', card[1] or '', card[2], card[3] or '', card[4] or '', card[5] or ''}
end
return {'none'}

-- reconcile claim: take the work of resolving one UNKNOWN action, fencing every earlier holder.
-- (A running record whose lease lapsed becomes unknown first, exactly as in claim.lua.)
-- KEYS[1]  cs:{A}:run
-- ARGV[1]  the reconciler's claim id (from now on the only id settle.lua accepts)
-- ARGV[2]  work lease, milliseconds (another reconciler waits until it lapses)
-- returns  {"won", kid, tool, card, cmac, attempts, unknown_since_ms, now_ms}
--          {"run", state, kid, out, omac, reason, binding, tool, card, cmac}   nothing to reconcile
--          {"busy", state}                                          another reconciler holds it, or not yet due
--          {"none"}
-- An unknown record never expires (one written by an older version with a TTL loses it here).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local r = redis.call('HMGET', KEYS[1], 'st', 'lease', 'kid', 'tool', 'card', 'cmac', 'rdue', 'ratt', 'since',
                     'out', 'omac', 'reason', 'b')
if not r[1] then return {'none'} end
if r[1] == 'running' then
  if tonumber(r[2]) > now then return {'busy', 'running'} end
  redis.call('HSET', KEYS[1], 'st', 'unknown', 'reason', 'LEASE_LAPSED')
  r[1] = 'unknown'
end
if r[1] ~= 'unknown' then
  return {'run', r[1], r[3] or '', r[10] or '', r[11] or '', r[12] or '', r[13] or '', r[4] or '',
          r[5] or '', r[6] or ''}
end
redis.call('PERSIST', KEYS[1])
if r[7] and tonumber(r[7]) > now then return {'busy', 'unknown'} end
local attempts = tonumber(r[8] or '0') + 1
local since = r[9] or tostring(now)
redis.call('HSET', KEYS[1], 'claim', ARGV[1], 'rdue', now + tonumber(ARGV[2]), 'ratt', attempts, 'since', since)
return {'won', r[3] or '', r[4] or '', r[5] or '', r[6] or '', attempts, since, now}

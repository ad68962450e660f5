-- release: running -> ready, by the claim holder, when the request was never sent (docs/design.md §7-§8): the
-- claim's WAIT was not acknowledged by enough replicas, or the downstream could not be reached at all. The
-- card comes back exactly as sealed (same token), with its sealed expiry and the hash fields claim.lua compares
-- (approval, digest, risk: from the sealed body, as issue.lua wrote them); the run record goes.
-- KEYS[1]  cs:{A}:card
-- KEYS[2]  cs:{A}:run
-- ARGV[1]  the claim id of the caller
-- returns  {"ready"}          the card is back, READY
--          {"expired"}        its sealed expiry passed meanwhile: the record is gone, the card is not restored
--          {"lost", state}    the caller does not hold a claim it could give back (a reconciler took it, it
--                             settled, or it was never ours); nothing is touched
local run = redis.call('HMGET', KEYS[2], 'st', 'claim', 'out', 'b', 'tool', 'card', 'cmac', 'kid')
if not run[1] then return {'lost', 'none'} end
if run[2] ~= ARGV[1] or (run[1] ~= 'running' and run[1] ~= 'unknown') or (run[3] and run[3] ~= '') then
  return {'lost', run[1]}
end
local ok, sealed = pcall(cjson.decode, run[6] or '')
local expires = ok and type(sealed) == 'table' and tonumber(sealed['expires_at_ms'])
if not expires then return {'lost', 'unreadable'} end   -- left for the lease and reconciliation to settle
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('DEL', KEYS[2])
if expires <= now then return {'expired'} end
local function str(v) if type(v) == 'string' then return v end return '' end
redis.call('HSET', KEYS[1], 'b', run[4], 'tool', run[5], 'body', run[6], 'mac', run[7], 'kid', run[8],
           'appr', str(sealed['approval']), 'dig', str(sealed['approval_digest']), 'risk', str(sealed['risk']))
redis.call('PEXPIREAT', KEYS[1], expires)
return {'ready'}

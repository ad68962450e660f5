-- grant_create: record a standing grant unless it exists (docs/design.md §12). Idempotent on the grant id (derived
-- from the approval's iss and jti): the same approval offered twice is one grant, never a second one with fresh
-- uses; a revoked or used-up grant stays recorded until ARGV[4] after its expiry, so its approval cannot bring it
-- back while it could still verify.
-- KEYS[1]  cs:grants:{O}   the owner's grants, one hash: <G> the sealed grant, <G>:exp its expiry (ms),
--                          <G>:n the uses taken, <G>:st "revoked" once revoked
-- ARGV[1]  grant id
-- ARGV[2]  the sealed grant (JSON: kid, mac, body; the sidecar verifies it on every read)
-- ARGV[3]  its expiry, ms since the epoch
-- ARGV[4]  how long a grant is kept past its expiry, ms
-- ARGV[5]  the most live grants one owner may hold
-- returns  {"created"}                  recorded now, with no use taken
--          {"exists", sealed, taken, st}  recorded before (st: "live" or "revoked"); nothing changed
--          {"full", live}               the owner holds ARGV[5] live grants already; nothing changed
-- Grants kept past their time are swept here; the hash expires with the last grant it keeps.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local keep = tonumber(ARGV[4])
local found = redis.call('HMGET', KEYS[1], ARGV[1], ARGV[1] .. ':n', ARGV[1] .. ':st')
if found[1] then
  return {'exists', found[1], tonumber(found[2] or '0'), found[3] or 'live'}
end
local all = redis.call('HGETALL', KEYS[1])
local live, last = 0, tonumber(ARGV[3]) + keep
for i = 1, #all, 2 do
  local field = all[i]
  if string.sub(field, -4) == ':exp' then
    local id, exp = string.sub(field, 1, -5), tonumber(all[i + 1])
    if exp + keep <= now then
      redis.call('HDEL', KEYS[1], id, id .. ':exp', id .. ':n', id .. ':st')
    else
      if exp > now and redis.call('HGET', KEYS[1], id .. ':st') ~= 'revoked' then live = live + 1 end
      if exp + keep > last then last = exp + keep end
    end
  end
end
if live >= tonumber(ARGV[5]) then return {'full', live} end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2], ARGV[1] .. ':exp', ARGV[3], ARGV[1] .. ':n', 0)
redis.call('PEXPIREAT', KEYS[1], last)
return {'created'}

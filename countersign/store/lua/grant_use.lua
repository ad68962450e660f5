-- grant_use: take one use of a standing grant for one action: step one of a write under a grant (docs/design.md
-- §12). At most ARGV[4] actions ever take a use, however many calls race; the same action takes at most one (the
-- same call in the same turn, or its retry after a crash, gets "again"). Step two is grant_run.lua, in the
-- action's own slot: a sidecar that dies between the two loses that use (the safe direction).
-- KEYS[1]  cs:grants:{O}             the owner's grants (grant_create.lua)
-- KEYS[2]  cs:grants:{O}:<G>:used    the actions that took a use of grant G (a set)
-- ARGV[1]  grant id
-- ARGV[2]  action id
-- ARGV[3]  the grant's MAC, as the caller verified it
-- ARGV[4]  uses (from the verified grant)
-- ARGV[5]  expiry, ms since the epoch (from the verified grant)
-- ARGV[6]  how long a grant is kept past its expiry, ms (the set's lifetime)
-- returns  {"took", left}      this action took a use now; left: the uses that remain
--          {"again", left}     this action took a use before: nothing is taken
--          {"spent"}           every use is taken
--          {"revoked"}         the owner revoked it
--          {"expired"}         its expiry passed
--          {"none"}            no such grant (never created, or swept)
--          {"tampered"}        the stored grant is not the one the caller verified
local found = redis.call('HMGET', KEYS[1], ARGV[1], ARGV[1] .. ':n', ARGV[1] .. ':st')
if not found[1] then return {'none'} end
local ok, sealed = pcall(cjson.decode, found[1])
if not ok or type(sealed) ~= 'table' or sealed['mac'] ~= ARGV[3] then return {'tampered'} end
if found[3] == 'revoked' then return {'revoked'} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(ARGV[5]) <= now then return {'expired'} end
local uses, taken = tonumber(ARGV[4]), tonumber(found[2] or '0')
if redis.call('SISMEMBER', KEYS[2], ARGV[2]) == 1 then return {'again', math.max(uses - taken, 0)} end
if taken >= uses then return {'spent'} end
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('PEXPIREAT', KEYS[2], tonumber(ARGV[5]) + tonumber(ARGV[6]))
redis.call('HINCRBY', KEYS[1], ARGV[1] .. ':n', 1)
return {'took', uses - taken - 1}

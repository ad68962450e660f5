-- grant_revoke: end a standing grant before its expiry (docs/design.md §12). The grant stays recorded, revoked, until
-- it is swept after its expiry, so the same approval cannot create it again.
-- KEYS[1]  cs:grants:{O}   the owner's grants: only the owner's own hash is ever named, so no one else's grant
--                          can be found, let alone revoked
-- ARGV[1]  grant id
-- returns  {"revoked", sealed, taken}    revoked now
--          {"already", sealed, taken}    revoked before; nothing changed
--          {"none"}                      no such grant of this owner
local found = redis.call('HMGET', KEYS[1], ARGV[1], ARGV[1] .. ':n', ARGV[1] .. ':st')
if not found[1] then return {'none'} end
if found[3] == 'revoked' then return {'already', found[1], tonumber(found[2] or '0')} end
redis.call('HSET', KEYS[1], ARGV[1] .. ':st', 'revoked')
return {'revoked', found[1], tonumber(found[2] or '0')}

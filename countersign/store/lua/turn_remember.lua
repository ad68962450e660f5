-- turn remember: append one entry to a user turn's list (its read facts and proposed actions), keep its last
-- entries, refresh its TTL. One command instead of a pipeline of three (RPUSH, LTRIM, PEXPIRE): the same effect,
-- and it goes with the other scripts called at the same moment (store/redis_store.py, _eval).
-- KEYS[1]  cs:req:{T}
-- ARGV[1]  the entry
-- ARGV[2]  how many entries the turn keeps
-- ARGV[3]  TTL, milliseconds
-- returns  {"ok"}
redis.call('RPUSH', KEYS[1], ARGV[1])
redis.call('LTRIM', KEYS[1], -tonumber(ARGV[2]), -1)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {'ok'}

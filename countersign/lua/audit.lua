-- audit: append one event to an action's own chain, atomically with advancing its anchor.
-- The event's MAC (computed by the sidecar under the server key) covers the previous head, so an
-- edited, deleted or reordered event breaks the chain; the anchor catches a truncated tail.
-- KEYS[1]  cs:{A}:audit    anchor: seq, head (the last event's MAC)
-- KEYS[2]  cs:{A}:events   the action's events (a stream)
-- ARGV[1]  the head the event was chained to ("" for the first event)
-- ARGV[2]  the event (canonical JSON, including seq, prev and mac)
-- ARGV[3]  the event's MAC (the new head)
-- ARGV[4]  TTL of the chain, milliseconds
-- returns  {"ok", seq} | {"conflict", seq, head}   (another event got there first: rebuild and retry)
local a = redis.call('HMGET', KEYS[1], 'seq', 'head')
local head = a[2] or ''
local seq = tonumber(a[1] or '0')
if head ~= ARGV[1] then return {'conflict', seq, head} end
redis.call('XADD', KEYS[2], '*', 'e', ARGV[2])
redis.call('HSET', KEYS[1], 'seq', seq + 1, 'head', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return {'ok', seq + 1}

-- audit: append events to an action's own chain, atomically with advancing its anchor.
-- Each event's MAC (computed by the sidecar under the server key) covers the previous head, so an
-- edited, deleted or reordered event breaks the chain; the anchor catches a truncated tail.
-- KEYS[1]  cs:{A}:audit    anchor: seq, head (the last event's MAC)
-- KEYS[2]  cs:{A}:events   the action's events (a stream)
-- ARGV[1]  the head the first event was chained to ("" for the first event of the action)
-- ARGV[2]  TTL of the chain, milliseconds
-- ARGV[3], ARGV[4], ...   pairs of (event as canonical JSON, its MAC), chained in order
-- returns  {"ok", seq} | {"conflict", seq, head}   (another writer got there first: rebuild, retry)
local a = redis.call('HMGET', KEYS[1], 'seq', 'head')
local head = a[2] or ''
local seq = tonumber(a[1] or '0')
if head ~= ARGV[1] then return {'conflict', seq, head} end
for i = 3, #ARGV, 2 do
  redis.call('XADD', KEYS[2], '*', 'e', ARGV[i])
  seq = seq + 1
  head = ARGV[i + 1]
end
redis.call('HSET', KEYS[1], 'seq', seq, 'head', head)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return {'ok', seq}

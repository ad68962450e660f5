-- audit: append events to an action's own chain, atomically with advancing its MAC'd anchor.
-- Each event's MAC (computed by the sidecar under the server key) covers the previous head, so an
-- edited, deleted or reordered event breaks the chain; the anchor, MAC'd over (action, seq, head),
-- catches a truncated tail, and cannot be rewritten to fit a shorter chain without the key.
-- KEYS[1]  cs:{A}:audit    anchor: seq, head (the last event's MAC), kid, mac
-- KEYS[2]  cs:{A}:events   the action's events (a stream)
-- ARGV[1]  the seq the first event follows (0 for the first event of the action)
-- ARGV[2]  the head the first event was chained to ("" for the first event of the action)
-- ARGV[3]  key id of the anchor's MAC
-- ARGV[4]  the anchor's MAC after these events (over action, seq, head; computed by the sidecar)
-- ARGV[5]  expiry: "keep" (the action is unresolved: its chain never expires, docs/design.md §7),
--          "expire" (set ARGV[6]), or "same" (an event that changes no state: leave the expiry as it
--          was; a new chain gets ARGV[6])
-- ARGV[6]  TTL of the chain, milliseconds
-- ARGV[7], ARGV[8], ...   pairs of (event as canonical JSON, its MAC), chained in order
-- returns  {"ok", seq} | {"conflict", seq, head}   (another writer got there first: rebuild, retry)
local a = redis.call('HMGET', KEYS[1], 'seq', 'head')
local head = a[2] or ''
local seq = tonumber(a[1] or '0')
local before = seq
if head ~= ARGV[2] or seq ~= tonumber(ARGV[1]) then return {'conflict', seq, head} end
for i = 7, #ARGV, 2 do
  redis.call('XADD', KEYS[2], '*', 'e', ARGV[i])
  seq = seq + 1
  head = ARGV[i + 1]
end
redis.call('HSET', KEYS[1], 'seq', seq, 'head', head, 'kid', ARGV[3], 'mac', ARGV[4])
if ARGV[5] == 'keep' then
  redis.call('PERSIST', KEYS[1])
  redis.call('PERSIST', KEYS[2])
elseif ARGV[5] == 'expire' or before == 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
  redis.call('PEXPIRE', KEYS[2], ARGV[6])
end
return {'ok', seq}

-- chain (prepended by RedisStore to every script that calls chain_append): append MAC'd events to an action's
-- audit chain and advance its MAC'd anchor, in the step of the script that prepends it. Each event's MAC
-- (computed by the sidecar under the server key, which never enters Redis) covers the previous head, so an
-- edited, deleted or reordered event breaks the chain; the anchor, MAC'd over (action, seq, head), catches a
-- truncated tail and cannot be rewritten to fit a shorter chain without the key.
-- akey     cs:{A}:audit    anchor: seq, head (the last event's MAC), kid, mac
-- ekey     cs:{A}:events   the action's events (a stream)
-- argv, i  the chain's arguments in ARGV from index i on:
--          i    the seq the first event follows (0 for the first event of the action)
--          i+1  the head the first event was chained to ("" for the first event of the action)
--          i+2  key id of the anchor's MAC
--          i+3  the anchor's MAC after these events (over action, seq, head; computed by the sidecar)
--          i+4  expiry: "keep" (the action is unresolved: its chain never expires, docs/design.md §7),
--               "expire" (set i+5), or "same" (an event that changes no state: leave the expiry as it was;
--               a new chain gets i+5)
--          i+5  TTL of the chain, milliseconds
--          i+6, i+7, ...   pairs of (event as canonical JSON, its MAC), chained in order
-- chain_check returns nil when the chain still ends where the events were chained to, else
--          {"conflict", seq, head}: where it ends (the caller returns it, having changed nothing)
-- chain_append appends (call chain_check first, before any write of the script) and returns the new seq.
local function chain_check(akey, argv, i)
  local a = redis.call('HMGET', akey, 'seq', 'head')
  local head = a[2] or ''
  local seq = tonumber(a[1] or '0')
  if head ~= argv[i + 1] or seq ~= tonumber(argv[i]) then return {'conflict', seq, head} end
  return nil
end

local function chain_append(akey, ekey, argv, i)
  local seq = tonumber(argv[i])
  local before = seq
  local head = argv[i + 1]
  for j = i + 6, #argv, 2 do
    redis.call('XADD', ekey, '*', 'e', argv[j])
    seq = seq + 1
    head = argv[j + 1]
  end
  redis.call('HSET', akey, 'seq', seq, 'head', head, 'kid', argv[i + 2], 'mac', argv[i + 3])
  if argv[i + 4] == 'keep' then
    redis.call('PERSIST', akey)
    redis.call('PERSIST', ekey)
  elseif argv[i + 4] == 'expire' or before == 0 then
    redis.call('PEXPIRE', akey, argv[i + 5])
    redis.call('PEXPIRE', ekey, argv[i + 5])
  end
  return seq
end


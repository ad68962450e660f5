-- audit: append events to an action's own chain, atomically with advancing its MAC'd anchor (lib/chain.lua,
-- prepended when the script is loaded, holds the append and the layout of the chain's arguments). For events of
-- transitions whose scripts do not append their own (issue.lua and settle.lua append theirs).
-- KEYS[1]  cs:{A}:audit    anchor: seq, head (the last event's MAC), kid, mac
-- KEYS[2]  cs:{A}:events   the action's events (a stream)
-- ARGV[1..6], ARGV[7], ARGV[8], ...   the chain's arguments (lib/chain.lua, from index 1)
-- returns  {"ok", seq} | {"conflict", seq, head}   (another writer got there first: rebuild, retry)
local conflict = chain_check(KEYS[1], ARGV, 1)
if conflict then return conflict end
return {'ok', chain_append(KEYS[1], KEYS[2], ARGV, 1)}

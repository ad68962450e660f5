-- claim: ready -> running for exactly one caller (docs/design.md §7, invariant I3), only with the approval the
-- card requires (docs/design.md §12).
-- KEYS[1]  cs:{A}:card
-- KEYS[2]  cs:{A}:run
-- KEYS[3]  cs:{A}:audit   the action's audit anchor (read only: where its chain ends, for settle.lua's events)
-- ARGV[1]  the caller's binding
-- ARGV[2]  the write tools the caller's role may NOT run, as ",tool,tool,"
-- ARGV[3]  claim id (fresh per attempt; a retry of this very call sends the same id)
-- ARGV[4]  lease, milliseconds
-- ARGV[5]  the digest (dig) of the approval the Confirm carries, verified before Redis; "" when none
-- ARGV[6]  the risks that approval's acr satisfies (step-up rules), as ",low,medium,"
-- ARGV[7]  the check the Confirm's approval failed before Redis (signature, owner, ...); "" when none failed
-- ARGV[8]  the write tools the registry in force requires a signed approval for, as ",tool,tool,"
-- returns  {"won", kid, tool, body, mac, seq, head}
--                                                  the caller holds the claim and must settle it (or put the
--                                                  card back with release.lua if it never sends the request);
--                                                  seq, head: where the action's audit chain ends now (0, "" for
--                                                  none), so the claimed and settled events can travel with
--                                                  settle.lua
--          {"run", state, kid, out, omac, reason, binding, tool, card, cmac}
--                                                  someone claimed it before: replay or RUNNING, whatever
--                                                  approval this Confirm carries (its owner is checked)
--                                                  (a running record whose lease lapsed is
--                                                   stored and returned as "unknown")
--          {"expired"}                             no card and no record, or the card's sealed expiry (in its
--                                                  MAC'd body) has passed: a TTL removed by hand keeps nothing alive
--          {"forbidden"}                           the binding differs; nothing is touched
--          {"role", tool}                          the caller's role may not run the tool; card untouched
--          {"approval_required", why}              no approval, and the card requires one (why "card") or the
--                                                  registry in force now does (why "registry"); card untouched
--          {"approval_invalid", check}             the approval failed a check: before Redis (ARGV[7]), or here:
--                                                  "digest" (it approves other arguments, preview, policy or
--                                                  expiry) or "step_up" (its acr does not satisfy the card's
--                                                  risk); card untouched
-- The run record gets no expiry: an unresolved action is never forgotten (settle.lua gives a settled one the
-- replay TTL).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local run = redis.call('HMGET', KEYS[2], 'st', 'b', 'claim', 'lease', 'kid', 'out', 'omac', 'reason',
                       'tool', 'card', 'cmac')
if run[1] then
  if run[2] ~= ARGV[1] then return {'forbidden'} end
  if run[1] == 'running' and run[3] == ARGV[3] then
    local a = redis.call('HMGET', KEYS[3], 'seq', 'head')
    return {'won', run[5], run[9], run[10], run[11], tonumber(a[1] or '0'), a[2] or ''}
  end
  if run[1] == 'running' and tonumber(run[4]) <= now then
    redis.call('HSET', KEYS[2], 'st', 'unknown', 'reason', 'LEASE_LAPSED')
    redis.call('PERSIST', KEYS[2])
    run[1] = 'unknown'
    run[8] = 'LEASE_LAPSED'
  end
  return {'run', run[1], run[5] or '', run[6] or '', run[7] or '', run[8] or '', run[2], run[9] or '',
          run[10] or '', run[11] or ''}
end
local card = redis.call('HMGET', KEYS[1], 'b', 'tool', 'body', 'mac', 'kid', 'appr', 'dig', 'risk')
if not card[1] then return {'expired'} end
local ok, sealed = pcall(cjson.decode, card[3] or '')
if ok and type(sealed) == 'table' and tonumber(sealed['expires_at_ms'])
    and tonumber(sealed['expires_at_ms']) <= now then
  redis.call('DEL', KEYS[1])
  return {'expired'}
end
if card[1] ~= ARGV[1] then return {'forbidden'} end
if string.find(ARGV[2], ',' .. card[2] .. ',', 1, true) then return {'role', card[2]} end
if ARGV[7] ~= '' then return {'approval_invalid', ARGV[7]} end
if ARGV[5] == '' then
  if card[6] == 'signed' then return {'approval_required', 'card'} end
  if string.find(ARGV[8], ',' .. card[2] .. ',', 1, true) then return {'approval_required', 'registry'} end
else
  if ARGV[5] ~= card[7] then return {'approval_invalid', 'digest'} end
  if not string.find(ARGV[6], ',' .. (card[8] or '') .. ',', 1, true) then
    return {'approval_invalid', 'step_up'}
  end
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[2], 'st', 'running', 'claim', ARGV[3], 'lease', now + tonumber(ARGV[4]),
           'attempt', 1, 'b', card[1], 'tool', card[2], 'kid', card[5], 'card', card[3],
           'cmac', card[4], 'claimed_at', now)
redis.call('PERSIST', KEYS[2])
local a = redis.call('HMGET', KEYS[3], 'seq', 'head')
return {'won', card[5], card[2], card[3], card[4], tonumber(a[1] or '0'), a[2] or ''}

-- The common call: one request whose rules are all paced and none capped,
-- which is every call made without load and every call of
-- SharedConfig.NoCoalescing. It decides as reserve.lua does for n = 1, in
-- straight lines: no tables, closures or loops of that script's other
-- forms, which cost its straight path for this call about a sixth of
-- Redis's time for it (BenchmarkRedisScriptCost; TestOneMatchesReserve
-- holds the two scripts to the same answers).
--
-- KEYS as reserve.lua's for one request: the penalty keys, the group's
-- epoch marker, one key per rule. ARGV: 'q' or 'r' and the marker's TTL
-- (ms), as a lean call's: with 'q' the marker is read and renewed at once;
-- with 'r' only once the request is not admitted at once: a slot booked at
-- once lies nowhere ahead, so a loss of the state costs it nothing, and the
-- common call neither reads, renews nor returns it. Then, as in reserve.lua, the
-- request's longest wait (µs) and "no slot before" (µs, 0 for none), then
-- 'p', T and tolerance (µs) per rule; so the keys before the rules'
-- number #KEYS - (#ARGV - 4) / 3, the marker last among them. These
-- two arguments in place of reserve.lua's count and "<n>e<ms>" spare a
-- pattern match a twentieth of the call's time. The reply is reserve.lua's
-- for one request.

-- Globals cost a table lookup each time; locals do not.
local KEYS, ARGV, tonumber = KEYS, ARGV, tonumber

local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local val = redis.call('MGET', unpack(KEYS))
local first = t[1] .. ' ' .. t[2]

local how, mttl = ARGV[1], ARGV[2]
local np = #KEYS - (#ARGV - 4) / 3
if how == 'q' then first = first .. ' ' .. epoch(KEYS, val, t, now, np, tonumber(mttl)) end

-- Penalties: the one that ends last refuses the request.
local corrupt = false
if np > 1 then
  local best, best_until, best_value
  best, best_until, best_value, corrupt = penalty(KEYS, val, false, now, 0, np - 1)
  if best > 0 then
    if corrupt then first = first .. ' c' end
    return first .. string.format('\n2 %d %d ', best_until - now, best) .. best_value
  end
end

-- The slot: the latest of now, "no slot before" and what each rule allows
-- (its theoretical arrival time less its tolerance); bind is the rule that
-- sets it. val then holds each rule's theoretical arrival time.
local nr = #KEYS - np
local s, bind = now, 0
local nb = ARGV[4]
if nb ~= '0' then
  nb = nb + 0
  if nb > s then s = nb end
end
for i = 1, nr do
  local j = np + i
  local x, bad = read_tat(val[j], now)
  corrupt = corrupt or bad
  val[j] = x
  local allow = x - ARGV[3 * i + 4]
  if allow > s then s, bind = allow, i end
end
local wait = s - now
if wait > 0 and how == 'r' then first = first .. ' ' .. epoch(KEYS, val, t, now, np, tonumber(mttl)) end
if corrupt then first = first .. ' c' end
if wait > 0 and wait > tonumber(ARGV[3]) then
  local line = string.format('1 %d %d', wait, bind)
  for i = 1, nr do line = line .. string.format(' %d', val[np + i]) end
  return first .. '\n' .. line
end
local line = wait == 0 and '0 0 0' or string.format('0 %d %d', wait, bind)
for i = 1, nr do
  local j = np + i
  local x = val[j]
  if s > x then x = s end
  x = x + ARGV[3 * i + 3]
  local v = string.format('%d', x)
  redis.call('SET', KEYS[j], v, 'PX', tat_px(x, now))
  line = line .. ' ' .. v
end
return first .. '\n' .. line

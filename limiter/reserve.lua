-- Reserve a slot for each of n requests that carry the same rules and
-- penalty scopes, one after the other as if each were its own call at the
-- same instant: for each, check every shared penalty and every rule, and
-- charge all rules or none. A replica sends the requests that arrive while
-- its previous call for the same rules is in flight together, in one call.
--
-- KEYS: the penalty keys (ARGV[2] of them), then one key per rule.
-- ARGV[1]: n, the number of requests.
-- ARGV[2]: how many penalty keys lead KEYS; as "<n>e<ms>", the last of
-- them is the group's epoch marker, kept for at least ms (see below).
-- Then two arguments per request: the longest wait it accepts (µs), and
-- "no slot before" (µs; 0 for none: a replica coming back from limiting on
-- its own starts after its local slots).
-- Then the arguments of each rule, led by its kind:
--   paced:       'p', T (emission interval, µs), tolerance (µs), key TTL (ms)
--   calendar:    'c', limit, then four consecutive window starts (µs)
--   concurrency: 'k', limit, lease (µs), lease id  (a sorted set of lease
--                ids scored by expiry; only ever with n = 1)
-- The paced key's TTL comes from the caller (longest wait + tolerance + T):
-- no booked time lies further ahead.
--
-- Reply: one string (far cheaper for the client to read than nested
-- arrays): Redis's TIME as "<seconds> <microseconds>", then the epoch
-- "e<µs>" when asked for, then " c" when a corrupt value was found (it
-- reads as absent and is replaced), then one line per
-- request of space-separated integers:
--   admitted:  "0 <delay µs> <binding rule, 0 = none> <booked state per rule>..."
--   refused:   "1 <retry-after µs> <binding rule>"
-- or, when a penalty refuses them all, a single line
--   penalised: "2 <penalty left µs> <penalty key index> <stored value>"
--
-- State is integer microseconds: float seconds lose precision in Redis.
-- Time is Redis's own, so replicas whose clocks disagree still agree here.
-- Each call into Redis and each number formatted costs more than the Lua
-- around it: the common path (paced rules, no penalty, no wait) makes three
-- calls and formats one number per rule and request.

local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local out = {t[1] .. ' ' .. t[2]}

local n = ARGV[1] == '1' and 1 or tonumber(ARGV[1])
local base = 3 + 2 * n

-- One read for every penalty and paced rule; a calendar or concurrency key
-- reads as false with MGET (GET would fail on it), and GET costs less.
local vals
local corrupt = false
if #KEYS == 1 and ARGV[base] ~= 'c' and ARGV[base] ~= 'k' then
  local v = redis.pcall('GET', KEYS[1])
  if type(v) == 'table' then v, corrupt = false, true end -- another type
  vals = {v}
else
  vals = redis.call('MGET', unpack(KEYS))
end

local np = 0
if ARGV[2] ~= '0' then
  -- The epoch marker holds when the group's state began ("e<µs>"): a
  -- replica that sees it change knows the state was lost (FLUSHALL,
  -- eviction) and holds its new slots back past those it knew of.
  local count, mttl = string.match(ARGV[2], '^(%d+)e(%d+)$')
  np = tonumber(count or ARGV[2])
  -- Its value is "e<epoch µs>:<expiry ms>"; it is renewed for mttl ms
  -- (ARGV[2] is then "<np>e<mttl>") once half of that is gone.
  if count then
    local v = vals[np]
    local e, x = string.match(v or '', '^(e%d+):(%d+)$')
    if not e then
      e, x = 'e' .. t[1] .. string.format('%06d', t[2]), 0
    end
    local nowms = math.floor(now / 1000)
    mttl = tonumber(mttl)
    if tonumber(x) < nowms + mttl / 2 then
      redis.call('SET', KEYS[np], string.format('%s:%d', e, nowms + mttl), 'PX', mttl)
    end
    out[1] = out[1] .. ' ' .. e
    vals[np] = false
  end
  local best, best_until, best_value = 0, 0, false
  for i = 1, np do
    local v = vals[i]
    if v then
      local sep = string.find(v, '|', 1, true)
      local u = tonumber(sep and string.sub(v, 1, sep - 1) or v)
      if u and u > now and u > best_until then
        best, best_until, best_value = i, u, v
      elseif not u then
        redis.call('DEL', KEYS[i])
        corrupt = true
      end
    end
  end
  if best > 0 then
    if corrupt then out[1] = out[1] .. ' c' end
    out[2] = string.format('2 %d %d ', best_until - now, best) .. best_value
    return table.concat(out, '\n')
  end
end

-- Per rule: where its arguments start, and for a paced rule its current
-- theoretical arrival time (tat) in vals.
local nr = #KEYS - np
local at = {}
local has_c, has_k = false, false
local a = base
for i = 1, nr do
  at[i] = a
  local kind = ARGV[a]
  if kind == 'p' then
    local tat = vals[np + i]
    if tat then
      tat = tonumber(tat)
      if not tat then tat, corrupt = now, true end -- rewritten when booked
      if tat < now then tat = now end
    else
      tat = now
    end
    vals[np + i] = tat
    a = a + 4
  elseif kind == 'c' then
    has_c = true
    a = a + 6
  else
    has_k = true
    a = a + 4
  end
end

-- Calendar rules: the count of each window, read once and then kept here,
-- and the window holding time x among a rule's four starts: its position j
-- (0..2), start and end; false if unknown.
local counts, window, count
if has_c then
  counts = {}
  window = function(a, x)
    for j = 0, 2 do
      local lo, hi = tonumber(ARGV[a + 2 + j]), tonumber(ARGV[a + 3 + j])
      if x >= lo and x < hi then return j, lo, hi end
    end
    return false
  end
  count = function(i, j)
    local c = counts[i]
    if not c then
      c = {}
      counts[i] = c
    end
    if not c[j] then
      local k, f = KEYS[np + i], ARGV[at[i] + 2 + j]
      local v = redis.pcall('HGET', k, f)
      if type(v) == 'table' then -- another type: start afresh
        redis.call('DEL', k)
        v, corrupt = false, true
      end
      c[j] = tonumber(v or 0)
      if not c[j] then
        redis.call('HDEL', k, f)
        c[j], corrupt = 0, true
      end
    end
    return c[j]
  end
end

local last = {} -- per rule: the state to write, once something was booked
local booked_hi = {} -- per calendar rule: the end of its latest booked window

for r = 1, n do
  local s, bind = now, 0
  local nb = ARGV[2 + 2 * r]
  if nb ~= '0' then
    nb = nb + 0
    if nb > s then s = nb end
  end
  for i = 1, nr do
    a = at[i]
    if ARGV[a] == 'p' then
      local allow = vals[np + i] - ARGV[a + 2]
      if allow > s then s, bind = allow, i end
    end
  end

  -- Calendar rules may push s into a later window; a later s never breaks a
  -- paced rule, so repeat until every calendar window has room.
  local refused = false
  local moved = has_c
  while moved do
    moved = false
    for i = 1, nr do
      a = at[i]
      if ARGV[a] == 'c' then
        local j, _, hi = window(a, s)
        if not j then
          refused = string.format('1 %d %d', ARGV[a + 5] - now, i)
          break
        end
        if count(i, j) >= tonumber(ARGV[a + 1]) then
          s, bind, moved = hi, i, true
        end
      end
    end
    if refused then break end
  end

  local wait = s - now
  if not refused and wait > 0 and wait > tonumber(ARGV[1 + 2 * r]) then
    refused = string.format('1 %d %d', wait, bind)
  end

  -- Concurrency rules: a free lease now, or ask again when one may be free
  -- (leases end when answers arrive, which no limiter can foresee).
  if has_k and not refused then
    for i = 1, nr do
      a = at[i]
      if ARGV[a] == 'k' then
        local k = KEYS[np + i]
        if type(redis.pcall('ZREMRANGEBYSCORE', k, '-inf', string.format('%d', now))) == 'table' then
          redis.call('DEL', k) -- another type: start afresh
          corrupt = true
        end
        if redis.call('ZCARD', k) >= tonumber(ARGV[a + 1]) then
          local first = redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')
          local w = tonumber(first[2]) - now
          if w <= 0 or w > 20000 then w = 20000 end
          refused = string.format('1 %d %d', w, i)
          break
        end
      end
    end
  end

  if refused then
    out[r + 1] = refused
  else
    local line = wait == 0 and '0 0 0' or string.format('0 %d %d', wait, bind)
    for i = 1, nr do
      a = at[i]
      local kind = ARGV[a]
      local v
      if kind == 'p' then
        local tat = vals[np + i]
        if s > tat then tat = s end
        tat = tat + ARGV[a + 1]
        vals[np + i] = tat
        -- '%d': Lua's own number formatting would round a microsecond
        -- timestamp to 14 significant digits.
        v = string.format('%d', tat)
        last[i] = v
      elseif kind == 'k' then
        local exp = s + ARGV[a + 2]
        v = ARGV[a + 3]
        local k = KEYS[np + i]
        redis.call('ZADD', k, string.format('%d', exp), v)
        local ttl = math.floor((exp - now) / 1000) + 1
        if redis.call('PTTL', k) < ttl then redis.call('PEXPIRE', k, ttl) end
      else
        local j, _, hi = window(a, s)
        counts[i][j] = counts[i][j] + 1
        v = ARGV[a + 2 + j]
        local d = last[i] or {}
        d[j] = (d[j] or 0) + 1
        last[i] = d
        if not booked_hi[i] or hi > booked_hi[i] then booked_hi[i] = hi end
      end
      line = line .. ' ' .. v
    end
    out[r + 1] = line
  end
end

-- Write what was booked: a paced key can go once its time has passed (an
-- absent key means idle); a calendar key keeps its current and later
-- windows until the end of the latest booked one.
for i = 1, nr do
  local v = last[i]
  if v then
    a = at[i]
    local k = KEYS[np + i]
    if ARGV[a] == 'p' then
      redis.call('SET', k, v, 'PX', ARGV[a + 3])
    elseif ARGV[a] == 'c' then
      for j, d in pairs(v) do
        redis.call('HINCRBY', k, ARGV[a + 2 + j], d)
      end
      for old = 0, 2 do
        if now < tonumber(ARGV[a + 3 + old]) then break end
        redis.call('HDEL', k, ARGV[a + 2 + old])
      end
      local ttl = math.floor((booked_hi[i] - now) / 1000) + 1
      if redis.call('PTTL', k) < ttl then redis.call('PEXPIRE', k, ttl) end
    end
  end
end
if corrupt then out[1] = out[1] .. ' c' end
return table.concat(out, '\n')

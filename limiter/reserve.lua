-- Reserve a slot for one request: check every shared penalty and every rule,
-- and charge all rules or none, in one call.
--
-- KEYS: the request's penalty keys (ARGV[2] of them), then one key per rule.
-- ARGV[1]: the longest wait the caller accepts, in microseconds.
-- ARGV[2]: how many penalty keys lead KEYS.
-- ARGV[3]: no slot before this time (µs; 0 for none): a replica coming back
--          from limiting on its own starts after its local slots.
-- Then the arguments of each rule, led by its kind:
--   paced:       'p', T (emission interval, µs), tolerance (µs), key TTL (ms)
--   calendar:    'c', limit, then four consecutive window starts (µs)
--   concurrency: 'k', limit, lease (µs), lease id  (a sorted set of lease
--                ids scored by expiry)
-- The paced key's TTL comes from the caller (longest wait + tolerance + T):
-- the booked time can lie no further ahead, and converting a number to a
-- string costs more in Redis's Lua than the rest of the arithmetic.
--
-- Reply: one string of space-separated integers (one bulk string costs the
-- client far less to read than an array of integers); <now> is Redis's TIME
-- as "<seconds> <microseconds>":
--   admitted:  "0 <delay µs> <binding rule, 0 = none> <now> <booked state per rule>..."
--   refused:   "1 <retry-after µs> <binding rule> <now>"
--   penalised: "2 <penalty left µs> <penalty key index> <now> <stored value>"
--
-- State is integer microseconds: float seconds lose precision in Redis.
-- Time is Redis's own, so replicas whose clocks disagree still agree here.
-- Each call into Redis and each number formatted costs more than the Lua
-- around it, so the common path (paced rules, no penalty, no wait) makes
-- three calls and formats one number per rule.

local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local clock = t[1] .. ' ' .. t[2]

-- One read for every penalty and paced rule; a calendar or concurrency key
-- reads as false with MGET (GET would fail on it), and GET costs less.
local vals
if #KEYS == 1 and ARGV[4] ~= 'c' and ARGV[4] ~= 'k' then
  vals = {redis.call('GET', KEYS[1])}
else
  vals = redis.call('MGET', unpack(KEYS))
end

local np = 0
if ARGV[2] ~= '0' then
  np = tonumber(ARGV[2])
  local best, best_until, best_value = 0, 0, false
  for i = 1, np do
    local v = vals[i]
    if v then
      local sep = string.find(v, '|', 1, true)
      local u = tonumber(sep and string.sub(v, 1, sep - 1) or v)
      if u and u > now and u > best_until then
        best, best_until, best_value = i, u, v
      end
    end
  end
  if best > 0 then
    return string.format('2 %d %d ', best_until - now, best) .. clock .. ' ' .. best_value
  end
end

local nr = #KEYS - np
local s, bind = now, 0
if ARGV[3] ~= '0' then
  local nb = tonumber(ARGV[3])
  if nb > s then s = nb end
end
local has_c, has_k = false, false
local a = 4
for i = 1, nr do
  local kind = ARGV[a]
  if kind == 'p' then
    local tat = vals[np + i]
    if tat then
      tat = tat + 0
      if tat < now then tat = now end
    else
      tat = now
    end
    vals[np + i] = tat
    local allow = tat - ARGV[a + 2]
    if allow > s then s, bind = allow, i end
    a = a + 4
  elseif kind == 'c' then
    has_c = true
    a = a + 6
  else
    has_k = true
    a = a + 4
  end
end

if has_c then
  -- The calendar window holding time x, among the four starts of the rule
  -- whose arguments begin at a: its position j (0..2), start and end; false
  -- if unknown.
  local function window(a, x)
    for j = 0, 2 do
      local lo, hi = tonumber(ARGV[a + 2 + j]), tonumber(ARGV[a + 3 + j])
      if x >= lo and x < hi then return j, lo, hi end
    end
    return false
  end

  -- Calendar rules may push s into a later window; a later s never breaks a
  -- paced rule, so repeat until every calendar window has room.
  local moved = true
  while moved do
    moved = false
    a = 4
    for i = 1, nr do
      if ARGV[a] == 'c' then
        local j, lo, hi = window(a, s)
        if not j then
          return string.format('1 %d %d ', ARGV[a + 5] - now, i) .. clock
        end
        local n = tonumber(redis.call('HGET', KEYS[np + i], ARGV[a + 2 + j]) or 0)
        if n >= tonumber(ARGV[a + 1]) then
          s, bind, moved = hi, i, true
        end
        a = a + 6
      else
        a = a + 4
      end
    end
  end
end

if s > now and s - now > tonumber(ARGV[1]) then
  return string.format('1 %d %d ', s - now, bind) .. clock
end

-- Concurrency rules: a free lease now, or ask again when one may be free
-- (leases end when answers arrive, which no limiter can foresee).
if has_k then
  a = 4
  for i = 1, nr do
    local kind = ARGV[a]
    if kind == 'k' then
      local k = KEYS[np + i]
      redis.call('ZREMRANGEBYSCORE', k, '-inf', string.format('%d', now))
      if redis.call('ZCARD', k) >= tonumber(ARGV[a + 1]) then
        local first = redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')
        local wait = tonumber(first[2]) - now
        if wait <= 0 or wait > 20000 then wait = 20000 end
        return string.format('1 %d %d ', wait, i) .. clock
      end
    end
    a = a + (kind == 'c' and 6 or 4)
  end
end

local reply
if s == now then
  reply = '0 0 0 ' .. clock
else
  reply = string.format('0 %d %d ', s - now, bind) .. clock
end
a = 4
for i = 1, nr do
  local kind = ARGV[a]
  local k = KEYS[np + i]
  local v
  if kind == 'p' then
    local tat = vals[np + i]
    if s > tat then tat = s end
    -- Integers go to Redis through '%d': Lua's own number formatting would
    -- round a microsecond timestamp to 14 significant digits.
    -- The key can go once its time has passed: an absent key means "idle".
    v = string.format('%d', tat + ARGV[a + 1])
    redis.call('SET', k, v, 'PX', ARGV[a + 3])
    a = a + 4
  elseif kind == 'k' then
    local exp = s + ARGV[a + 2]
    v = ARGV[a + 3]
    redis.call('ZADD', k, string.format('%d', exp), v)
    local ttl = math.floor((exp - now) / 1000) + 1
    if redis.call('PTTL', k) < ttl then redis.call('PEXPIRE', k, ttl) end
    a = a + 4
  else
    local j, lo, hi
    for w = 0, 2 do
      lo, hi = tonumber(ARGV[a + 2 + w]), tonumber(ARGV[a + 3 + w])
      if s >= lo and s < hi then j = w break end
    end
    v = ARGV[a + 2 + j]
    redis.call('HINCRBY', k, v, 1)
    -- Windows before the current one can no longer be booked.
    for old = 0, 2 do
      if now < tonumber(ARGV[a + 3 + old]) then break end
      redis.call('HDEL', k, ARGV[a + 2 + old])
    end
    -- Keep the key until the end of its latest booked window.
    local ttl = math.floor((hi - now) / 1000) + 1
    if redis.call('PTTL', k) < ttl then redis.call('PEXPIRE', k, ttl) end
    a = a + 6
  end
  reply = reply .. ' ' .. v
end
return reply

-- Reserve a slot for one request: check every shared penalty and every rule,
-- and charge all rules or none, in one call.
--
-- KEYS: the request's penalty keys (ARGV[2] of them), then one key per rule.
-- ARGV[1]: the longest wait the caller accepts, in microseconds.
-- ARGV[2]: how many penalty keys lead KEYS.
-- ARGV[3]: no slot before this time (µs; 0 for none): a replica coming back
--          from limiting on its own starts after its local slots.
-- Then six arguments per rule:
--   paced:       'p', T (emission interval, µs), tolerance (µs), '', '', ''
--   calendar:    'c', limit, then four consecutive window starts (µs)
--   concurrency: 'k', limit, lease (µs), lease id, '', ''  (a sorted set of
--                lease ids scored by expiry)
--
-- Reply: one string of space-separated integers (one bulk string costs the
-- client far less to read than an array of integers):
--   admitted:  "0 <delay µs> <binding rule, 0 = none> <now µs> <booked state per rule>..."
--   refused:   "1 <retry-after µs> <binding rule> <now µs>"
--   penalised: "2 <penalty left µs> <penalty key index> <now µs> <stored value>"
--
-- State is integer microseconds: float seconds lose precision in Redis.
-- Time is Redis's own, so replicas whose clocks disagree still agree here.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local max_wait = tonumber(ARGV[1])
local np = tonumber(ARGV[2])

-- One read for every penalty and paced rule (each call into Redis costs more
-- than the Lua around it); a calendar or concurrency key reads as false.
local vals = redis.call('MGET', unpack(KEYS))

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
  return string.format('2 %d %d %d ', best_until - now, best, now) .. best_value
end

local nr = #KEYS - np
local s, bind = math.max(now, tonumber(ARGV[3])), 0
local tats = {}
local has_c, has_k = false, false
for i = 1, nr do
  local a = 3 + (i - 1) * 6
  local kind = ARGV[a + 1]
  if kind == 'p' then
    local tat = tonumber(vals[np + i]) or now
    if tat < now then tat = now end
    tats[i] = tat
    local allow = tat - tonumber(ARGV[a + 3])
    if allow > s then s, bind = allow, i end
  elseif kind == 'c' then
    has_c = true
  else
    has_k = true
  end
end

-- The calendar window holding time x, among the four starts of the rule whose
-- arguments begin at a: its position j (0..2), start and end; false if unknown.
local function window(a, x)
  for j = 0, 2 do
    local lo, hi = tonumber(ARGV[a + 3 + j]), tonumber(ARGV[a + 4 + j])
    if x >= lo and x < hi then return j, lo, hi end
  end
  return false
end

-- Calendar rules may push s into a later window; a later s never breaks a
-- paced rule, so repeat until every calendar window has room.
local moved = has_c
while moved do
  moved = false
  for i = 1, nr do
    local a = 3 + (i - 1) * 6
    if ARGV[a + 1] == 'c' then
      local j, lo, hi = window(a, s)
      if not j then
        return string.format('1 %d %d %d', tonumber(ARGV[a + 6]) - now, i, now)
      end
      local n = tonumber(redis.call('HGET', KEYS[np + i], ARGV[a + 3 + j]) or 0)
      if n >= tonumber(ARGV[a + 2]) then
        s, bind, moved = hi, i, true
      end
    end
  end
end

if s - now > max_wait then
  return string.format('1 %d %d %d', s - now, bind, now)
end

-- Concurrency rules: a free lease now, or ask again when one may be free
-- (leases end when answers arrive, which no limiter can foresee).
for i = 1, has_k and nr or 0 do
  local a = 3 + (i - 1) * 6
  if ARGV[a + 1] == 'k' then
    local k = KEYS[np + i]
    redis.call('ZREMRANGEBYSCORE', k, '-inf', string.format('%d', now))
    if redis.call('ZCARD', k) >= tonumber(ARGV[a + 2]) then
      local first = redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')
      local wait = tonumber(first[2]) - now
      if wait <= 0 or wait > 20000 then wait = 20000 end
      return string.format('1 %d %d %d', wait, i, now)
    end
  end
end

local reply = {string.format('0 %d %d %d', s - now, bind, now)}
for i = 1, nr do
  local a = 3 + (i - 1) * 6
  local k = KEYS[np + i]
  if ARGV[a + 1] == 'p' then
    local tat = math.max(tats[i], s) + tonumber(ARGV[a + 2])
    -- Integers go to Redis through '%d': Lua's own number formatting would
    -- round a microsecond timestamp to 14 significant digits.
    -- The key can go once its time has passed: an absent key means "idle".
    local v = string.format('%d', tat)
    redis.call('SET', k, v, 'PX', math.floor((tat - now) / 1000) + 1)
    reply[1 + i] = v
  elseif ARGV[a + 1] == 'k' then
    local exp = s + tonumber(ARGV[a + 3])
    redis.call('ZADD', k, string.format('%d', exp), ARGV[a + 4])
    local ttl = math.floor((exp - now) / 1000) + 1
    if redis.call('PTTL', k) < ttl then redis.call('PEXPIRE', k, ttl) end
    reply[1 + i] = ARGV[a + 4]
  else
    local j, lo, hi = window(a, s)
    redis.call('HINCRBY', k, ARGV[a + 3 + j], 1)
    -- Windows before the current one can no longer be booked.
    local cur = window(a, now) or 0
    for old = 0, cur - 1 do
      redis.call('HDEL', k, ARGV[a + 3 + old])
    end
    -- Keep the key until the end of its latest booked window.
    local ttl = math.floor((hi - now) / 1000) + 1
    if redis.call('PTTL', k) < ttl then redis.call('PEXPIRE', k, ttl) end
    reply[1 + i] = ARGV[a + 3 + j]
  end
end
return table.concat(reply, ' ')

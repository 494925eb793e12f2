-- What reserve.lua and one.lua share: reading the state they book. Each
-- script is this file followed by its own (redis.go joins them).
--
-- State is integer microseconds: float seconds lose precision in Redis.
-- Time is Redis's own, so replicas whose clocks disagree still agree here.
-- Each call into Redis, each table or closure made and each number
-- formatted costs more than the Lua around it. The functions are given the
-- call's locals as arguments rather than capturing them: a function that
-- captures locals costs an object per local each time it is made, which is
-- on every call that reaches its definition.

-- most bounds the times and counts this script reads: 10^18 µs is past
-- the year 30000 (a penalty may be given until the year 9999, 2.5 * 10^17)
-- and its distance from now still fits the 64-bit integers of the reply. A
-- stored number beyond it (tonumber also reads "inf", "nan" and "1e300") is
-- no state of ours and reads as corrupt, as text does: kept, it would
-- refuse every request of the key for good, with a wait too large to
-- format.
local most = 1e18 -- maxStoredUs in segments.go

-- read_tat reads a paced rule's theoretical arrival time from its stored
-- value v: now when absent or past, and now with bad true when v is not a
-- number (it is rewritten when the rule is booked).
local function read_tat(v, now)
  if not v then return now, false end
  local x = tonumber(v)
  if not x or not (x <= most) then return now, true end
  if x < now then return now, false end
  return x, false
end

-- tat_px is how long (ms, formatted for PX) the key of a paced rule booked
-- up to tat lives: until tat has passed, after which an absent key reads
-- the same (read_tat). A key used now and then goes soon after its last
-- slot, not after the longest its rule could ever book ahead.
local function tat_px(tat, now)
  return string.format('%d', math.floor((tat - now) / 1000) + 1)
end

-- epoch reads the group's epoch marker, the key at index j, and renews
-- it: it holds when the group's state began ("e<µs>"), and a replica that
-- sees it change knows the state was lost (FLUSHALL, eviction) and holds
-- its new slots back past those it knew of. Its value is "e<epoch
-- µs>:<expiry ms>"; it is renewed for mttl ms once half of that is gone,
-- and made afresh when absent or not such a value.
local function epoch(KEYS, val, t, now, j, mttl)
  local e, x = string.match(val[j] or '', '^(e%d+):(%d+)$')
  if not e or #e > 17 or #x > 16 then
    e, x = 'e' .. t[1] .. string.format('%06d', t[2]), 0
  end
  local nowms = math.floor(now / 1000)
  if tonumber(x) < nowms + mttl / 2 then
    local v = string.format('%s:%d', e, nowms + mttl)
    redis.call('SET', KEYS[j], v, 'PX', mttl)
    val[j] = v
  end
  return e
end

-- penalty reads the n penalty keys after position ko and returns the one
-- that ends last while still live (its position among them, its end and
-- its stored value "end|code"; 0 when none) and whether a corrupt value
-- was found, which is deleted. A position is the key's index in KEYS, or,
-- with alias, what alias maps it to when it maps it (a batch's keys named
-- again; a lean call's pack, which holds every penalty key's index).
local function penalty(KEYS, val, alias, now, ko, n)
  local best, best_until, best_value, corrupt = 0, 0, false, false
  for i = 1, n do
    local j = ko + i
    if alias then j = alias[j] or j end
    local v = val[j]
    if v then
      local sep = string.find(v, '|', 1, true)
      local e = sep and string.sub(v, 1, sep - 1) or v
      -- Digits only, as penalize.lua writes and the Go side reads
      -- (strconv.ParseInt): tonumber also takes "1.8e15", "0x..." and
      -- leading spaces, a live end here that Inspect, a quota reset and
      -- the re-read of known penalties did not see.
      local u = string.find(e, '^%d+$') and tonumber(e)
      if u and not (u <= most) then u = nil end
      if u and u > now and u > best_until then
        -- At most 256 bytes of it go back: the end and a provider's
        -- code need far less, and a value of megabytes (written by hand)
        -- would travel in every refused reply (maxCodeLen, reply.go).
        best, best_until, best_value = i, u, string.sub(v, 1, 256)
      elseif not u then
        redis.call('DEL', KEYS[j])
        val[j] = false
        corrupt = true
      end
    end
  end
  return best, best_until, best_value, corrupt
end

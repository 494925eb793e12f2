-- Give back the slots a reservation booked, rule by rule, where nothing was
-- booked after them.
--
-- KEYS: one key per rule.
-- ARGV: three arguments per rule: kind ('p', 'c', 'k' or 'w'), booked
-- state, then T (µs) for a paced rule, the booking's time (µs, Redis's
-- clock) for a calendar rule. A concurrency rule's lease always ends.
-- Reads go through pcall: a key another writer turned into another type
-- gives nothing back, and the rules after it still give theirs back (this
-- call is sent once, never again).
for i = 1, #KEYS do
  local a = (i - 1) * 3
  local k = KEYS[i]
  if ARGV[a + 1] == 'p' then
    -- Only the last booking can be undone: a later one was scheduled after it.
    if redis.pcall('GET', k) == ARGV[a + 2] then
      redis.call('SET', k, string.format('%d', tonumber(ARGV[a + 2]) - tonumber(ARGV[a + 3])), 'KEEPTTL')
    end
  elseif ARGV[a + 1] == 'k' then
    redis.pcall('ZREM', k, ARGV[a + 2])
  elseif ARGV[a + 1] == 'w' then
    -- A window rule's slot comes back while it is the latest booked: take
    -- one send off the last group of the log (see reserve.lua).
    local v = redis.pcall('GET', k)
    if type(v) == 'string' then
      local ts, ns, t = {}, {}, 0
      for d, c in string.gmatch(v, '(%d+):(%d+)') do
        t = t + d
        ts[#ts + 1], ns[#ns + 1] = t, tonumber(c)
      end
      local hi = #ts
      if hi > 0 and ts[hi] == tonumber(ARGV[a + 2]) then
        ns[hi] = ns[hi] - 1
        if ns[hi] == 0 then hi = hi - 1 end
        if hi == 0 then
          redis.call('DEL', k)
        else
          local parts, prev = {}, 0
          for x = 1, hi do
            parts[x] = string.format('%d:%d', ts[x] - prev, ns[x])
            prev = ts[x]
          end
          redis.call('SET', k, table.concat(parts, ' '), 'KEEPTTL')
        end
      end
    end
  else
    -- A window the provider reset after this booking (its field
    -- "c<start>", Redis's time of the clear: calendar.go) counts only
    -- bookings made since: none of them is this one's to take back.
    local v = redis.pcall('HMGET', k, ARGV[a + 2], 'c' .. ARGV[a + 2])
    if type(v) == 'table' and (tonumber(v[1]) or 0) > 0 then
      local cleared, at = tonumber(v[2]), tonumber(ARGV[a + 3])
      if not (cleared and at and cleared >= at) then
        -- pcall: a field that is not an integer (no count of ours) stays
        -- for the next reservation to replace.
        redis.pcall('HINCRBY', k, ARGV[a + 2], -1)
      end
    end
  end
end
return 0

-- Reserve a slot for each of n requests that carry the same rules and
-- penalty scopes, one after the other as if each were its own call at the
-- same instant: for each, check every shared penalty and every rule, and
-- charge all rules or none. A replica sends the requests of one group that
-- arrive while its previous call for the group is in flight together, in
-- one call: a run of them with the same rules is one segment, and several
-- segments go in one batch (at the end of this file).
--
-- One request whose rules are all paced and none capped, the call every
-- request makes without load, goes to one.lua instead, which decides it
-- as this script does in fewer steps; calls of many rule sets of paced
-- rules go lean (below).
--
-- KEYS: the penalty keys (ARGV[2] of them), then one key per rule.
-- ARGV[1]: n, the number of requests; 'm' for a batch of segments (at the
-- end of this file).
-- ARGV[2]: how many penalty keys lead KEYS; as "<n>e<ms>", the last of
-- them is the group's epoch marker, kept for at least ms (see below).
-- Then two arguments per request: the longest wait it accepts (µs), and
-- "no slot before" (µs; 0 for none: a replica coming back from limiting on
-- its own starts after its local slots).
-- Then the arguments of each rule, led by its kind:
--   paced:       'p', T (emission interval, µs), tolerance (µs)
--   calendar:    'c', limit, then four consecutive window starts (µs)
--   concurrency: 'k', limit, lease (µs), lease id  (a sorted set of lease
--                ids scored by expiry; only ever with n = 1)
--   window:      'w', limit, period (µs), resolution (µs)  (a string: see
--                the section on window rules below)
-- A paced key lives until its booked time has passed (tat_px): absent, it
-- reads as that past time would.
-- Then, for each rule capped by WithMaxBookAhead, two arguments: its index
-- (1-based) and the cap (µs). A request such a rule would hold back beyond
-- its cap is refused, charging nothing, with the time until that rule's
-- own slot: "1 <µs until the rule's slot> <rule>".
--
-- Reply: one string (far cheaper for the client to read than nested
-- arrays): Redis's TIME as "<seconds> <microseconds>", then the epoch
-- "e<µs>" when asked for, then " c" when a corrupt value was found (it
-- reads as absent and is replaced), then one line per
-- request of space-separated integers:
--   admitted:  "0 <delay µs> <binding rule, 0 = none> <booked state per rule>..."
--   refused:   "1 <retry-after µs> <binding rule> <state per rule>..."
-- where a refusal's state is what the fleet has booked, charged by nobody:
-- a paced rule's theoretical arrival time, a window rule's latest send (0
-- when none), 0 for the other kinds. A replica all of whose requests are
-- refused learns from it how far ahead the others' slots go, and holds its
-- own local slots back past them should Redis go away (failover.go).
-- or, when a penalty refuses them all, a single line
--   penalised: "2 <penalty left µs> <position among the request's penalty keys, from 1> <stored value>"
--
-- (The state read and its helpers: state.lua, which leads this script.)

-- head reads a segment's epoch marker and penalty keys and returns how
-- many penalty keys lead the segment's keys (the marker included), whether
-- a corrupt value was found, the reply's first line, and, when a penalty
-- refuses the segment, its whole reply.
local function head(KEYS, ARGV, val, alias, t, now, clock, ko, ao)
  local npa = ARGV[ao + 2]
  if npa == '0' then return 0, false, clock end
  local first = clock
  local corrupt = false
  -- With the marker (ARGV[2] is then "<np>e<mttl>"), it is read and
  -- renewed for mttl ms.
  local count, mttl = string.match(npa, '^(%d+)e(%d+)$')
  local np = tonumber(count or npa)
  local scopes = np
  if count then
    scopes = np - 1
    local j = ko + np
    if alias then j = alias[j] or j end
    first = first .. ' ' .. epoch(KEYS, val, t, now, j, tonumber(mttl))
  end
  local best, best_until, best_value, bad = penalty(KEYS, val, alias, now, ko, scopes)
  corrupt = corrupt or bad
  if best > 0 then
    if corrupt then first = first .. ' c' end
    return np, corrupt, first, first .. string.format('\n2 %d %d ', best_until - now, best) .. best_value
  end
  return np, corrupt, first, false
end

-- One segment: requests of the same rules and scopes, decided as above.
-- Its keys are KEYS[ko+1 .. ko+nk], its arguments ARGV[ao+1 .. ao+na]:
-- below, ARGV indices are absolute. Scratch tables come from the caller.
local function reserve(KEYS, ARGV, val, alias, t, now, clock, put, out, at, tat, last, ko, ao, nk, na)
  local tonumber = tonumber
  local n = ARGV[ao + 1] == '1' and 1 or tonumber(ARGV[ao + 1])
  local base = ao + 3 + 2 * n
  local np, corrupt, first, penalised = head(KEYS, ARGV, val, alias, t, now, clock, ko, ao)
  if penalised then return penalised end
  out[1] = first

  -- Rule i's key is KEYS[kr + i].
  local nr, kr = nk - np, ko + np
  local has_c, has_k, has_w = false, false, false
  local a = base
  for i = 1, nr do
    at[i], last[i] = a, false
    local kind = ARGV[a]
    if kind == 'p' then
      local bad
      tat[i], bad = read_tat(val[alias and alias[kr + i] or kr + i], now)
      corrupt = corrupt or bad
      a = a + 3
    elseif kind == 'c' then
      has_c = true
      a = a + 6
    elseif kind == 'w' then
      has_w = true
      a = a + 4
    else
      has_k = true
      a = a + 4
    end
  end

  -- Caps on booking ahead, by rule index; none on the common path.
  local cap
  local last_arg = ao + na
  if a <= last_arg then
    cap = {}
    while a <= last_arg do
      cap[tonumber(ARGV[a])] = tonumber(ARGV[a + 1])
      a = a + 2
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
        local k, f = KEYS[kr + i], ARGV[at[i] + 2 + j]
        local v = redis.pcall('HGET', k, f)
        if type(v) == 'table' then -- another type: start afresh
          redis.call('DEL', k)
          v, corrupt = false, true
        end
        -- Only a count we write is a count: digits, as HINCRBY writes
        -- them. tonumber also reads "1.5", "-1000" and "0x10", which
        -- would admit beyond the limit or fail the HINCRBY that books.
        c[j] = not v and 0 or (string.find(v, '^%d+$') and tonumber(v))
        if not c[j] or not (c[j] <= most) then
          redis.call('HDEL', k, f)
          c[j], corrupt = 0, true
        end
      end
      return c[j]
    end
  end

  -- Window rules ('w'): at most limit sends in any window of length period,
  -- exactly, with a burst admitted as soon as the window has room (window.go
  -- describes the log; Memory runs the same steps). The key is a string of
  -- groups "<latest send µs>:<count>", oldest first, separated by spaces,
  -- each time after the first written as its distance from the one before.
  -- A send goes no earlier than the latest booked and a period after the
  -- limit-th most recent; a group counts all its sends at its latest time,
  -- so merging sends into groups can only delay, never over-admit.
  local win, win_slot, win_book, win_store
  if has_w then
    local max_groups = 128 -- windowMaxGroups in window.go
    win = {}
    for i = 1, nr do
      a = at[i]
      if ARGV[a] == 'w' then
        local period = tonumber(ARGV[a + 2])
        local ts, ns, hi = {}, {}, 0
        local v = val[alias and alias[kr + i] or kr + i]
        -- A log holds at least one "time:count"; anything else (a paced
        -- rule's time, text) is not ours: read as empty, and reported.
        if v and not string.find(v, ':', 1, true) then corrupt = true end
        if v then
          local t = 0
          for d, c in string.gmatch(v, '(%d+):(%d+)') do
            t = t + d
            c = tonumber(c)
            if not (t <= most and c <= most) then
              -- Not a log this script wrote: start afresh.
              ts, ns, hi, corrupt = {}, {}, 0, true
              break
            end
            -- A group a period old can never bind again.
            if t > now - period then
              hi = hi + 1
              ts[hi], ns[hi] = t, c
            end
          end
        end
        local w = {ts = ts, ns = ns, hi = hi, period = period,
          limit = tonumber(ARGV[a + 1]), res = tonumber(ARGV[a + 3])}
        -- j: the group holding the limit-th most recent send; ex: how many
        -- sends from j on are beyond the limit (0 <= ex < ns[j]).
        local sum = 0
        for x = hi, 1, -1 do
          sum = sum + ns[x]
          if sum >= w.limit then
            w.j, w.ex = x, sum - w.limit
            break
          end
        end
        w.total = sum
        win[i] = w
      end
    end
    -- The earliest slot at or after s that every window rule allows, and
    -- the latest slot hu of a capped rule hr beyond its cap (hr 0: none).
    win_slot = function(s, bind, hu, hr)
      for i, w in pairs(win) do
        if w.hi > 0 then
          local e = w.ts[w.hi]
          if w.j then
            local x = w.ts[w.j] + w.period
            if x > e then e = x end
          end
          if e > s then s, bind = e, i end
          if cap and cap[i] and e - now > cap[i] and e > hu then hu, hr = e, i end
        end
      end
      return s, bind, hu, hr
    end
    -- Record a send at s (never before the latest booked) for rule i.
    win_book = function(i, s)
      local w = win[i]
      local hi = w.hi
      if hi > 0 and math.floor(w.ts[hi] / w.res) == math.floor(s / w.res) then
        w.ts[hi], w.ns[hi] = s, w.ns[hi] + 1
      else
        hi = hi + 1
        w.hi, w.ts[hi], w.ns[hi] = hi, s, 1
      end
      if w.j then
        w.ex = w.ex + 1
        while w.ex >= w.ns[w.j] do
          w.ex = w.ex - w.ns[w.j]
          w.j = w.j + 1
        end
      else
        w.total = w.total + 1
        if w.total >= w.limit then w.j, w.ex = 1, 0 end
      end
      return string.format('%d', s)
    end
    -- Book rule i's log, its oldest groups merged into the next (later, so
    -- again only delaying) beyond max_groups; the key lives until its latest
    -- send is a period old.
    win_store = function(i)
      local w = win[i]
      local lo, hi = 1, w.hi
      while hi - lo + 1 > max_groups do
        w.ns[lo + 1] = w.ns[lo + 1] + w.ns[lo]
        lo = lo + 1
      end
      local parts, prev = {}, 0
      for x = lo, hi do
        parts[#parts + 1] = string.format('%d:%d', w.ts[x] - prev, w.ns[x])
        prev = w.ts[x]
      end
      local v, ttl = table.concat(parts, ' '), math.floor((w.ts[hi] + w.period - now) / 1000) + 1
      if put then put(alias[kr + i] or kr + i, v, ttl) else redis.call('SET', KEYS[kr + i], v, 'PX', ttl) end
    end
  end

  local booked_hi = has_c and {} -- per calendar rule: the end of its latest booked window
  local fleet = false -- a refusal's states of the rules, once formatted

  for r = 1, n do
    local s, bind = now, 0
    local nb = ARGV[ao + 2 + 2 * r]
    if nb ~= '0' then
      nb = nb + 0
      if nb > s then s = nb end
    end
    -- hu, hr: the latest own slot of a rule capped by WithMaxBookAhead that
    -- lies beyond its cap, and that rule (0: none).
    local hu, hr = 0, 0
    for i = 1, nr do
      a = at[i]
      if ARGV[a] == 'p' then
        local allow = tat[i] - ARGV[a + 2]
        if allow > s then s, bind = allow, i end
        if cap and cap[i] and allow - now > cap[i] and allow > hu then hu, hr = allow, i end
      end
    end
    if has_w then s, bind, hu, hr = win_slot(s, bind, hu, hr) end

    -- A capped rule that would book too far ahead refuses before anything
    -- is charged: the broader rules stay free for other requests meanwhile.
    local refused = false
    if hr > 0 then refused = string.format('1 %d %d', hu - now, hr) end

    -- Calendar rules may push s into a later window; a later s never breaks a
    -- paced or window rule, so repeat until every calendar window has room.
    local moved = has_c and not refused
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
    if not refused and wait > 0 and wait > tonumber(ARGV[ao + 1 + 2 * r]) then
      refused = string.format('1 %d %d', wait, bind)
    end

    -- Concurrency rules: a free lease now, or ask again when one may be free
    -- (leases end when answers arrive, which no limiter can foresee).
    if has_k and not refused then
      for i = 1, nr do
        a = at[i]
        if ARGV[a] == 'k' then
          local k = KEYS[kr + i]
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
      -- The state is the same for every refusal until a request books, so
      -- a hot key's batch of refusals formats it once.
      if not fleet then
        local parts = {}
        for i = 1, nr do
          a = at[i]
          local kind = ARGV[a]
          if kind == 'p' then
            parts[i] = string.format('%d', tat[i])
          elseif kind == 'w' and win[i].hi > 0 then
            parts[i] = string.format('%d', win[i].ts[win[i].hi])
          else
            parts[i] = '0'
          end
        end
        fleet = ' ' .. table.concat(parts, ' ')
      end
      out[r + 1] = refused .. fleet
    else
      fleet = false
      local line = wait == 0 and '0 0 0' or string.format('0 %d %d', wait, bind)
      for i = 1, nr do
        a = at[i]
        local kind = ARGV[a]
        local v
        if kind == 'p' then
          local x = tat[i]
          if s > x then x = s end
          x = x + ARGV[a + 1]
          tat[i] = x
          -- '%d': Lua's own number formatting would round a microsecond
          -- timestamp to 14 significant digits.
          v = string.format('%d', x)
          last[i] = v
        elseif kind == 'w' then
          v = win_book(i, s)
          last[i] = v
        elseif kind == 'k' then
          local exp = s + ARGV[a + 2]
          v = ARGV[a + 3]
          local k = KEYS[kr + i]
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

  -- Book what was booked: a paced key can go once its time has passed (an
  -- absent key means idle); a calendar key keeps its current and later
  -- windows until the end of the latest booked one.
  for i = 1, nr do
    local v = last[i]
    if v then
      a = at[i]
      local k = KEYS[kr + i]
      if ARGV[a] == 'p' then
        local px = tat_px(tat[i], now)
        if put then put(alias[kr + i] or kr + i, v, px) else redis.call('SET', k, v, 'PX', px) end
      elseif ARGV[a] == 'w' then
        win_store(i)
      elseif ARGV[a] == 'c' then
        for j, d in pairs(v) do
          redis.call('HINCRBY', k, ARGV[a + 2 + j], d)
        end
        for old = 0, 2 do
          if now < tonumber(ARGV[a + 3 + old]) then break end
          redis.call('HDEL', k, ARGV[a + 2 + old], 'r' .. ARGV[a + 2 + old], 'c' .. ARGV[a + 2 + old])
        end
        local ttl = math.floor((booked_hi[i] - now) / 1000) + 1
        if redis.call('PTTL', k) < ttl then redis.call('PEXPIRE', k, ttl) end
      end
    end
  end
  if corrupt then out[1] = out[1] .. ' c' end
  return table.concat(out, '\n', 1, n + 1)
end

-- Globals cost a table lookup each time; locals do not.
local KEYS, ARGV, tonumber = KEYS, ARGV, tonumber

local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local clock = t[1] .. ' ' .. t[2]

-- Every key of the call is read once, up front, with one MGET (a calendar
-- or concurrency key, or a key of another type, reads as false): val holds
-- the values by index in KEYS, as the call books them. In a batch a key
-- may come several times (an app's rule shared by several segments): it
-- is known by its first index, alias maps the later ones to it, and the
-- string keys booked are written once, at the end, so that a shared key
-- costs one read and one write per call and each segment sees what the
-- ones before it booked.
local val = #KEYS > 0 and redis.call('MGET', unpack(KEYS)) or {}
local alias = false


-- aliases maps each index of a key named again in KEYS to its first index.
local function aliases(KEYS)
  local first, alias = {}, {}
  for i = 1, #KEYS do
    local k = KEYS[i]
    local f = first[k]
    if f then alias[i] = f else first[k] = i end
  end
  return alias
end

-- defer records that the key at index j is written at the end of the call
-- and lives at least ttl ms: writes holds the indexes in order, ttl_of the
-- longest expiry asked for each (kept as given: a number passed to Redis is
-- formatted, a string is not).
local function defer(writes, ttl_of, j, ttl)
  local old = ttl_of[j]
  if not old then
    writes[#writes + 1] = j
    ttl_of[j] = ttl
  elseif tonumber(ttl) > tonumber(old) then
    ttl_of[j] = ttl
  end
end

-- lean decides a call of requests whose rules are all paced and none
-- capped (ARGV[1] is 'q' or 'r', below): the calls that coalescing makes
-- of many rule sets under load. Every request in arrival order as if it
-- had made its own call, each key read once and written once at the end.
-- KEYS[1] is the group's epoch marker, kept for ARGV[2] ms; then every
-- other key of the call once, in the order first named (the replica
-- leaves out a key named again: an app's rule or penalty shared by the
-- requests costs one argument, one read and one write). ARGV[3] packs
-- every request's numbers in one MessagePack array, read by one C call
-- rather than as one Redis argument each: per request its count of
-- penalty keys and of rules, the longest wait it accepts (µs) and "no slot
-- before" (µs, 0 for none), then each penalty key's index in KEYS, then
-- per rule its key's index, T and tolerance (µs).
-- Reply: the first line as above (the epoch only when it was read), then
-- one line per request as above, but for a penalty, whose line is "2
-- <left µs> <position among its penalty keys> <bytes> <stored value>": the stored value
-- may hold a newline.
local function lean(KEYS, ARGV, val, t, now, clock)
  local a = cmsgpack.unpack(ARGV[3])
  local corrupt = false
  -- The epoch marker, read at once when the replica asks ('q': it has
  -- slots booked ahead that a loss of the state would let others overlap),
  -- else ('r') only once a request is not admitted at once: a slot booked
  -- at once lies nowhere ahead, so a loss of the state costs it nothing.
  local mttl = tonumber(ARGV[2])
  local e = ARGV[1] == 'q' and epoch(KEYS, val, t, now, 1, mttl)
  -- tat holds a paced key's time as a number by the key's index, booked
  -- the same as written in the reply (and then to the key: formatted once);
  -- a booked key lives until its last booked time has passed (tat_px). As
  -- each key is named once, the writes go by index at the end: no list of
  -- them to keep (defer's bookkeeping cost a tenth of a request's time).
  local tat, booked = {}, {}
  local out, no = {clock}, 1
  local x, na = 1, #a
  while x <= na do
    local ns, nr, maxwait, s = a[x], a[x + 1], a[x + 2], a[x + 3]
    x = x + 4
    if s < now then s = now end
    -- Penalties: the one that ends last refuses the request. Their key
    -- indexes are a[x .. x + ns - 1]: the pack maps their positions.
    local best, best_until, best_value = 0, 0, false
    if ns > 0 then
      local bad
      best, best_until, best_value, bad = penalty(KEYS, val, a, now, x - 1, ns)
      corrupt = corrupt or bad
    end
    x = x + ns
    no = no + 1
    if best > 0 then
      out[no] = string.format('2 %d %d %d ', best_until - now, best, #best_value) .. best_value
    else
      local bind = 0
      for i = 1, nr do
        local j = a[x + 3 * i - 3]
        local v = tat[j]
        if not v then
          local bad
          v, bad = read_tat(val[j], now)
          corrupt = corrupt or bad
        elseif v < now then
          v = now
        end
        tat[j] = v
        local allow = v - a[x + 3 * i - 1]
        if allow > s then s, bind = allow, i end
      end
      local wait = s - now
      if wait > 0 and not e then e = epoch(KEYS, val, t, now, 1, mttl) end
      local line
      if wait > 0 and wait > maxwait then
        line = string.format('1 %d %d', wait, bind)
        for i = 1, nr do
          line = line .. string.format(' %d', tat[a[x + 3 * i - 3]])
        end
      else
        line = wait == 0 and '0 0 0' or string.format('0 %d %d', wait, bind)
        for i = 1, nr do
          local j = a[x + 3 * i - 3]
          local v = tat[j]
          if s > v then v = s end
          v = v + a[x + 3 * i - 2]
          tat[j] = v
          local f = string.format('%d', v)
          booked[j] = f
          line = line .. ' ' .. f
        end
      end
      out[no] = line
    end
    x = x + 3 * nr
  end
  for j = 2, #KEYS do
    local f = booked[j]
    if f then redis.call('SET', KEYS[j], f, 'PX', tat_px(tat[j], now)) end
  end
  if e then out[1] = out[1] .. ' ' .. e end
  if corrupt then out[1] = out[1] .. ' c' end
  return table.concat(out, '\n')
end

-- Requests of many rule sets of paced rules, as coalescing sends them.
if ARGV[1] == 'q' or ARGV[1] == 'r' then
  return lean(KEYS, ARGV, val, t, now, clock)
end

-- Scratch reused by every segment: the reply's lines, and per rule where
-- its arguments start, its current theoretical arrival time (a paced
-- rule's tat) and the state to book (false until something is booked).
-- Made with room for a few entries: growing a table costs more than
-- making it.
local out, at, tat, last = {0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}

-- One segment alone (the general loop): its writes go to Redis at once.
if ARGV[1] ~= 'm' then
  return reserve(KEYS, ARGV, val, false, t, now, clock, false, out, at, tat, last, 0, 0, #KEYS, #ARGV)
end

-- A batch of segments (one group, several rule sets): ARGV[2] segments,
-- each led by its count of keys and of arguments, then its arguments as
-- above; KEYS holds each segment's keys in the same order. The segments
-- run in order, each seeing what the ones before it booked, so every
-- request is decided as if it had made its own call, in arrival order.
-- Reply: each segment's reply as above, led by its length in bytes and
-- a newline.
alias = aliases(KEYS)
-- The writes put off to the end (see defer). put books value v for the
-- key at index j, to live ttl ms.
local writes, ttl_of = {}, {}
local function put(j, v, ttl)
  val[j] = v
  defer(writes, ttl_of, j, ttl)
end

local replies = {}
local ko, ao = 0, 2
for s = 1, tonumber(ARGV[2]) do
  local nk, na = tonumber(ARGV[ao + 1]), tonumber(ARGV[ao + 2])
  ao = ao + 2
  local r = reserve(KEYS, ARGV, val, alias, t, now, clock, put, out, at, tat, last, ko, ao, nk, na)
  replies[s] = #r .. '\n' .. r
  ko, ao = ko + nk, ao + na
end
for i = 1, #writes do
  local j = writes[i]
  redis.call('SET', KEYS[j], val[j], 'PX', ttl_of[j])
end
return table.concat(replies)

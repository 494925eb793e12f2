-- Record a shared penalty on one scope, never shortening a longer one, and
-- announce it so that replicas stop at once rather than on their next reserve.
--
-- KEYS[1]: the penalty key; KEYS[2]: the mark a lift of it left (lift.go),
-- deleted with the new penalty: a mark left from an earlier lift would
-- read this penalty, lost with Redis's data, as lifted. KEYS[3]: the
-- group's record of the provider's resets (reset.go).
-- ARGV[1]: end of the penalty (µs since the epoch, on the replica's clock);
-- ARGV[2]: the provider's code; ARGV[3]: the channel announcing penalties;
-- ARGV[4]: the announcement's head, "v1 penalty\ngroup\nscope\n" (see
-- announce.go); ARGV[5]: the replica's clock (µs) when it sent the call, or
-- 0 for an end the provider stated on its own clock, which stays as it is.
-- Any other end is moved onto Redis's clock by the replica's offset when
-- that is more than a call's latency could explain (250ms), or when the end
-- is past on Redis's clock though not on the replica's: a replica behind
-- would otherwise lose its short penalties, one ahead lengthen every
-- penalty for the fleet. An end that is exact on the replica's clock stays
-- exact. A stated end moved so was off by the replica's skew: a 5-minute
-- ban kept 3 minutes by a replica 2 minutes ahead.
-- ARGV[6]: how long ago (µs, by the replica's monotonic clock) the call
-- the penalty answers was sent, -1 when unknown; ARGV[7]: the scope.
-- Returns {1, stored} (recorded and announced; stored is the value
-- written, which a lift of exactly this penalty compares), 0 (a penalty
-- ending no earlier is there), -1 (over already), -2 (the provider reset
-- the scope's quota of this code after the call was sent: its answer is
-- older than the reset), or {"unannounced <error>", stored}: recorded, but
-- PUBLISH failed (an ACL user without it), so replicas learn of it on
-- their next reserve instead.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local untilUs = tonumber(ARGV[1])
local sent = tonumber(ARGV[5])
if sent ~= 0 then
  local offset = now - sent
  if offset > 250000 or offset < -250000 or untilUs <= now then
    untilUs = untilUs + offset
  end
end
if untilUs <= now then return -1 end
-- The call's send on Redis's clock: now less its age. The age leaves out
-- this call's way to Redis, so the send reads a little late: a call sent
-- within that of the reset counts as after it, and its penalty stands.
local ago = tonumber(ARGV[6])
if ago >= 0 then
  local r = redis.pcall('HGET', KEYS[3], ARGV[7])
  if type(r) == 'string' then
    local at, code = string.match(r, '^(%d+)|(.*)$')
    if at and code == ARGV[2] and tonumber(at) > now - ago then return -2 end
  end
end
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then v = false end -- another type: replaced below
if v then
  local sep = string.find(v, '|', 1, true)
  local e = sep and string.sub(v, 1, sep - 1) or v
  -- Digits only, as state.lua reads an end: anything else is replaced.
  local old = string.find(e, '^%d+$') and tonumber(e)
  -- An end past 10^18 µs (see reserve.lua) is no penalty of ours: replaced.
  if old and old >= untilUs and old <= 1e18 then return 0 end
end
local endUs = string.format('%.0f', untilUs)
local stored = endUs .. '|' .. ARGV[2]
redis.call('SET', KEYS[1], stored, 'PX', math.floor((untilUs - now) / 1000) + 1)
redis.call('DEL', KEYS[2])
local ok = redis.pcall('PUBLISH', ARGV[3], ARGV[4] .. endUs .. '\n' .. ARGV[2])
if type(ok) == 'table' and ok.err then return {'unannounced ' .. ok.err, stored} end
return {1, stored}

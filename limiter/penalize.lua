-- Record a shared penalty on one scope, never shortening a longer one, and
-- announce it so that replicas stop at once rather than on their next reserve.
--
-- KEYS[1]: the penalty key.
-- ARGV[1]: end of the penalty (µs since the epoch); ARGV[2]: the provider's code;
-- ARGV[3]: the channel announcing penalties; ARGV[4]: the announcement's
-- head, "v1 penalty\ngroup\nscope\n" (see announce.go).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local untilUs = tonumber(ARGV[1])
if untilUs <= now then return 0 end
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' then v = false end -- another type: replaced below
if v then
  local sep = string.find(v, '|', 1, true)
  local old = tonumber(sep and string.sub(v, 1, sep - 1) or v)
  if old and old >= untilUs then return 0 end
end
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. ARGV[2], 'PX', math.floor((untilUs - now) / 1000) + 1)
redis.call('PUBLISH', ARGV[3], ARGV[4] .. ARGV[1] .. '\n' .. ARGV[2])
return 1

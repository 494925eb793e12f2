-- A sliding log of grants in a sorted set, after the way Redisson's
-- RRateLimiter keeps its state: a counter of permits left, and one member per
-- grant scored with the client's clock. Grants older than the interval are
-- summed back into the counter before deciding.
--
-- KEYS[1]: permits left; KEYS[2]: the log of grants.
-- ARGV: limit, interval (ms), the client's now (ms), a random member id.
-- Reply: -1 when granted, else the wait in ms until the oldest grant expires.
local limit = tonumber(ARGV[1])
local interval = tonumber(ARGV[2])
local now = tonumber(ARGV[3])

local left = redis.call('GET', KEYS[1])
if left == false then
  left = limit
else
  left = tonumber(left)
  local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - interval)
  if #expired > 0 then
    for _, m in ipairs(expired) do
      left = left + tonumber(string.match(m, ':(%d+)$'))
    end
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - interval)
  end
end

if left < 1 then
  local oldest = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
  if oldest[2] == nil then
    return 1
  end
  return math.max(1, tonumber(oldest[2]) + interval - now)
end

redis.call('ZADD', KEYS[2], now, ARGV[4] .. ':1')
redis.call('SET', KEYS[1], left - 1, 'PX', interval * 2)
redis.call('PEXPIRE', KEYS[2], interval * 2)
return -1

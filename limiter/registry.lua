-- Keep one replica's presence fresh and count the live ones.
--
-- KEYS[1]: the registry (a sorted set of replica ids scored by last beat, ms).
-- ARGV[1]: this replica's id; ARGV[2]: how long a beat stays valid (ms);
-- ARGV[3]: '1' to leave the registry instead.
-- Returns the count, negated when the key held something else (corrupt or
-- overwritten), which is then replaced.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local sign = 1
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'zset' and kind ~= 'none' then
  redis.call('DEL', KEYS[1])
  sign = -1
end
if ARGV[3] == '1' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return sign * redis.call('ZCARD', KEYS[1])
end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], string.format('%d', now), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now - ttl))
-- A beat dated ahead of Redis's clock (written before a failover to a
-- master whose clock is behind, or by hand) would count a replica gone
-- long after it left, shrinking every replica's share in an outage: no
-- beat lies further ahead than one beat's validity.
redis.call('ZREMRANGEBYSCORE', KEYS[1], string.format('(%d', now + ttl), '+inf')
redis.call('PEXPIRE', KEYS[1], ttl * 2)
return sign * redis.call('ZCARD', KEYS[1])

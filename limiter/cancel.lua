-- Give back the slots a reservation booked, rule by rule, where nothing was
-- booked after them.
--
-- KEYS: one key per rule.
-- ARGV: three arguments per rule: kind ('p', 'c' or 'k'), booked state,
-- T (µs, paced only). A concurrency rule's lease always ends.
for i = 1, #KEYS do
  local a = (i - 1) * 3
  local k = KEYS[i]
  if ARGV[a + 1] == 'p' then
    -- Only the last booking can be undone: a later one was scheduled after it.
    if redis.call('GET', k) == ARGV[a + 2] then
      redis.call('SET', k, string.format('%d', tonumber(ARGV[a + 2]) - tonumber(ARGV[a + 3])), 'KEEPTTL')
    end
  elseif ARGV[a + 1] == 'k' then
    redis.call('ZREM', k, ARGV[a + 2])
  else
    if tonumber(redis.call('HGET', k, ARGV[a + 2]) or 0) > 0 then
      redis.call('HINCRBY', k, ARGV[a + 2], -1)
    end
  end
end
return 0

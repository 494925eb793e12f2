-- The classic fixed-window counter: one key per window, named by the
-- client's clock, counted with INCR and expired with the window.
-- KEYS[1]: the window's key; ARGV[1]: the window's length (ms).
-- Reply: the count in this window, this call included.
local n = redis.call('INCR', KEYS[1])
if n == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return n

-- Count one request in a fixed rate-limit window: INCR the window's counter, and give a new counter
-- its TTL in the same step, so it never lives without one.
--
-- KEYS[1]  the client's counter for this window (string)
-- ARGV[1]  TTL of the counter, seconds (the window's length plus a margin)
-- Returns  the window's count, this request included.
local count = redis.call('INCR', KEYS[1])
if count == 1 then
  redis.call('EXPIRE', KEYS[1], ARGV[1])
end
return count

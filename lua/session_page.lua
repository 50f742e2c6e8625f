-- One page of a navigation session, atomically: the list's length, its TTL and the page's entries
-- describe the same list (a page view landing meanwhile is in all three or in none).
--
-- KEYS[1]  the user's session list (newest entry on the right)
-- ARGV[1]  the page's first index and ARGV[2] its last, counted from the right (negative, as LRANGE)
-- Returns  {length, PTTL in milliseconds, the page's entries oldest first}
local session = KEYS[1]
local length = redis.call('LLEN', session)
if length == 0 then
  return {0, -2, {}}
end
return {length, redis.call('PTTL', session), redis.call('LRANGE', session, ARGV[1], ARGV[2])}

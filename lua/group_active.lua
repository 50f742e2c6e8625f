-- Members of a group active in a period, exact: BITCOUNT of the group's membership bitmap AND the
-- period's active-user bitmap (same id space: bit N is the person with dense id N). The AND goes
-- into a scratch key that is deleted before the script returns, so no reader ever sees it. Work:
-- O(length of the longer bitmap), a bit per person (125 KB per million people).
--
-- KEYS[1]  the group's membership bitmap
-- KEYS[2]  the period's active-user bitmap (a day, an ISO week or a month)
-- KEYS[3]  a scratch key (deleted again here)
-- ARGV     none
-- Returns  the number of bits set in both bitmaps (0 when either is missing).
if #KEYS ~= 3 or #ARGV ~= 0 then
  return redis.error_reply('group_active: expected 3 keys and no arguments')
end
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('EXISTS', KEYS[2]) == 0 then
  return 0
end
redis.call('BITOP', 'AND', KEYS[3], KEYS[1], KEYS[2])
local active = redis.call('BITCOUNT', KEYS[3])
redis.call('DEL', KEYS[3])
return active

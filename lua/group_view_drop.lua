-- Drop a group's view after a membership change: bump the group's epoch, so a build that read the
-- membership before the change publishes nothing (lua/group_view_publish.lua compares it), and
-- delete the view, so the next read builds it again. One step: an epoch left without its TTL would
-- be swept and come back at a value a build read before.
--
-- KEYS[1]  the group's membership epoch (string counter)
-- KEYS[2]  the group view
-- ARGV[1]  the epoch's TTL, seconds (>= 1): longer than any build
-- Returns  the new epoch.
if #KEYS ~= 2 or #ARGV ~= 1 then
  return redis.error_reply('group_view_drop: expected 2 keys and 1 argument')
end
if (tonumber(ARGV[1]) or 0) < 1 then
  return redis.error_reply('group_view_drop: the TTL must be >= 1')
end
local epoch = redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2])
return epoch

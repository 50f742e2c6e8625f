-- Publish a freshly built group view: RENAME the temporary key over the view and set its TTL,
-- unless the group's membership changed while it was being built (its epoch moved).
--
-- KEYS[1]  the temporary sorted set the builder filled (it has a short TTL of its own)
-- KEYS[2]  the group view
-- KEYS[3]  the group's membership epoch (a counter bumped on every membership change)
-- ARGV[1]  the epoch the builder read before reading the membership ('' when it did not exist)
-- ARGV[2]  the view's TTL in milliseconds
-- Returns  1 when published, 0 when discarded (epoch moved, or the temporary key expired).
if #KEYS ~= 3 or #ARGV ~= 2 then
  return redis.error_reply('group_view_publish: expected 3 keys and 2 arguments')
end
if tonumber(ARGV[2]) == nil or tonumber(ARGV[2]) <= 0 then
  return redis.error_reply('group_view_publish: TTL must be a positive number: ' .. ARGV[2])
end

local build, view, epoch_key = KEYS[1], KEYS[2], KEYS[3]
local epoch = redis.call('GET', epoch_key)
if epoch == false then
  epoch = ''
end
if epoch ~= ARGV[1] then
  redis.call('DEL', build)
  return 0
end
if redis.call('EXISTS', build) == 0 then
  return 0
end
redis.call('RENAME', build, view)
redis.call('PEXPIRE', view, ARGV[2])
return 1

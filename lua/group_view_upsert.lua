-- Exists-only upsert into group views: move members forward in the views that exist, never
-- create a view (a view created by an update would lack the group's other members).
--
-- KEYS[1..n]  group view sorted sets (member = user id, score = last seen, -1 = never seen)
-- ARGV        triples: key index (1..n), score, member
-- Returns     how many (view, member) scores moved forward. A missing view is skipped; a member
--             absent from an existing view is not added (ZADD XX): membership is the build's job.
if #KEYS < 1 then
  return redis.error_reply('group_view_upsert: expected at least 1 key')
end
if #ARGV % 3 ~= 0 then
  return redis.error_reply('group_view_upsert: expected key index, score, member triples')
end

-- Check every triple before writing anything, so a bad call changes nothing.
for i = 1, #ARGV, 3 do
  local k = tonumber(ARGV[i])
  if k == nil or k < 1 or k > #KEYS or k % 1 ~= 0 then
    return redis.error_reply('group_view_upsert: bad key index: ' .. ARGV[i])
  end
  if tonumber(ARGV[i + 1]) == nil then
    return redis.error_reply('group_view_upsert: score is not a number: ' .. ARGV[i + 1])
  end
end

local exists = {}
local moved = 0
for i = 1, #ARGV, 3 do
  local k = tonumber(ARGV[i])
  if exists[k] == nil then
    exists[k] = redis.call('EXISTS', KEYS[k]) == 1
  end
  if exists[k] then
    moved = moved + redis.call('ZADD', KEYS[k], 'XX', 'GT', 'CH', ARGV[i + 1], ARGV[i + 2])
  end
end
return moved

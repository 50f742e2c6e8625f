-- Count one day's page views of a batch in one partition of the paths (the batch's views of the
-- partition's paths): the partition's counter of the day, and the views per path (one ZINCRBY per
-- path of the batch, whatever its views), keeping the cap most viewed (past cap + slack, one
-- ZREMRANGEBYRANK trims back: amortized O(log N) a path). Keys get their TTL when made. Users
-- tombstoned at now are skipped.
-- Prelude: lua/fence.lua, run first: it takes its key and arguments; KEYS and ARGV below are
-- what it leaves.
-- Prelude: lua/tombstones.lua (tombstoned).
--
-- KEYS[1]  tombstones of erased users (member -> expiry)
-- KEYS[2]  page views that day of the partition's paths (string counter)
-- KEYS[3]  views per path that day (zset path -> views)
-- ARGV[1]  TTL of the day's keys, seconds (>= 1)
-- ARGV[2]  paths kept in the partition (cap >= 1)
-- ARGV[3]  slack: new paths let in past the cap before a trim (>= 0)
-- ARGV[4]  now, epoch seconds
-- ARGV[5..] 2 per view: user id, path
-- Returns  the number of views counted.
if #KEYS ~= 3 or #ARGV < 4 or (#ARGV - 4) % 2 ~= 0 then
  return redis.error_reply('page_counts: expected 3 keys and 4 arguments, then 2 arguments per view')
end
local ttl, cap, slack, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if ttl == nil or ttl < 1 or cap == nil or cap < 1 or slack == nil or slack < 0 or now == nil then
  return redis.error_reply('page_counts: TTL and paths kept must be >= 1, slack >= 0 and now a number')
end

local tombstones, views, paths = KEYS[1], KEYS[2], KEYS[3]
-- The tombstones are looked up only while the set exists.
local erasures = redis.call('EXISTS', tombstones) == 1
local counted, per_path, order = 0, {}, {}
for a = 5, #ARGV, 2 do
  local user, path = ARGV[a], ARGV[a + 1]
  if not (erasures and tombstoned(tombstones, user, now)) then
    counted = counted + 1
    if per_path[path] == nil then
      per_path[path] = 0
      order[#order + 1] = path
    end
    per_path[path] = per_path[path] + 1
  end
end
for _, path in ipairs(order) do
  local views = per_path[path]
  -- Scores are counts, never 0: the path is new to the set when the ZINCRBY answers its own views.
  if tonumber(redis.call('ZINCRBY', paths, string.format('%d', views), path)) == views then
    local size = redis.call('ZCARD', paths)
    if size == 1 then
      redis.call('EXPIRE', paths, ttl)
    elseif size > cap + slack then
      redis.call('ZREMRANGEBYRANK', paths, 0, -cap - 1)
    end
  end
end
if counted > 0 and redis.call('INCRBY', views, counted) == counted then
  redis.call('EXPIRE', views, ttl)
end
return counted

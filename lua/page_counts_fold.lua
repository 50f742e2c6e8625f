-- Fold one day of an earlier release's page counts (kept under {pv}) into one partition of the
-- paths, once: the views of the partition's paths added to its per-path counts, and the day's
-- former counter (or none: the caller gives it to one partition) added to the partition's counter.
-- The marker makes a repeat change nothing, so the caller deletes the former keys only once every
-- partition has folded. Keys made here get the TTL given, the former keys' remaining lifetime.
--
-- KEYS[1]  the partition's page views that day (string counter)
-- KEYS[2]  the partition's views per path that day (zset path -> views)
-- KEYS[3]  the marker that the day was folded into the partition (string)
-- ARGV[1]  TTL of the keys made, seconds (>= 1)
-- ARGV[2]  page views to add to the counter (>= 0)
-- ARGV[3..] 2 per path of the partition: views (>= 1), path
-- Returns  1 when folded, 0 when folded before.
if #KEYS ~= 3 or #ARGV < 2 or #ARGV % 2 ~= 0 then
  return redis.error_reply('page_counts_fold: expected 3 keys and 2 arguments, then 2 arguments per path')
end
local ttl, views = tonumber(ARGV[1]), tonumber(ARGV[2])
if ttl == nil or ttl < 1 or ttl % 1 ~= 0 or views == nil or views < 0 or views % 1 ~= 0 then
  return redis.error_reply('page_counts_fold: the TTL must be an integer >= 1 and the views >= 0')
end
for a = 3, #ARGV, 2 do
  local count = tonumber(ARGV[a])
  if count == nil or count < 1 or count % 1 ~= 0 then
    return redis.error_reply('page_counts_fold: each path views must be an integer >= 1')
  end
end
local counter, paths, folded = KEYS[1], KEYS[2], KEYS[3]
if redis.call('SET', folded, '1', 'NX', 'EX', ttl) == false then
  return 0
end
if views > 0 and redis.call('INCRBY', counter, ARGV[2]) == views then
  redis.call('EXPIRE', counter, ttl)
end
if #ARGV > 2 then
  local made = redis.call('EXISTS', paths) == 0
  for a = 3, #ARGV, 2 do
    redis.call('ZINCRBY', paths, ARGV[a], ARGV[a + 1])
  end
  if made then
    redis.call('EXPIRE', paths, ttl)
  end
end
return 1

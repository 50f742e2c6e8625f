-- Count one day's page views of a batch per user, in the day and its ISO week, and keep each
-- period's top viewers: the cap users with the most views, ties to the greater user id as SORT ...
-- DESC breaks them, so no report sorts every viewer. Counts only grow, so one ZRANGE of the cap-th
-- member decides whether a viewer enters; the day's bar is a floor of the week's, so a count below
-- it skips the week's ZRANGE. A counter gets its TTL when made and the top when a user enters it,
-- so the top outlives the counters it lists. Runs after viewer_names.lua, which reads the same
-- counters. Users tombstoned at now are skipped.
--
-- KEYS[1]  tombstones of erased users (member -> expiry)
-- KEYS[2]  the day's candidates (zset user -> views)
-- KEYS[3]  the week's candidates (zset user -> views)
-- KEYS[4..] 2 per view: the user's views that day, the user's views that week (string counters)
-- ARGV[1]  TTL of the day's keys, seconds (>= 1)
-- ARGV[2]  TTL of the week's keys, seconds (>= 1)
-- ARGV[3]  candidates kept per period (cap >= 1)
-- ARGV[4]  now, epoch seconds
-- ARGV[5..] the user id of each view, in the order of its counters
-- Returns  the number of views counted.
local views = #ARGV - 4
if #ARGV < 4 or #KEYS ~= 3 + 2 * views then
  return redis.error_reply('viewer_rank: expected 3 keys and 4 arguments, then 2 keys and 1 argument per view')
end
local day_ttl, week_ttl, cap, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if day_ttl == nil or day_ttl < 1 or week_ttl == nil or week_ttl < 1 or cap == nil or cap < 1 or now == nil then
  return redis.error_reply('viewer_rank: TTLs and candidates kept must be >= 1 and now a number')
end

-- The local functions take what they use as arguments: one that names a local of the script makes
-- Redis's Lua allocate (and collect) an upvalue for it at every call.

-- INCR a counter, giving it its TTL when the INCR creates it (answers 1); returns the count.
local function incr_with_ttl(key, ttl)
  local count = redis.call('INCR', key)
  if count == 1 then
    redis.call('EXPIRE', key, ttl)
  end
  return count
end

-- Keep a period's candidates the top ``top_cap`` users by (views, user), given the user's new count
-- of views in the period. A member's score was count - 1, at least the cap-th's, so a count below
-- the cap-th's is a non-member's; one at or above it is ZADDed (a member's new score, or a
-- newcomer, after which the lowest beyond the cap leave). A count below ``floor``, a bar known to
-- be at most the cap-th's, is a non-member's too, found without reading the bar. Returns the
-- cap-th's views (nil while the set holds fewer than the cap, or when the floor answered).
local function rank(top, user, count, top_cap, ttl, floor)
  if floor and count < floor then
    return nil
  end
  local bar = redis.call('ZRANGE', top, -top_cap, -top_cap, 'WITHSCORES')
  local added, cap_th = 0, nil
  if bar[1] == nil then
    added = redis.call('ZADD', top, count, user)
  else
    cap_th = tonumber(bar[2])
    if count >= cap_th then
      added = redis.call('ZADD', top, count, user)
      if added == 1 then
        redis.call('ZREMRANGEBYRANK', top, 0, -top_cap - 1)
      end
    end
  end
  if added == 1 then
    redis.call('EXPIRE', top, ttl)
  end
  return cap_th
end

local tombstones, day_top, week_top = KEYS[1], KEYS[2], KEYS[3]
-- The tombstones are looked up only while the set exists.
local erasures = redis.call('EXISTS', tombstones) == 1
local counted = 0
for i = 1, views do
  local user, day_counter, week_counter = ARGV[4 + i], KEYS[2 + 2 * i], KEYS[3 + 2 * i]
  local expiry = erasures and redis.call('ZSCORE', tombstones, user)
  if not (expiry and tonumber(expiry) > now) then
    counted = counted + 1
    local day_bar = rank(day_top, user, incr_with_ttl(day_counter, day_ttl), cap, day_ttl, nil)
    rank(week_top, user, incr_with_ttl(week_counter, week_ttl), cap, week_ttl, day_bar)
  end
end
return counted

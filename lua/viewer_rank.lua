-- Count one day's page views of a batch per user, in the day and its ISO week, and keep each
-- period's top viewers: the cap users with the most views, ties to the greater user id as SORT ...
-- DESC breaks them, so no report sorts every viewer. Counts only grow, so the cap-th member's views
-- (the bar), read once per call, decide: a count below the bar is a non-member's and stays out; one
-- at or above it is ZADDed (a member's new score, or a newcomer), and once every user is counted one
-- ZREMRANGEBYRANK sends the lowest beyond the cap away. The bar only rises while the call runs, so
-- the users it let in and the trim took back are exactly those a bar read before each ZADD would
-- have kept out. A counter gets its TTL when made and the top when a user enters it, so the top
-- outlives the counters it lists. Runs after viewer_names.lua, which reads the same counters. Users
-- tombstoned at now are skipped.
-- Fenced: lua/fence.lua runs first and takes its key and arguments; KEYS and ARGV below are
-- what it leaves.
--
-- KEYS[1]  tombstones of erased users (member -> expiry)
-- KEYS[2]  the day's candidates (zset user -> views)
-- KEYS[3]  the week's candidates (zset user -> views)
-- KEYS[4..] 2 per user: the user's views that day, the user's views that week (string counters)
-- ARGV[1]  TTL of the day's keys, seconds (>= 1)
-- ARGV[2]  TTL of the week's keys, seconds (>= 1)
-- ARGV[3]  candidates kept per period (cap >= 1)
-- ARGV[4]  now, epoch seconds
-- ARGV[5..] 2 per user, in the order of its counters: user id, the user's views in the batch (>= 1)
-- Returns  the number of views counted.
local users = (#ARGV - 4) / 2
if #ARGV < 4 or (#ARGV - 4) % 2 ~= 0 or #KEYS ~= 3 + 2 * users then
  return redis.error_reply('viewer_rank: expected 3 keys and 4 arguments, then 2 keys and 2 arguments per user')
end
local day_ttl, week_ttl, cap, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if day_ttl == nil or day_ttl < 1 or week_ttl == nil or week_ttl < 1 or cap == nil or cap < 1 or now == nil then
  return redis.error_reply('viewer_rank: TTLs and candidates kept must be >= 1 and now a number')
end
for i = 1, users do
  local views = tonumber(ARGV[4 + 2 * i])
  if views == nil or views < 1 or views % 1 ~= 0 then
    return redis.error_reply('viewer_rank: each user views must be an integer >= 1')
  end
end

-- The local functions take what they use as arguments: one that names a local of the script makes
-- Redis's Lua allocate (and collect) an upvalue for it at every call.

-- INCRBY a counter, giving it its TTL when the INCRBY creates it; returns the count.
local function incr_with_ttl(key, by, ttl)
  local count = redis.call('INCRBY', key, by)
  if count == by then
    redis.call('EXPIRE', key, ttl)
  end
  return count
end

-- The cap-th member's views, or nil while the set holds fewer than the cap.
local function bar_of(top, top_cap)
  local bar = redis.call('ZRANGE', top, -top_cap, -top_cap, 'WITHSCORES')
  return bar[2] and tonumber(bar[2])
end

-- After the call's ZADDs: the lowest beyond the cap leave, and the set gets its TTL when a user
-- entered it.
local function settle(top, top_cap, ttl, entered)
  if entered > 0 then
    redis.call('ZREMRANGEBYRANK', top, 0, -top_cap - 1)
    redis.call('EXPIRE', top, ttl)
  end
end

local tombstones, day_top, week_top = KEYS[1], KEYS[2], KEYS[3]
-- The tombstones are looked up only while the set exists.
local erasures = redis.call('EXISTS', tombstones) == 1
local day_bar, week_bar = bar_of(day_top, cap), bar_of(week_top, cap)
local counted, day_entered, week_entered = 0, 0, 0
for i = 1, users do
  local user, views = ARGV[3 + 2 * i], tonumber(ARGV[4 + 2 * i])
  local expiry = erasures and redis.call('ZSCORE', tombstones, user)
  if not (expiry and tonumber(expiry) > now) then
    counted = counted + views
    local day_count = incr_with_ttl(KEYS[2 + 2 * i], views, day_ttl)
    if day_bar == nil or day_count >= day_bar then
      day_entered = day_entered + redis.call('ZADD', day_top, day_count, user)
    end
    local week_count = incr_with_ttl(KEYS[3 + 2 * i], views, week_ttl)
    if week_bar == nil or week_count >= week_bar then
      week_entered = week_entered + redis.call('ZADD', week_top, week_count, user)
    end
  end
end
settle(day_top, cap, day_ttl, day_entered)
settle(week_top, cap, week_ttl, week_entered)
return counted

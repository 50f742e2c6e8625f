-- Record one day's page views of a batch per viewer, for the day's and the week's reports. Each user
-- has one hash of their views per period (fields named by the period: d:YYYYMMDD, w:YYYYWww) and
-- their display name (field 'name': a known username, else the one already set, else the user id).
-- A user's first views of a day drop the hash's fields of periods past the statistics' retention, so
-- the hash holds a few periods whatever how long the user keeps coming. Those views also renew the
-- hash's TTL: once a day rather than at every view, so the hash's TTL is a day longer than the
-- week's keys' (ARGV[7]) and it outlives the periods it counts.
--
-- Reports: a user's first view of a period adds their "name NUL user" entry to the period's pending
-- set, an O(1) SADD where the index takes an ordered insert (report_by_name.lua merges them; the
-- marker '' tells the SADD that made the set, the one to give it a TTL). A rename keeps the former
-- name as a field of the hash ('a:' and the name: an erase finds the old entries by it; the hash
-- outlives them, as it outlives its periods) and replaces the user's by-name entries. Each period
-- keeps its top viewers, the cap users with the most views, ties to the greater user id as SORT ...
-- DESC breaks them, so no report sorts every viewer: counts only grow, so the cap-th member's views
-- (the bar), read once per call, decide; the counts at or above it are ZADDed, and one
-- ZREMRANGEBYRANK sends the lowest beyond the cap away. The trim leaves the cap greatest of the set
-- and the call's users: what adding them one by one against a rising bar would have kept. The
-- entries and the counts go in one SADD and one ZADD per period once every user is counted. Users
-- tombstoned at now are skipped.
-- Prelude: lua/fence.lua, run first: it takes its key and arguments; KEYS and ARGV below are
-- what it leaves.
-- Prelude: lua/tombstones.lua (tombstoned).
--
-- KEYS[1]  tombstones of erased users (member -> expiry)
-- KEYS[2]  the day's top viewers (zset user -> views)
-- KEYS[3]  the week's top viewers
-- KEYS[4]  the day's by-name index (zset, score 0, member name NUL user)
-- KEYS[5]  the week's by-name index
-- KEYS[6]  the day's pending by-name entries (set, and the marker '')
-- KEYS[7]  the week's pending by-name entries
-- KEYS[8..] 1 per user: the user's views hash
-- ARGV[1]  the day's field (d:YYYYMMDD)
-- ARGV[2]  the week's field (w:YYYYWww)
-- ARGV[3]  the oldest day field kept; older d: fields are dropped
-- ARGV[4]  the oldest week field kept; older w: fields are dropped
-- ARGV[5]  TTL of the day's keys, seconds (>= 1)
-- ARGV[6]  TTL of the week's keys, seconds (>= 1)
-- ARGV[7]  TTL of the views hashes, seconds (>= 1), given at a user's first view of a day
-- ARGV[8]  top viewers kept per period (cap >= 1)
-- ARGV[9]  now, epoch seconds
-- ARGV[10..] 3 per user, in the order of its keys: user id, the user's views in the batch (>= 1),
--          username ('' when unknown: never replaces a name)
-- Returns  the number of views counted.
local users = (#ARGV - 9) / 3
if #ARGV < 9 or (#ARGV - 9) % 3 ~= 0 or #KEYS ~= 7 + users then
  return redis.error_reply('viewer_record: expected 7 keys and 9 arguments, then a key and 3 arguments per user')
end
local day_field, week_field, oldest_day, oldest_week = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local day_ttl, week_ttl, hash_ttl = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local cap, now = tonumber(ARGV[8]), tonumber(ARGV[9])
if day_ttl == nil or day_ttl < 1 or week_ttl == nil or week_ttl < 1 or hash_ttl == nil or hash_ttl < 1
    or cap == nil or cap < 1 or now == nil then
  return redis.error_reply('viewer_record: TTLs and top viewers kept must be >= 1 and now a number')
end
for i = 1, users do
  local views = tonumber(ARGV[8 + 3 * i])
  if views == nil or views < 1 or views % 1 ~= 0 then
    return redis.error_reply('viewer_record: each user views must be an integer >= 1')
  end
end

-- The per-user commands take their numbers as text (ARGV's, or formatted as integers): Redis 7.0
-- formats each Lua number given to redis.call with snprintf's %.17g, more work than an HINCRBY's own.

-- The local functions take what they use as arguments: one that names a local of the script makes
-- Redis's Lua allocate (and collect) an upvalue for it at every call.

-- The cap-th member's views, or nil while the set holds fewer than the cap.
local function bar_of(top, top_cap)
  local bar = redis.call('ZRANGE', top, -top_cap, -top_cap, 'WITHSCORES')
  return bar[2] and tonumber(bar[2])
end

-- Once every user is counted: one ZADD of the call's (views, user) pairs at or above the bar, then
-- the lowest beyond the cap leave, and the set gets its TTL when a user entered it.
local function settle(top, top_cap, ttl, scores)
  if #scores > 0 and redis.call('ZADD', top, unpack(scores)) > 0 then
    redis.call('ZREMRANGEBYRANK', top, 0, -top_cap - 1)
    redis.call('EXPIRE', top, ttl)
  end
end

-- Once every user is counted: the call's by-name entries of a period go to its pending set in one
-- SADD; the set gets its TTL when the marker is new to it (the set is new, or a merge took it).
local function pend(pending, entries, ttl)
  if #entries > 0 then
    if redis.call('SADD', pending, '') == 1 then
      redis.call('EXPIRE', pending, ttl)
    end
    redis.call('SADD', pending, unpack(entries))
  end
end

-- Drop the hash's day and week fields older than the oldest kept (period names sort by date); the
-- name and the former names stay.
local function prune(hash, day_kept, week_kept)
  for _, field in ipairs(redis.call('HKEYS', hash)) do
    local kind = string.sub(field, 1, 2)
    if (kind == 'd:' and field < day_kept) or (kind == 'w:' and field < week_kept) then
      redis.call('HDEL', hash, field)
    end
  end
end

local tombstones, day_top, week_top = KEYS[1], KEYS[2], KEYS[3]
local day_index, week_index, day_pending, week_pending = KEYS[4], KEYS[5], KEYS[6], KEYS[7]
-- The tombstones are looked up only while the set exists.
local erasures = redis.call('EXISTS', tombstones) == 1
local day_bar, week_bar = bar_of(day_top, cap), bar_of(week_top, cap)
-- What the call adds to each period's top viewers and pending set, written once every user is
-- counted (each command takes them all: from Lua a command costs more than its work here).
local day_scores, week_scores, day_entries, week_entries = {}, {}, {}, {}
local counted = 0
for i = 1, users do
  local hash = KEYS[7 + i]
  local user, views, name = ARGV[7 + 3 * i], tonumber(ARGV[8 + 3 * i]), ARGV[9 + 3 * i]
  if not (erasures and tombstoned(tombstones, user, now)) then
    counted = counted + views
    -- The first write is HINCRBY, which Redis refuses over maxmemory: once a script has written,
    -- Redis lets in the rest.
    local day_count = redis.call('HINCRBY', hash, day_field, ARGV[8 + 3 * i])
    local week_count = redis.call('HINCRBY', hash, week_field, ARGV[8 + 3 * i])
    local first_day, first_week = day_count == views, week_count == views
    -- The stored name: to compare a username with, or for the entries of a first view of a period.
    -- A later view without a username (an API event's) needs neither, so reads nothing.
    local old = nil
    if name ~= '' or first_day or first_week then
      old = redis.call('HGET', hash, 'name')
      if name == '' then
        name = old or user
      end
      if not old then
        redis.call('HSET', hash, 'name', name)
      elseif old ~= name then
        redis.call('HSET', hash, 'name', name, 'a:' .. old, '1')
      end
    end
    if first_day then
      prune(hash, oldest_day, oldest_week)
      redis.call('EXPIRE', hash, ARGV[7])
    end
    local renamed = old and old ~= name
    if renamed then
      local former = old .. '\0' .. user
      redis.call('ZREM', day_index, former)
      redis.call('ZREM', week_index, former)
      redis.call('SREM', day_pending, former)
      redis.call('SREM', week_pending, former)
    end
    if renamed or first_day then
      day_entries[#day_entries + 1] = name .. '\0' .. user
    end
    if renamed or first_week then
      week_entries[#week_entries + 1] = name .. '\0' .. user
    end
    if day_bar == nil or day_count >= day_bar then
      day_scores[#day_scores + 1] = string.format('%d', day_count)
      day_scores[#day_scores + 1] = user
    end
    if week_bar == nil or week_count >= week_bar then
      week_scores[#week_scores + 1] = string.format('%d', week_count)
      week_scores[#week_scores + 1] = user
    end
  end
end
pend(day_pending, day_entries, day_ttl)
pend(week_pending, week_entries, week_ttl)
settle(day_top, cap, day_ttl, day_scores)
settle(week_top, cap, week_ttl, week_scores)
return counted

-- Keep the names the reports show for one day's page views of a batch. The display name is a known
-- username, else the one already set, else the user id; a rename keeps the former name in the
-- user's aliases (so an erase finds old entries) and replaces the user's by-name entries. A first
-- view of a period (no view counter yet: viewer_rank.lua, queued after this, makes them) adds the
-- user's "name NUL user" entry to the period's pending set, an O(1) SADD where the index takes an
-- ordered insert; report_by_name.lua merges them. Adding an entry twice is harmless. The marker ''
-- tells the SADD that made the set, the one to give it a TTL. Tombstoned users are skipped.
-- Fenced: lua/fence.lua runs first and takes its key and arguments; KEYS and ARGV below are
-- what it leaves.
--
-- KEYS[1]  tombstones of erased users (member -> expiry)
-- KEYS[2]  the day's by-name index (zset, score 0, member name NUL user)
-- KEYS[3]  the week's by-name index
-- KEYS[4]  the day's pending by-name entries (set, and the marker '')
-- KEYS[5]  the week's pending by-name entries
-- KEYS[6..] 4 per view: the user's display name (string), former display names (set), views that
--          day and views that week (string counters, only read)
-- ARGV[1]  TTL of the day's keys, seconds (>= 1)
-- ARGV[2]  TTL of the week's keys, display names and aliases, seconds (>= 1)
-- ARGV[3]  now, epoch seconds
-- ARGV[4..] 2 per view, in the order of its keys: user id, username ('' when unknown: the user id
--          stands in until a username is known, and never replaces one)
-- Returns  the number of views whose names were kept.
local views = (#ARGV - 3) / 2
if #ARGV < 3 or (#ARGV - 3) % 2 ~= 0 or #KEYS ~= 5 + 4 * views then
  return redis.error_reply('viewer_names: expected 5 keys and 3 arguments, then 4 keys and 2 arguments per view')
end
local day_ttl, week_ttl, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if day_ttl == nil or day_ttl < 1 or week_ttl == nil or week_ttl < 1 or now == nil then
  return redis.error_reply('viewer_names: TTLs must be >= 1 and now a number')
end

-- Add a by-name entry to a period's pending set, with the marker; the set gets its TTL when the
-- marker is new to it (the set is new, or a merge took the marker). Takes its TTL as an argument:
-- a local function naming a local of the script costs an upvalue at every call.
local function pend(pending, entry, ttl)
  if redis.call('SADD', pending, entry, '') == 2 then
    redis.call('EXPIRE', pending, ttl)
  end
end

local tombstones, day_index, week_index, day_pending, week_pending = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
-- The tombstones are looked up only while the set exists.
local erasures = redis.call('EXISTS', tombstones) == 1
local kept = 0
for i = 1, views do
  local k, a = 5 + 4 * (i - 1), 3 + 2 * (i - 1)
  local name_key, aliases, day_counter, week_counter = KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4]
  local user, name = ARGV[a + 1], ARGV[a + 2]
  local expiry = erasures and redis.call('ZSCORE', tombstones, user)
  if not (expiry and tonumber(expiry) > now) then
    kept = kept + 1
    local old
    if name == '' then
      -- Not GETEX, which would save the EXPIRE: the script's first write must be one Redis refuses
      -- over maxmemory (SET is, GETEX is not), as once a script has written Redis lets in the rest.
      old = redis.call('SET', name_key, user, 'NX', 'GET')
      name = old or user
      redis.call('EXPIRE', name_key, week_ttl)
    else
      old = redis.call('SET', name_key, name, 'EX', week_ttl, 'GET')
    end
    local entry = name .. '\0' .. user
    if old and old ~= name then
      local former = old .. '\0' .. user
      redis.call('ZREM', day_index, former)
      redis.call('ZREM', week_index, former)
      redis.call('SREM', day_pending, former)
      redis.call('SREM', week_pending, former)
      redis.call('SADD', aliases, old)
      redis.call('EXPIRE', aliases, week_ttl)
      pend(day_pending, entry, day_ttl)
      pend(week_pending, entry, week_ttl)
    else
      local counts = redis.call('MGET', day_counter, week_counter)
      if not counts[1] then
        pend(day_pending, entry, day_ttl)
      end
      if not counts[2] then
        pend(week_pending, entry, week_ttl)
      end
    end
  end
end
return kept

-- Record the latest page of each person for "pages now" (docs/live.md): per person the time and the
-- page of the latest view, and per page how many people it is the latest page of. A view older
-- than the person's latest (a late one) changes nothing. People tombstoned at now are skipped.
-- lua/pages_now_prune.lua takes out the people gone offline.
--
-- KEYS[1]  tombstones of erased people (sorted set: person -> expiry)
-- KEYS[2]  latest view per person (sorted set: person -> ts)
-- KEYS[3]  latest page per person (hash: person -> path)
-- KEYS[4]  people per page (sorted set: path -> minus its people, so ZRANGE lists the most first
--          and ties by path)
-- ARGV[1]  now, epoch seconds
-- ARGV[2]  TTL of KEYS[2..4], seconds (>= 1): once no view came for that long, everyone is offline
-- ARGV[3..] 3 per view: person, ts, path
-- Returns  the number of views that became their person's latest.
if #KEYS ~= 4 or #ARGV < 2 or (#ARGV - 2) % 3 ~= 0 then
  return redis.error_reply('pages_now_record: expected 4 keys and 2 arguments, then 3 arguments per view')
end
local now, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
if now == nil or ttl == nil or ttl < 1 then
  return redis.error_reply('pages_now_record: now must be a number and the TTL >= 1')
end

local tombstones, latest, page, people = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local erasures = redis.call('EXISTS', tombstones) == 1
local moved = 0
for a = 3, #ARGV, 3 do
  local person, ts, path = ARGV[a], tonumber(ARGV[a + 1]), ARGV[a + 2]
  local expiry = erasures and redis.call('ZSCORE', tombstones, person)
  -- GT CH: the view's ts is written, and counted as a change, only when later than the person's.
  if not (expiry and tonumber(expiry) > now) and redis.call('ZADD', latest, 'GT', 'CH', ts, person) == 1 then
    local before = redis.call('HGET', page, person)
    if before ~= path then
      if before and tonumber(redis.call('ZINCRBY', people, 1, before)) >= 0 then
        redis.call('ZREM', people, before)
      end
      redis.call('ZINCRBY', people, -1, path)
      redis.call('HSET', page, person, path)
    end
    moved = moved + 1
  end
end
if moved > 0 then
  for k = 2, 4 do
    redis.call('EXPIRE', KEYS[k], ttl)
  end
end
return moved

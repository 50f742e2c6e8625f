-- First visit ever: check-and-set visitor ids of one shard, counting the new ones in the same atomic
-- step. An id lives in the shard's hash of the generation of its latest visit: one found in an older
-- generation's hash is moved, with its first-visit day, into the current one, and is not new. A
-- visitor id tombstoned at now (an erased user's, docs/privacy.md) is skipped: not stored again.
-- Prelude: lua/tombstones.lua (tombstoned).
--
-- KEYS[1]  the day's new-visitor counter of this shard (string, INCR)
-- KEYS[2]  this shard's tombstones of erased users' visitor ids (member -> expiry)
-- KEYS[3]  the shard's hash of the current generation
-- KEYS[4]  the shard's hash of the generation before it
-- KEYS[5]  ... of the one before that
-- KEYS[6]  ... of the one before that
-- KEYS[7]  ... of the oldest live generation (store.lifetimes.VISITORS: 5 live at once)
-- ARGV[1]  value stored for a new visitor: the day number of the first visit
-- ARGV[2]  TTL of the counter in seconds (> 0)
-- ARGV[3]  now, epoch seconds
-- ARGV[4]  TTL of the current generation's hash in seconds (> 0)
-- ARGV[5..]  the visitor ids (16 raw bytes), all of this shard
-- Returns  the number of visitors that were new (0 when all had visited before).
if #KEYS ~= 7 or #ARGV < 5 then
  return redis.error_reply('first_visit: expected a counter, tombstones and 5 hashes; day, ttls, now and ids')
end
local ttl, now, kept = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if ttl == nil or ttl <= 0 or kept == nil or kept <= 0 or now == nil then
  return redis.error_reply('first_visit: ttls must be positive numbers and now a number')
end

local counter, tombstones, current = KEYS[1], KEYS[2], KEYS[3]
local erasures = redis.call('EXISTS', tombstones) == 1
local older = {}  -- only the older generations that exist: a young site has none to look in
for k = 4, 7 do
  if redis.call('EXISTS', KEYS[k]) == 1 then
    older[#older + 1] = KEYS[k]
  end
end
local new, added = 0, false
for i = 5, #ARGV do
  local visitor = ARGV[i]
  if not (erasures and tombstoned(tombstones, visitor, now)) and redis.call('HSETNX', current, visitor, ARGV[1]) == 1 then
    added = true
    local first = false
    for _, key in ipairs(older) do
      first = redis.call('HGET', key, visitor)
      if first then
        redis.call('HSET', current, visitor, first)
        redis.call('HDEL', key, visitor)
        break
      end
    end
    if not first then
      new = new + 1
    end
  end
end
if added then
  redis.call('EXPIRE', current, kept)
end
if new > 0 then
  redis.call('INCRBY', counter, new)
  redis.call('EXPIRE', counter, ttl)
end
return new

-- First visit ever: check-and-set each visitor id, counting the new ones in the same atomic step.
-- A visitor id tombstoned at now (an erased user's, docs/privacy.md) is skipped: not stored again.
--
-- KEYS[1]  the day's new-visitor counter of this shard (string, INCR)
-- KEYS[2]  this shard's tombstones of erased users' visitor ids (member -> expiry)
-- KEYS[3], KEYS[4], ...  the partition hash of each visitor (one key per visitor; repeats allowed)
-- ARGV[1]  value stored for a new visitor: the day number of the first visit
-- ARGV[2]  TTL of the counter in seconds (> 0)
-- ARGV[3]  now, epoch seconds
-- ARGV[4], ARGV[5], ...  the visitor ids (16 raw bytes), ARGV[i + 1] goes into KEYS[i]
-- Returns  the number of visitors that were new (0 when all had visited before).
if #KEYS < 3 or #ARGV ~= #KEYS + 1 then
  return redis.error_reply('first_visit: expected a counter, tombstones and N hashes; day, ttl, now and N ids')
end
local ttl, now = tonumber(ARGV[2]), tonumber(ARGV[3])
if ttl == nil or ttl <= 0 or now == nil then
  return redis.error_reply('first_visit: ttl must be a positive number and now a number')
end

local counter, tombstones = KEYS[1], KEYS[2]
local erasures = redis.call('EXISTS', tombstones) == 1
local new = 0
for i = 3, #KEYS do
  local expiry = erasures and redis.call('ZSCORE', tombstones, ARGV[i + 1])
  if not (expiry and tonumber(expiry) > now) and redis.call('HSETNX', KEYS[i], ARGV[i + 1], ARGV[1]) == 1 then
    new = new + 1
  end
end
if new > 0 then
  redis.call('INCRBY', counter, new)
  redis.call('EXPIRE', counter, ttl)
end
return new

-- First visit ever: check-and-set each visitor id, counting the new ones in the same atomic step.
--
-- KEYS[1]  the day's new-visitor counter of this shard (string, INCR)
-- KEYS[2], KEYS[3], ...  the partition hash of each visitor (one key per visitor; repeats allowed)
-- ARGV[1]  value stored for a new visitor: the day number of the first visit
-- ARGV[2]  TTL of the counter in seconds (> 0)
-- ARGV[3], ARGV[4], ...  the visitor ids (16 raw bytes), ARGV[i + 2] goes into KEYS[i + 1]
-- Returns  the number of visitors that were new (0 when all had visited before).
if #KEYS < 2 or #ARGV ~= #KEYS + 1 then
  return redis.error_reply('first_visit: expected a counter, N hashes, day, ttl and N ids')
end
local ttl = tonumber(ARGV[2])
if ttl == nil or ttl <= 0 then
  return redis.error_reply('first_visit: ttl must be a positive number')
end

local new = 0
for i = 2, #KEYS do
  if redis.call('HSETNX', KEYS[i], ARGV[i + 1], ARGV[1]) == 1 then
    new = new + 1
  end
end
if new > 0 then
  redis.call('INCRBY', KEYS[1], new)
  redis.call('EXPIRE', KEYS[1], ttl)
end
return new

-- Harvest a counter: atomically read-and-reset it (GETDEL) and add what it held to an accumulator.
--
-- The accumulator keeps everything harvested for the day, so a job that dies after harvesting and
-- before writing the database loses nothing: its retry reads the accumulator again.
--
-- KEYS[1]  the counter (string, INCR by writers)
-- KEYS[2]  the accumulator (string)
-- ARGV[1]  TTL of the accumulator in seconds (> 0)
-- Returns  the accumulator's total after this harvest.
if #KEYS ~= 2 or #ARGV ~= 1 then
  return redis.error_reply('harvest_counter: expected 2 keys and 1 argument')
end
local ttl = tonumber(ARGV[1])
if ttl == nil or ttl <= 0 then
  return redis.error_reply('harvest_counter: ttl must be a positive number')
end
local counter, harvested = KEYS[1], KEYS[2]
local taken = redis.call('GETDEL', counter)
if taken ~= false then
  redis.call('INCRBY', harvested, taken)
  redis.call('EXPIRE', harvested, ttl)
end
return tonumber(redis.call('GET', harvested) or '0')

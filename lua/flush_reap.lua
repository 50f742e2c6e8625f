-- Hand stale claims back: members claimed before a cutoff (their flush died or overran its lock)
-- return to "dirty" so the next flush writes them. ZADD LT keeps the older of the two change times
-- when the member was changed again meanwhile.
--
-- KEYS[1]  claimed sorted set (score = claim time)
-- KEYS[2]  dirty sorted set (score = first change time)
-- ARGV[1]  cutoff, epoch seconds: claims with a claim time at or before it are stale
-- ARGV[2]  how many claims to hand back at most in this call
-- Returns  the number of claims handed back.
if #KEYS ~= 2 or #ARGV ~= 2 then
  return redis.error_reply('flush_reap: expected 2 keys and 2 arguments')
end
local limit = tonumber(ARGV[2])
if tonumber(ARGV[1]) == nil or limit == nil or limit < 1 then
  return redis.error_reply('flush_reap: cutoff must be a number and limit a positive integer')
end
local claimed, dirty = KEYS[1], KEYS[2]
local stale = redis.call('ZRANGE', claimed, '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, limit, 'WITHSCORES')
for i = 1, #stale, 2 do
  redis.call('ZADD', dirty, 'LT', stale[i + 1], stale[i])
  redis.call('ZREM', claimed, stale[i])
end
return #stale / 2

-- Count the union of per-day keys (a week or a month so far), caching the union briefly.
-- The last day key (today's) is folded into a cached union at every call, so the count is live
-- for today and never below today's own count; the cache only delays late events of past days.
--
-- KEYS[1]  the union key (the cache); KEYS[2], KEYS[3], ...  the per-day keys
-- ARGV[1]  'bits' (bitmaps: BITOP OR, BITCOUNT) or 'hll' (HyperLogLogs: PFMERGE, PFCOUNT)
-- ARGV[2]  TTL of the union key in milliseconds (> 0)
-- Returns  the number of distinct members over the days (exact for bits, estimated for hll).
if #KEYS < 2 or #ARGV ~= 2 then
  return redis.error_reply('union_count: expected a union key, day keys, kind and ttl')
end
local kind = ARGV[1]
if kind ~= 'bits' and kind ~= 'hll' then
  return redis.error_reply('union_count: kind must be bits or hll')
end
local ttl = tonumber(ARGV[2])
if ttl == nil or ttl <= 0 then
  return redis.error_reply('union_count: ttl must be a positive number')
end

local days = {}
for i = 2, #KEYS do
  days[#days + 1] = KEYS[i]
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  if kind == 'bits' then
    redis.call('BITOP', 'OR', KEYS[1], unpack(days))
  else
    redis.call('PFMERGE', KEYS[1], unpack(days))
  end
  -- BITOP over only empty days stores nothing; PEXPIRE then does nothing, which is fine.
  redis.call('PEXPIRE', KEYS[1], ttl)
else
  -- Both commands rewrite the key: put its remaining lifetime back, so it still expires on time.
  local left = redis.call('PTTL', KEYS[1])
  if kind == 'bits' then
    redis.call('BITOP', 'OR', KEYS[1], KEYS[1], days[#days])
  else
    redis.call('PFMERGE', KEYS[1], days[#days])
  end
  redis.call('PEXPIRE', KEYS[1], left > 0 and left or ttl)
end
if kind == 'bits' then
  return redis.call('BITCOUNT', KEYS[1])
end
return redis.call('PFCOUNT', KEYS[1])

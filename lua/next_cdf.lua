-- Build the cumulative-weight set of the pages that followed one page over a window of days, for
-- weighted random picks: the day sets are summed (ZUNIONSTORE), then each member's score becomes
-- the running sum of the counts up to and including it, so member i owns the interval
-- [score of i - 1, score of i) and a draw x in [0, total) picks the first member whose score is
-- above x (ZRANGEBYSCORE key (x +inf LIMIT 0 1: O(log N)). Rebuilt whole, atomically, so a reader
-- sees the old copy or the new one. Work: O(D * K log(D * K)) for D days of at most K pages.
--
-- KEYS[1]  the cumulative set (replaced)
-- KEYS[2]  its total (string: the sum of every count; also marks a built copy, even an empty one)
-- KEYS[3..] the window's transition sets of the page, one per day (>= 1)
-- ARGV[1]  milliseconds the copy lives (>= 1)
-- Returns  the total.
if #KEYS < 3 or #ARGV ~= 1 then
  return redis.error_reply('next_cdf: expected the set, its total and at least one day set, and 1 argument')
end
local keep = tonumber(ARGV[1])
if keep == nil or keep < 1 then
  return redis.error_reply('next_cdf: the lifetime must be a positive number of milliseconds')
end

redis.call('ZUNIONSTORE', KEYS[1], #KEYS - 2, unpack(KEYS, 3))
local rows = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local total, batch = 0, {}
for i = 1, #rows, 2 do
  total = total + tonumber(rows[i + 1])
  batch[#batch + 1] = string.format('%.17g', total)
  batch[#batch + 1] = rows[i]
  if #batch >= 1000 or i + 1 == #rows then
    redis.call('ZADD', KEYS[1], unpack(batch))
    batch = {}
  end
end
redis.call('PEXPIRE', KEYS[1], keep)
redis.call('SET', KEYS[2], string.format('%.17g', total), 'PX', keep)
return total

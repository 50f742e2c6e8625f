-- Replace a page's cumulative-weight set with the next pages given: each scored by the running sum
-- of the counts in (count, page) order, so member i owns [S(i - 1), S(i)) and a draw x in [0, total)
-- is ZRANGEBYSCORE (x +inf LIMIT 0 1, O(log N). Replaced whole, atomically, so a reader sees the
-- old copy or the new. The caller sums the window's days (activity/store/transitions.py).
-- Work: O(K log K) for K next pages.
--
-- KEYS[1]  the cumulative set (replaced)
-- KEYS[2]  its total (string: the sum of every count; also marks a built copy, even an empty one)
-- ARGV[1]  milliseconds the copy lives (>= 1)
-- ARGV[2..] 2 per next page: its count (digits), the page
-- Returns  the total.
if #KEYS ~= 2 or #ARGV < 1 or #ARGV % 2 ~= 1 then
  return redis.error_reply('next_cdf: expected the set and its total, the lifetime and 2 arguments per next page')
end
local keep = tonumber(ARGV[1])
if keep == nil or keep < 1 then
  return redis.error_reply('next_cdf: the lifetime must be a positive number of milliseconds')
end
for i = 2, #ARGV, 2 do
  if not string.match(ARGV[i], '^%d+$') then
    return redis.error_reply('next_cdf: each count must be a whole number >= 0')
  end
end

local cdf, total_key = KEYS[1], KEYS[2]
local CHUNK = 1000 -- members per variadic command, well under Lua's unpack limit
redis.call('DEL', cdf)
for at = 2, #ARGV, 2 * CHUNK do
  redis.call('ZADD', cdf, unpack(ARGV, at, math.min(at + 2 * CHUNK - 1, #ARGV)))
end
local rows = redis.call('ZRANGE', cdf, 0, -1, 'WITHSCORES')
local total, batch = 0, {}
for i = 1, #rows, 2 do
  total = total + tonumber(rows[i + 1])
  batch[#batch + 1] = string.format('%.17g', total)
  batch[#batch + 1] = rows[i]
  if #batch >= 2 * CHUNK or i + 1 == #rows then
    redis.call('ZADD', cdf, unpack(batch))
    batch = {}
  end
end
redis.call('PEXPIRE', cdf, keep)
redis.call('SET', total_key, string.format('%.17g', total), 'PX', keep)
return total

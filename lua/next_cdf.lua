-- Build the cumulative-weight set of the pages that followed one page over the window's days: each
-- next page scored by the running sum of the counts, so member i owns [S(i - 1), S(i)) and a draw x
-- in [0, total) is ZRANGEBYSCORE (x +inf LIMIT 0 1, O(log N). Rebuilt whole, atomically, so a
-- reader sees the old copy or the new. Work: O(D K log(D K)) for D days of at most K next pages.
--
-- KEYS[1]  the cumulative set (replaced)
-- KEYS[2]  its total (string: the sum of every count; also marks a built copy, even an empty one)
-- KEYS[3..] 2 per day of the window (at least one): that day's transitions, that day's transition index
-- ARGV[1]  the page
-- ARGV[2]  milliseconds the copy lives (>= 1)
-- Returns  the total.
if #KEYS < 4 or #KEYS % 2 ~= 0 or #ARGV ~= 2 then
  return redis.error_reply('next_cdf: expected the set, its total and 2 keys per day (at least one), and 2 arguments')
end
local keep = tonumber(ARGV[2])
if keep == nil or keep < 1 then
  return redis.error_reply('next_cdf: the lifetime must be a positive number of milliseconds')
end

local cdf, total_key, page = KEYS[1], KEYS[2], ARGV[1]
local from, to, skip = '[' .. page .. '\0', '(' .. page .. '\1', #page + 2
local CHUNK = 1000 -- members per variadic command, well under Lua's unpack limit
local counts, batch = {}, {}
for day = 3, #KEYS, 2 do
  local transitions, index = KEYS[day], KEYS[day + 1]
  local steps = redis.call('ZRANGEBYLEX', index, from, to)
  for at = 1, #steps, CHUNK do
    local times = redis.call('ZMSCORE', transitions, unpack(steps, at, math.min(at + CHUNK - 1, #steps)))
    for n = 1, #times do
      local next_page = string.sub(steps[at + n - 1], skip)
      counts[next_page] = (counts[next_page] or 0) + (tonumber(times[n]) or 0)
    end
  end
end

-- The sums go in first, so the set orders the next pages as ZUNIONSTORE of per-page sets did.
redis.call('DEL', cdf)
for next_page, count in pairs(counts) do
  batch[#batch + 1] = string.format('%.17g', count)
  batch[#batch + 1] = next_page
  if #batch >= 2 * CHUNK then
    redis.call('ZADD', cdf, unpack(batch))
    batch = {}
  end
end
if #batch > 0 then
  redis.call('ZADD', cdf, unpack(batch))
end
local rows = redis.call('ZRANGE', cdf, 0, -1, 'WITHSCORES')
local total = 0
batch = {}
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

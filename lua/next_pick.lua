-- Draw distinct pages from a cumulative-weight set (lua/next_cdf.lua), each weighted by the counts
-- of the pages not drawn yet: a draw scaled to the mass left is moved past the intervals already
-- drawn. The draws come from the caller's seedable generator, never from Lua.
-- Work: O(n (log N + n)) for n draws.
--
-- KEYS[1]  the cumulative set
-- KEYS[2]  its total (string)
-- KEYS[3..] the window's transition indexes, one per day (lua/session_record.lua; only counted, when
--          there is no copy: the page's steps are ZLEXCOUNT [page NUL (page \1)
-- ARGV[1]  the page
-- ARGV[2..n + 1] the draws, each in [0, 1) (n >= 1)
-- Returns  {-1, the page's steps in the day indexes} when no copy is built (0: nothing to build);
--          else {PTTL of the copy in ms, total, picked page, ...}: n pages, or all when fewer followed.
if #KEYS < 3 or #ARGV < 2 then
  return redis.error_reply('next_pick: expected the set, its total and at least one day index, the page and at least 1 draw')
end
for i = 2, #ARGV do
  local u = tonumber(ARGV[i])
  if u == nil or u < 0 or u >= 1 then
    return redis.error_reply('next_pick: draws must be numbers in [0, 1)')
  end
end

local cdf, total_key, page = KEYS[1], KEYS[2], ARGV[1]
local total = redis.call('GET', total_key)
if not total then
  local steps = 0
  for day = 3, #KEYS do
    local index = KEYS[day]
    steps = steps + redis.call('ZLEXCOUNT', index, '[' .. page .. '\0', '(' .. page .. '\1')
  end
  return {-1, steps}
end
local reply = {redis.call('PTTL', total_key), tonumber(total)}
local taken = {} -- {start, width} of the intervals drawn, by start
local left = tonumber(total)
for i = 2, #ARGV do
  if left <= 0 then
    break
  end
  local x = tonumber(ARGV[i]) * left
  for _, span in ipairs(taken) do
    if x >= span[1] then
      x = x + span[2]
    else
      break
    end
  end
  local found = redis.call('ZRANGEBYSCORE', cdf, '(' .. string.format('%.17g', x), '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if #found == 0 then
    break
  end
  local below = redis.call('ZREVRANGEBYSCORE', cdf, '(' .. found[2], '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
  local start = #below == 0 and 0 or tonumber(below[2])
  local span = {start, tonumber(found[2]) - start}
  local at = #taken + 1
  while at > 1 and taken[at - 1][1] > start do
    at = at - 1
  end
  table.insert(taken, at, span)
  left = left - span[2]
  reply[#reply + 1] = found[1]
end
return reply

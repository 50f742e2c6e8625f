-- Draw distinct pages from a cumulative-weight set (lua/next_cdf.lua), each weighted by the counts
-- of the pages not drawn yet: a draw scaled to the mass left is moved past the intervals already
-- drawn. The draws come from the caller's seedable generator, never from Lua.
-- Work: O(n (log N + n)) for n draws.
--
-- KEYS[1]  the cumulative set
-- KEYS[2]  its total (string)
-- ARGV[1..n] the draws, each in [0, 1) (n >= 1)
-- Returns  {-1} when no copy is built; else {PTTL of the copy in ms, total, picked page, ...}: n
--          pages, or all when fewer followed.
if #KEYS ~= 2 or #ARGV < 1 then
  return redis.error_reply('next_pick: expected the set and its total, and at least 1 draw')
end
for i = 1, #ARGV do
  local u = tonumber(ARGV[i])
  if u == nil or u < 0 or u >= 1 then
    return redis.error_reply('next_pick: draws must be numbers in [0, 1)')
  end
end

local cdf, total_key = KEYS[1], KEYS[2]
local total = redis.call('GET', total_key)
if not total then
  return {-1}
end
local reply = {redis.call('PTTL', total_key), tonumber(total)}
local taken = {} -- {start, width} of the intervals drawn, by start
local left = tonumber(total)
for i = 1, #ARGV do
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

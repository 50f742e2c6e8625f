-- One page of the last-seen set after a keyset cursor: the members that come strictly after
-- (cursor score, cursor member) in the order score descending, then member descending (ZRANGE REV),
-- down to a lowest score.
--
-- KEYS[1]  last-seen sorted set (member = user id, score = epoch seconds)
-- ARGV[1]  cursor score: the ts of the previous page's last row
-- ARGV[2]  cursor member: the user of that row
-- ARGV[3]  lowest score returned (the online window's start)
-- ARGV[4]  page size, >= 1
-- Returns  {member, score, member, score, ...}: at most ARGV[4] pairs, scores as Redis prints them
--
-- O(log N + page) however many members share the cursor's score: the cursor member's ZREVRANK while
-- it keeps that score, else a binary search among the score's ties (it moved or was pruned).
if #KEYS ~= 1 or #ARGV ~= 4 then
  return redis.error_reply('last_seen_page_after: expected 1 key and 4 arguments')
end
local score, member, since, limit = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
if score == nil or since == nil or limit == nil or limit < 1 then
  return redis.error_reply('last_seen_page_after: expected numeric score and lowest score, and a page size >= 1')
end

-- a < b byte by byte, as a sorted set orders members (Lua's < on strings follows the server's locale).
local function sorts_before(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a < #b
end

local start
local seen = KEYS[1]
local current = redis.call('ZSCORE', seen, member)
if current and tonumber(current) == score then
  start = redis.call('ZREVRANK', seen, member) + 1
else
  local low = redis.call('ZCOUNT', seen, '(' .. ARGV[1], '+inf')
  local high = low + redis.call('ZCOUNT', seen, ARGV[1], ARGV[1])
  while low < high do
    local middle = math.floor((low + high) / 2)
    if sorts_before(redis.call('ZRANGE', seen, middle, middle, 'REV')[1], member) then
      high = middle
    else
      low = middle + 1
    end
  end
  start = low
end

local rows = redis.call('ZRANGE', seen, start, start + limit - 1, 'REV', 'WITHSCORES')
local page = {}
for i = 1, #rows, 2 do
  if tonumber(rows[i + 1]) < since then
    break
  end
  page[#page + 1] = rows[i]
  page[#page + 1] = rows[i + 1]
end
return page

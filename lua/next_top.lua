-- The most frequent next pages of some pages on one day, for the dashboard: each page's steps
-- (lua/session_record.lua: "page NUL next page" -> times) found by one ZRANGEBYLEX of the day's
-- index, their counts by ZMSCORE, the n most frequent kept, ties to the greater next page (as a
-- sorted set read in reverse orders them). Work: pages x (next pages kept per page and day).
--
-- KEYS[1]  the day's transitions (zset "page NUL next page" -> times)
-- KEYS[2]  the day's transition index (the same members, score 0)
-- ARGV[1]  n: next pages returned per page (>= 1)
-- ARGV[2..] the pages (at least one)
-- Returns  one array per page, in order: {next page, times, next page, times, ...}, most frequent
--          first, at most n pairs (empty when nothing followed the page).
if #KEYS ~= 2 or #ARGV < 2 then
  return redis.error_reply('next_top: expected 2 keys, n and at least one page')
end
local n = tonumber(ARGV[1])
if n == nil or n < 1 then
  return redis.error_reply('next_top: n must be a positive number')
end

local transitions, index = KEYS[1], KEYS[2]
local CHUNK = 1000 -- members per ZMSCORE, well under Lua's unpack limit
local reply = {}
for p = 2, #ARGV do
  local page = ARGV[p]
  local steps = redis.call('ZRANGEBYLEX', index, '[' .. page .. '\0', '(' .. page .. '\1')
  local times, order = {}, {}
  for at = 1, #steps, CHUNK do
    local found = redis.call('ZMSCORE', transitions, unpack(steps, at, math.min(at + CHUNK - 1, #steps)))
    for i = 1, #found do
      times[at + i - 1] = tonumber(found[i]) or 0
      order[at + i - 1] = at + i - 1
    end
  end
  -- Positions in the range are byte order of the next page: no Lua string comparison (strcoll).
  table.sort(order, function(a, b)
    if times[a] ~= times[b] then
      return times[a] > times[b]
    end
    return a > b
  end)
  local rows = {}
  for i = 1, math.min(n, #order) do
    rows[#rows + 1] = string.sub(steps[order[i]], #page + 2)
    rows[#rows + 1] = times[order[i]]
  end
  reply[#reply + 1] = rows
end
return reply

-- Read one page of the by-name index of a period, with each user's page views: the
-- ``active-by-name`` report, served from the index the page-view script keeps in order.
-- Views come from the per-user counters, whose names are the stem KEYS[2] followed by the user id
-- read from the index (same {pv} slot): the index says who is on the page only once it is read.
--
-- KEYS[1]  the period's by-name index (zset, score 0, member = name NUL user id)
-- KEYS[2]  the stem of the period's per-user view counters (string keys: stem .. user id)
-- ARGV[1]  first rank of the page (0-based)
-- ARGV[2]  number of rows (>= 1)
-- Returns  {count of the whole index, member, views, member, views, ...} for the page; views is
--          0 when the user's counter is gone (it expired apart from the index).
if #KEYS ~= 2 or #ARGV ~= 2 then
  return redis.error_reply('report_by_name: expected 2 keys and 2 arguments')
end
local first, size = tonumber(ARGV[1]), tonumber(ARGV[2])
if first == nil or first < 0 or size == nil or size < 1 then
  return redis.error_reply('report_by_name: expected first >= 0 and size >= 1')
end
local members = redis.call('ZRANGE', KEYS[1], first, first + size - 1)
local reply = {redis.call('ZCARD', KEYS[1])}
if #members == 0 then
  return reply
end
local counters = {}
for i, member in ipairs(members) do
  counters[i] = KEYS[2] .. string.sub(member, string.find(member, '\0', 1, true) + 1)
end
local views = redis.call('MGET', unpack(counters))
for i, member in ipairs(members) do
  reply[#reply + 1] = member
  reply[#reply + 1] = tonumber(views[i] or '0')
end
return reply

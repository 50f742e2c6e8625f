-- Bring the by-name index of a period up to date by one bounded slice, then read one page of it
-- with each user's page views: the ``active-by-name`` report. The page-view script leaves new
-- entries ("name NUL user") in the period's pending set (an SADD); up to ``slice`` of them move
-- into the index here (SPOP, ZADD score 0, the index's EXPIRE), so a read stays one round trip and
-- each call's work is bounded whatever the number of pending entries. With 0 rows it only merges
-- (the refresh job drains a backlog that way, a slice per call).
-- Views come from the per-user counters, whose names are the stem KEYS[2] followed by the user id
-- read from the index (same {pv} slot): the index says who is on the page only once it is read.
-- An erase removes a user's entries from both sets in one script, so a merge never brings one back.
--
-- KEYS[1]  the period's by-name index (zset, score 0, member = name NUL user id)
-- KEYS[2]  the stem of the period's per-user view counters (string keys: stem .. user id)
-- KEYS[3]  the period's pending by-name entries (set of name NUL user id, and the marker '')
-- ARGV[1]  first rank of the page (0-based)
-- ARGV[2]  number of rows (>= 0; 0: merge only)
-- ARGV[3]  pending entries merged at most (the slice, >= 1)
-- ARGV[4]  the index's TTL, seconds (the period's counters'), renewed when entries move in
-- Returns  {users in the index, entries merged, entries still pending, member, views, member,
--          views, ...} for the page; views is 0 when the user's counter is gone (it expired apart
--          from the index).
if #KEYS ~= 3 or #ARGV ~= 4 then
  return redis.error_reply('report_by_name: expected 3 keys and 4 arguments')
end
local first, size = tonumber(ARGV[1]), tonumber(ARGV[2])
local slice, ttl = tonumber(ARGV[3]), tonumber(ARGV[4])
if first == nil or first < 0 or size == nil or size < 0 then
  return redis.error_reply('report_by_name: expected first >= 0 and size >= 0')
end
if slice == nil or slice < 1 or ttl == nil or ttl < 1 then
  return redis.error_reply('report_by_name: expected slice >= 1 and ttl >= 1')
end

-- The pending set's marker (the empty string: lua/session_record.lua) is no entry. It goes first,
-- so the SPOP takes entries only and the set's size counts them, and nothing pending leaves no key;
-- the next new entry puts it back, with the set's TTL.
redis.call('SREM', KEYS[3], '')

-- ZADD takes the entries in chunks, so no call unpacks more arguments than Lua's stack allows.
local CHUNK = 500
local moved = redis.call('SPOP', KEYS[3], slice)
for start = 1, #moved, CHUNK do
  local args = {}
  for i = start, math.min(start + CHUNK - 1, #moved) do
    args[#args + 1] = 0
    args[#args + 1] = moved[i]
  end
  redis.call('ZADD', KEYS[1], unpack(args))
end
if #moved > 0 then
  redis.call('EXPIRE', KEYS[1], ttl)
end

local reply = {redis.call('ZCARD', KEYS[1]), #moved, redis.call('SCARD', KEYS[3])}
if size == 0 then
  return reply
end
local members = redis.call('ZRANGE', KEYS[1], first, first + size - 1)
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

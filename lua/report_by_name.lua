-- The active-by-name report: merge up to a slice of the period's pending entries into its by-name
-- index, so a call's work is bounded however many wait, then read one page of the index by rank (0
-- rows: merge only). The caller reads the page's view counters, keys this script is not given. An
-- erase removes a user's entries from both sets at once, so a merge never brings one back.
--
-- KEYS[1]  the period's by-name index (zset, score 0, member = name NUL user id)
-- KEYS[2]  the period's pending by-name entries (set of name NUL user id, and the marker '')
-- ARGV[1]  first rank of the page (0-based)
-- ARGV[2]  number of rows (>= 0; 0: merge only)
-- ARGV[3]  pending entries merged at most (the slice, >= 1)
-- ARGV[4]  the index's TTL, seconds (the period's counters'), renewed when entries move in
-- Returns  {users in the index, entries merged, entries still pending, member, member, ...}: the
--          page's members, in rank order.
if #KEYS ~= 2 or #ARGV ~= 4 then
  return redis.error_reply('report_by_name: expected 2 keys and 4 arguments')
end
local first, size = tonumber(ARGV[1]), tonumber(ARGV[2])
local slice, ttl = tonumber(ARGV[3]), tonumber(ARGV[4])
if first == nil or first < 0 or size == nil or size < 0 then
  return redis.error_reply('report_by_name: expected first >= 0 and size >= 0')
end
if slice == nil or slice < 1 or ttl == nil or ttl < 1 then
  return redis.error_reply('report_by_name: expected slice >= 1 and ttl >= 1')
end

local index, pending = KEYS[1], KEYS[2]
-- The pending set's marker (the empty string: lua/viewer_record.lua) is no entry. It goes first,
-- so the SPOP takes entries only and the set's size counts them, and nothing pending leaves no key;
-- the next new entry puts it back, with the set's TTL.
redis.call('SREM', pending, '')

-- ZADD takes the entries in chunks, so no call unpacks more arguments than Lua's stack allows.
local CHUNK = 500
local moved = redis.call('SPOP', pending, slice)
for start = 1, #moved, CHUNK do
  local args = {}
  for i = start, math.min(start + CHUNK - 1, #moved) do
    args[#args + 1] = 0
    args[#args + 1] = moved[i]
  end
  redis.call('ZADD', index, unpack(args))
end
if #moved > 0 then
  redis.call('EXPIRE', index, ttl)
end

local reply = {redis.call('ZCARD', index), #moved, redis.call('SCARD', pending)}
if size > 0 then
  for _, member in ipairs(redis.call('ZRANGE', index, first, first + size - 1)) do
    reply[#reply + 1] = member
  end
end
return reply

-- The user's side of a sign-in (docs/visitors.md#signing-in): the visitor's session pages join the
-- user's session in time order, and the visitor is recorded among the user's. The session is the
-- list session_record.lua keeps (sorted by ts, oldest first): merged with the visitor's entries
-- (on equal ts the visitor's first), the newest N kept, PEXPIRE the window. Nothing is counted in
-- page statistics or transitions; a session the join creates counts as started on the caller's day.
-- The linked visitors are a sorted set, visitor id -> when linked, the newest M kept, its TTL renewed.
-- A user tombstoned at now is left alone.
-- Prelude: lua/tombstones.lua (tombstoned).
-- Prelude: lua/session_entry.lua (entry_parts).
--
-- KEYS[1]  tombstones of erased users ({ses}, member -> expiry)
-- KEYS[2]  the user's session (list)
-- KEYS[3]  the day's sessions-started counter (string)
-- KEYS[4]  the user's linked visitors (sorted set)
-- ARGV[1]  user id, ARGV[2] now (epoch seconds), ARGV[3] visitor id (32 hex digits)
-- ARGV[4]  session window, milliseconds (>= 1); ARGV[5] pages kept (N >= 1)
-- ARGV[6]  TTL of the started counter, seconds (>= 1)
-- ARGV[7]  linked visitors kept (M >= 1); ARGV[8] their set's TTL, seconds (>= 1)
-- ARGV[9..]  the visitor's pages, oldest first: entries (store.sessions.entry)
-- Returns  the session's length after the join; -1 for a tombstoned user (nothing written).
if #KEYS ~= 4 or #ARGV < 8 then
  return redis.error_reply('signin_join: expected 4 keys, 8 arguments and then the pages')
end
local now, window, keep = tonumber(ARGV[2]), tonumber(ARGV[4]), tonumber(ARGV[5])
local started_ttl, linked_max, linked_ttl = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
if now == nil or window == nil or window < 1 or keep == nil or keep < 1 or started_ttl == nil or started_ttl < 1
    or linked_max == nil or linked_max < 1 or linked_ttl == nil or linked_ttl < 1 then
  return redis.error_reply('signin_join: now a number; window, pages kept, TTLs and linked kept >= 1')
end
local tombstones, session, started, linked = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
if tombstoned(tombstones, ARGV[1], now) then
  return -1
end

redis.call('ZADD', linked, now, ARGV[3])
redis.call('ZREMRANGEBYRANK', linked, 0, -linked_max - 1)
redis.call('EXPIRE', linked, linked_ttl)

local pages = #ARGV - 8
if pages == 0 then
  return redis.call('LLEN', session)
end
local own = redis.call('LRANGE', session, 0, -1)
local merged, u = {}, 1
local function ts_of(entry)
  local _, ts = entry_parts(entry)
  return ts or 0
end
for v = 1, pages do
  local entry = ARGV[8 + v]
  local ts = ts_of(entry)
  while u <= #own and ts_of(own[u]) < ts do
    merged[#merged + 1] = own[u]
    u = u + 1
  end
  merged[#merged + 1] = entry
end
for n = u, #own do
  merged[#merged + 1] = own[n]
end
local first = math.max(#merged - keep + 1, 1)
redis.call('DEL', session)
for at = first, #merged, 1000 do
  redis.call('RPUSH', session, unpack(merged, at, math.min(at + 999, #merged)))
end
redis.call('PEXPIRE', session, window)
if #own == 0 and redis.call('INCR', started) == 1 then
  redis.call('EXPIRE', started, started_ttl)
end
return #merged - first + 1

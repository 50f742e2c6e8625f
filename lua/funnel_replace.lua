-- Replace a person's funnel state only if it is still the one read (compare-and-set), for a
-- sign-in's merge of a visitor's progress into the user's (docs/funnels.md#signing-in): a view
-- recorded for the person in between makes the caller read and merge again. A person tombstoned at
-- now is left alone.
-- Prelude: lua/tombstones.lua (tombstoned).
--
-- KEYS[1]  the person's state (string)
-- KEYS[2]  the partition's tombstones (member -> expiry)
-- ARGV[1]  the person ('u:<user>' or 'v:<visitor>'), ARGV[2] now, epoch seconds
-- ARGV[3]  the state read ('' for none), ARGV[4] the new state ('' to delete it)
-- ARGV[5]  the new state's TTL, milliseconds (>= 1)
-- Returns  1 replaced, 0 the state changed since it was read, -1 the person is tombstoned.
if #KEYS ~= 2 or #ARGV ~= 5 then
  return redis.error_reply('funnel_replace: expected 2 keys and 5 arguments')
end
local now, ttl = tonumber(ARGV[2]), tonumber(ARGV[5])
if now == nil or ttl == nil or ttl < 1 then
  return redis.error_reply('funnel_replace: now must be a number and the TTL >= 1')
end
if tombstoned(KEYS[2], ARGV[1], now) then
  return -1
end
local found = redis.call('GET', KEYS[1]) or ''
if found ~= ARGV[3] then
  return 0
end
if ARGV[4] == '' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[4], 'PX', ttl)
end
return 1

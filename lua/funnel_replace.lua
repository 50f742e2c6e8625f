-- Replace a person's funnel state only if it is still the one read (compare-and-set), for a
-- sign-in's merge of a visitor's progress into the user's (docs/funnels.md#signing-in): a view
-- recorded for the person in between makes the caller read and merge again. The state read is the
-- one in the newest of the partition's live generations holding the person; a new state goes into
-- the current generation and leaves the others. A person tombstoned at now is left alone.
-- Prelude: lua/tombstones.lua (tombstoned).
--
-- KEYS[1]  the partition's tombstones (member -> expiry)
-- KEYS[2]  the partition's states of the current generation (hash: person -> state)
-- KEYS[3]  the partition's states of the generation before
-- KEYS[4]  the partition's states of the one before that
-- ARGV[1]  the person ('u:<user>' or 'v:<visitor>'), ARGV[2] now, epoch seconds
-- ARGV[3]  the state read ('' for none), ARGV[4] the new state ('' to delete it)
-- ARGV[5]  the current generation's TTL, seconds (>= 1)
-- Returns  1 replaced, 0 the state changed since it was read, -1 the person is tombstoned.
if #KEYS ~= 4 or #ARGV ~= 5 then
  return redis.error_reply('funnel_replace: expected 4 keys and 5 arguments')
end
local person, now, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[5])
if now == nil or ttl == nil or ttl < 1 then
  return redis.error_reply('funnel_replace: now must be a number and the TTL >= 1')
end
if tombstoned(KEYS[1], person, now) then
  return -1
end
local found = false
for k = 2, 4 do
  found = redis.call('HGET', KEYS[k], person)
  if found then
    break
  end
end
if (found or '') ~= ARGV[3] then
  return 0
end
for k = 3, 4 do
  redis.call('HDEL', KEYS[k], person)
end
if ARGV[4] == '' then
  redis.call('HDEL', KEYS[2], person)
else
  redis.call('HSET', KEYS[2], person, ARGV[4])
  redis.call('EXPIRE', KEYS[2], ARGV[5])
end
return 1

-- ZADD unless smaller: move each member's score forward, never back, and mark what moved.
--
-- KEYS[1]  last-seen sorted set (member = user id, score = epoch seconds)
-- KEYS[2]  "changed since last flush" sorted set (score = time of the first unflushed change)
-- ARGV[1]  now, epoch seconds (the caller's clock; scripts never read the clock)
-- ARGV[2], ARGV[3], ...  score, member pairs
-- Returns  the number of pairs that moved a score forward (a new member counts as moved).
if #KEYS ~= 2 then
  return redis.error_reply('zadd_unless_smaller: expected 2 keys, got ' .. #KEYS)
end
if #ARGV < 1 or (#ARGV - 1) % 2 ~= 0 then
  return redis.error_reply('zadd_unless_smaller: expected now followed by score, member pairs')
end

-- Check every score before writing anything, so a bad call changes nothing.
for i = 2, #ARGV, 2 do
  if tonumber(ARGV[i]) == nil then
    return redis.error_reply('zadd_unless_smaller: score is not a number: ' .. ARGV[i])
  end
end

local now = ARGV[1]
local changed = 0
for i = 2, #ARGV, 2 do
  local score = tonumber(ARGV[i])
  local member = ARGV[i + 1]
  local current = redis.call('ZSCORE', KEYS[1], member)
  if current == false or score > tonumber(current) then
    redis.call('ZADD', KEYS[1], score, member)
    redis.call('ZADD', KEYS[2], 'NX', now, member)
    changed = changed + 1
  end
end
return changed

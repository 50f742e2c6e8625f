-- ZADD unless smaller: move each member's score forward, never back, and mark what moved.
--
-- KEYS[1]  last-seen sorted set (member = user id, score = epoch seconds)
-- KEYS[2]  "changed since last flush" sorted set (score = time of the first unflushed change)
-- KEYS[3]  tombstones of erased users (member -> expiry): a member tombstoned at now is skipped
-- ARGV[1]  now, epoch seconds (the caller's clock; scripts never read the clock)
-- ARGV[2], ARGV[3], ...  score, member pairs (a member may appear more than once); a score is a
--          decimal as Python's repr writes an epoch time
-- Returns  the number of distinct members whose score moved forward (a new member counts).
--
-- A ZADD GT CH per member moves it forward only and answers whether it moved, so no stored score is
-- read back (a ZMSCORE's scores, formatted into its reply and parsed again in Lua, cost more than
-- these commands). Every score is checked before anything is written, so a bad one changes nothing.
-- Prelude: lua/decimal.lua (is_decimal).
-- Prelude: lua/tombstones.lua (tombstoned).
if #KEYS ~= 3 then
  return redis.error_reply('zadd_unless_smaller: expected 3 keys, got ' .. #KEYS)
end
if #ARGV < 1 or (#ARGV - 1) % 2 ~= 0 or tonumber(ARGV[1]) == nil then
  return redis.error_reply('zadd_unless_smaller: expected now followed by score, member pairs')
end

for i = 2, #ARGV, 2 do
  if not is_decimal(ARGV[i]) then
    return redis.error_reply('zadd_unless_smaller: score is not a number: ' .. ARGV[i])
  end
end

local seen, dirty, tombstones = KEYS[1], KEYS[2], KEYS[3]
local now, now_number = ARGV[1], tonumber(ARGV[1])
-- Tombstones are rare: looked up only while the set exists.
local erasures = redis.call('EXISTS', tombstones) == 1
local moved, marks = {}, {}
for i = 2, #ARGV, 2 do
  local member = ARGV[i + 1]
  if not (erasures and tombstoned(tombstones, member, now_number))
      and redis.call('ZADD', seen, 'GT', 'CH', ARGV[i], member) == 1 and not moved[member] then
    moved[member] = true
    marks[#marks + 1] = now
    marks[#marks + 1] = member
  end
end
if #marks > 0 then
  redis.call('ZADD', dirty, 'NX', unpack(marks))
end
return #marks / 2

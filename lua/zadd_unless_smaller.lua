-- ZADD unless smaller: move each member's score forward, never back, and mark what moved.
--
-- KEYS[1]  last-seen sorted set (member = user id, score = epoch seconds)
-- KEYS[2]  "changed since last flush" sorted set (score = time of the first unflushed change)
-- KEYS[3]  tombstones of erased users (member -> expiry): a member tombstoned at now is skipped
-- ARGV[1]  now, epoch seconds (the caller's clock; scripts never read the clock)
-- ARGV[2], ARGV[3], ...  score, member pairs (a member may appear more than once)
-- Returns  the number of distinct members whose score moved forward (a new member counts).
--
-- Every pair is decided before anything is written, so a bad score changes nothing.
if #KEYS ~= 3 then
  return redis.error_reply('zadd_unless_smaller: expected 3 keys, got ' .. #KEYS)
end
if #ARGV < 1 or (#ARGV - 1) % 2 ~= 0 or tonumber(ARGV[1]) == nil then
  return redis.error_reply('zadd_unless_smaller: expected now followed by score, member pairs')
end

local now, now_number = ARGV[1], tonumber(ARGV[1])
-- Tombstones are rare: looked up only while the set exists.
local seen, dirty, tombstones = KEYS[1], KEYS[2], KEYS[3]
local erasures = redis.call('EXISTS', tombstones) == 1
local CHUNK = 1000 -- pairs per ZMSCORE/ZADD, well under Lua's unpack limit
-- best[member]: highest score so far (stored or from this call), so a duplicate can never write a
-- smaller score after a larger one; text[member]: the caller's text of that score, written back
-- as given (no number-to-string formatting); order: members that moved, first-come.
local best, text, order = {}, {}, {}
for first = 2, #ARGV, 2 * CHUNK do
  local members = {}
  for i = first, math.min(first + 2 * CHUNK - 1, #ARGV), 2 do
    members[#members + 1] = ARGV[i + 1]
  end
  local current = redis.call('ZMSCORE', seen, unpack(members))
  local erased = erasures and redis.call('ZMSCORE', tombstones, unpack(members)) or {}
  for n = 1, #members do
    local i = first + 2 * (n - 1)
    local member, score = members[n], tonumber(ARGV[i])
    if score == nil then
      return redis.error_reply('zadd_unless_smaller: score is not a number: ' .. ARGV[i])
    end
    if erased[n] and tonumber(erased[n]) > now_number then
      score = -math.huge -- an erased user: nothing of theirs is written until the tombstone expires
    end
    local known = best[member]
    if known == nil then
      known = current[n] and tonumber(current[n]) or -math.huge
    end
    if score > known then
      best[member] = score
      if text[member] == nil then
        order[#order + 1] = member
      end
      text[member] = ARGV[i]
    else
      best[member] = known
    end
  end
end

for first = 1, #order, CHUNK do
  local scores, marks = {}, {}
  for n = first, math.min(first + CHUNK - 1, #order) do
    local member = order[n]
    scores[#scores + 1] = text[member]
    scores[#scores + 1] = member
    marks[#marks + 1] = now
    marks[#marks + 1] = member
  end
  redis.call('ZADD', seen, unpack(scores))
  redis.call('ZADD', dirty, 'NX', unpack(marks))
end
return #order

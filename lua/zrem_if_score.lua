-- Compare-and-delete in a sorted set: remove each member only while its score is still the one the
-- caller read, so a member changed since (a newer last seen, a new change mark) stays for a later
-- pass. The last-seen partition migration copies what it read, then removes it with this.
--
-- KEYS[1]  the sorted set
-- ARGV[1], ARGV[2], ...  score, member pairs: the score each member had when read
-- Returns  the number of members removed.
if #KEYS ~= 1 or #ARGV % 2 ~= 0 then
  return redis.error_reply('zrem_if_score: expected 1 key and score, member pairs')
end
local CHUNK = 1000 -- members per ZMSCORE/ZREM, well under Lua's unpack limit
local removed = 0
for first = 1, #ARGV, 2 * CHUNK do
  local members, expected = {}, {}
  for i = first, math.min(first + 2 * CHUNK - 1, #ARGV), 2 do
    local score = tonumber(ARGV[i])
    if score == nil then
      return redis.error_reply('zrem_if_score: score is not a number: ' .. ARGV[i])
    end
    members[#members + 1] = ARGV[i + 1]
    expected[#expected + 1] = score
  end
local key = KEYS[1]
  local current = redis.call('ZMSCORE', key, unpack(members))
  local unchanged = {}
  for n = 1, #members do
    if current[n] and tonumber(current[n]) == expected[n] then
      unchanged[#unchanged + 1] = members[n]
    end
  end
  if #unchanged > 0 then
    removed = removed + redis.call('ZREM', key, unpack(unchanged))
  end
end
return removed

-- Record active users of one day into the day's, ISO week's and month's keys at once: SETBIT for
-- integer ids (exact, and an erase can clear the bit), PFADD for other ids (a HyperLogLog). A user
-- erased and still tombstoned at now (docs/privacy.md) is skipped.
--
-- KEYS[1]  tombstones of erased users (member -> expiry)
-- KEYS[2], KEYS[3], KEYS[4]  the bitmaps of the day, the week and the month
-- KEYS[5], KEYS[6], KEYS[7]  the HyperLogLogs of the day, the week and the month
-- ARGV[1]  now, epoch seconds
-- ARGV[2], ARGV[3], ARGV[4]  TTLs in seconds of the day's, week's and month's keys (> 0)
-- ARGV[5]  n, how many ids follow that are bit offsets (canonical decimal integers)
-- ARGV[6 .. 5 + n]  those ids; ARGV[6 + n ..]  the other ids
-- Returns  the number of users recorded (tombstoned ones left out).
if #KEYS ~= 7 or #ARGV < 5 then
  return redis.error_reply('actives_record: expected 7 keys; now, 3 TTLs, n and ids')
end
local now, n = tonumber(ARGV[1]), tonumber(ARGV[5])
if now == nil or n == nil or n < 0 or 5 + n > #ARGV then
  return redis.error_reply('actives_record: now must be a number and n a count of the ids given')
end
for i = 2, 4 do
  if (tonumber(ARGV[i]) or 0) <= 0 then
    return redis.error_reply('actives_record: TTLs must be positive numbers')
  end
end

local tombstones = KEYS[1]
local erasures = redis.call('EXISTS', tombstones) == 1
local function live(user)
  local expiry = erasures and redis.call('ZSCORE', tombstones, user)
  return not (expiry and tonumber(expiry) > now)
end

local recorded, others = 0, {}
for i = 6, 5 + n do
  if live(ARGV[i]) then
    for key = 2, 4 do
      redis.call('SETBIT', KEYS[key], ARGV[i], 1)
    end
    recorded = recorded + 1
  end
end
if recorded > 0 then
  for key = 2, 4 do
    redis.call('EXPIRE', KEYS[key], ARGV[key])
  end
end
for i = 6 + n, #ARGV do
  if live(ARGV[i]) then
    others[#others + 1] = ARGV[i]
  end
end
local CHUNK = 1000 -- ids per PFADD, well under Lua's unpack limit
for first = 1, #others, CHUNK do
  for key = 5, 7 do
    redis.call('PFADD', KEYS[key], unpack(others, first, math.min(first + CHUNK - 1, #others)))
  end
end
if #others > 0 then
  for key = 5, 7 do
    redis.call('EXPIRE', KEYS[key], ARGV[key - 3])
  end
end
return recorded + #others

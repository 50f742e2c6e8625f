-- First activity of signed-in users (docs/cohorts.md): each user's first active day is a 16-bit
-- day number in one BITFIELD, bit offset = user id x 16. A day earlier than the one stored (or the
-- first day ever) becomes the user's first: the day's first-active bitmap gets the user's bit and,
-- when an earlier day replaces a later one (a late event), the day's "moved" bitmap too, so a
-- cohort read leaves the user out of the later day's cohort. A user erased and still tombstoned
-- at now (docs/privacy.md) is skipped.
--
-- KEYS[1]  tombstones of erased users (member -> expiry)
-- KEYS[2]  the first-day field (string, BITFIELD u16 per user)
-- KEYS[3]  the day's first-active bitmap
-- KEYS[4]  the day's moved bitmap
-- ARGV[1]  now, epoch seconds
-- ARGV[2]  the day number (days since 1970-01-01, 1..65535)
-- ARGV[3]  TTL in seconds of the day's bitmaps; 0: the day is past their retention, set the field only
-- ARGV[4..]  the user ids (canonical decimal integers: bit offsets)
-- Returns  the number of users whose first day became this day.
if #KEYS ~= 4 or #ARGV < 3 then
  return redis.error_reply('first_active: expected 4 keys; now, day, ttl and ids')
end
local now, day, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if now == nil or day == nil or day < 1 or day > 65535 or ttl == nil or ttl < 0 then
  return redis.error_reply('first_active: now a number, day 1..65535 and ttl >= 0')
end

local tombstones, field, first, moved = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local erasures = redis.call('EXISTS', tombstones) == 1
local users, reads = {}, {}
for i = 4, #ARGV do
  local expiry = erasures and redis.call('ZSCORE', tombstones, ARGV[i])
  if not (expiry and tonumber(expiry) > now) then
    users[#users + 1] = ARGV[i]
    reads[#reads + 1], reads[#reads + 2], reads[#reads + 3] = 'GET', 'u16', '#' .. ARGV[i]
  end
end
if #users == 0 then
  return 0
end
-- One BITFIELD reads every user's first day, one more writes the new ones: a call per user would
-- cost the write path more than the work itself.
local olds = redis.call('BITFIELD', field, unpack(reads))
local writes, moves = {}, 0
for j, user in ipairs(users) do
  local old = olds[j]
  if old == 0 or old > day then
    writes[#writes + 1], writes[#writes + 2], writes[#writes + 3], writes[#writes + 4] = 'SET', 'u16', '#' .. user, day
    if ttl > 0 then
      redis.call('SETBIT', first, user, 1)
      if old ~= 0 then
        redis.call('SETBIT', moved, user, 1)
        moves = moves + 1
      end
    end
  end
end
local firsts = #writes / 4
if firsts > 0 then
  redis.call('BITFIELD', field, unpack(writes))
  if ttl > 0 then
    redis.call('EXPIRE', first, ttl)
    if moves > 0 then
      redis.call('EXPIRE', moved, ttl)
    end
  end
end
return firsts

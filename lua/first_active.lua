-- First activity of people (docs/cohorts.md): each person's first active day is a 16-bit day
-- number in one BITFIELD, bit offset = dense id x 16 (the id ``actives_record.lua`` assigned, queued
-- before this call). A day earlier than the one stored (or the first day ever) becomes the person's
-- first: the day's first-active bitmap gets their bit and, when an earlier day replaces a later one
-- (a late event), the day's "moved" bitmap too, so a cohort read leaves them out of the later
-- day's cohort. A digest the map does not hold (a person erased, or tombstoned when the id would
-- have been assigned) is skipped.
--
-- KEYS[1]  the dense id map (hash: digest -> dense id)
-- KEYS[2]  the first-day field (string, BITFIELD u16 per dense id)
-- KEYS[3]  the day's first-active bitmap
-- KEYS[4]  the day's moved bitmap
-- ARGV[1]  the day number (days since 1970-01-01, 1..65535)
-- ARGV[2]  TTL in seconds of the day's bitmaps; 0: the day is past their retention, set the field only
-- ARGV[3..]  the people's digests
-- Returns  the number of people whose first day became this day.
if #KEYS ~= 4 or #ARGV < 2 then
  return redis.error_reply('first_active: expected 4 keys; day, ttl and digests')
end
local day, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
if day == nil or day < 1 or day > 65535 or ttl == nil or ttl < 0 then
  return redis.error_reply('first_active: day 1..65535 and ttl >= 0')
end

local map, field, first, moved = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local users, reads = {}, {}
for i = 3, #ARGV do
  local id = redis.call('HGET', map, ARGV[i])
  if id then
    users[#users + 1] = id
    reads[#reads + 1], reads[#reads + 2], reads[#reads + 3] = 'GET', 'u16', '#' .. id
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
    writes[#writes + 1], writes[#writes + 2], writes[#writes + 3], writes[#writes + 4] = 'SET', 'u16', '#' .. user, ARGV[1]
    if ttl > 0 then
      redis.call('SETBIT', first, user, '1')
      if old ~= 0 then
        redis.call('SETBIT', moved, user, '1')
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

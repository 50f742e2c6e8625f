-- Zero one field of a bitmap or of a string of u16 fields, only where the string already holds the
-- whole field: an erase clears a person's bit in an active-user or cohort bitmap, and their first
-- day in the u16 string, at their dense id. A plain SETBIT or BITFIELD would extend a shorter string,
-- and make a missing one, which would then live without a TTL.
--
-- KEYS[1]  the string
-- ARGV[1]  the field's type: 'u1' (a bit) or 'u16'
-- ARGV[2]  the field's index (the dense id): the field starts at bit index * width
-- Returns  1 when the field held something (and is now zero), else 0.
local width = ({u1 = 1, u16 = 16})[ARGV[1]]
local index = tonumber(ARGV[2])
if #KEYS ~= 1 or width == nil or index == nil or index < 0 or index % 1 ~= 0 then
  return redis.error_reply('zero_field: expected 1 key, the type u1 or u16 and an index >= 0')
end
if redis.call('STRLEN', KEYS[1]) * 8 < (index + 1) * width then
  return 0
end
return redis.call('BITFIELD', KEYS[1], 'SET', ARGV[1], '#' .. ARGV[2], '0')[1] ~= 0 and 1 or 0

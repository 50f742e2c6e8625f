-- Add members to one audience figure in its day's, ISO week's and month's keys at once, and give
-- each key its TTL: PFADD for a HyperLogLog figure, SETBIT to 1 for a bitmap figure (the members
-- are then bit offsets). One call instead of a PFADD or SETBITs plus an EXPIRE per key.
--
-- KEYS[1..3]  the figure's day, week and month keys (one hash tag)
-- ARGV[1]     'hll' or 'bits'
-- ARGV[2..4]  TTL of the day, week and month key, seconds
-- ARGV[5..]   the members (hll) or the bit offsets (bits), at least one
-- Returns     the number of keys written (3)
if #KEYS ~= 3 or #ARGV < 5 or (ARGV[1] ~= 'hll' and ARGV[1] ~= 'bits') then
  return redis.error_reply("add_to_periods: expected 3 keys, 'hll' or 'bits', 3 TTLs and members")
end
local members = {}
for i = 5, #ARGV do
  members[#members + 1] = ARGV[i]
end
for k = 1, 3 do
  if ARGV[1] == 'hll' then
    redis.call('PFADD', KEYS[k], unpack(members))
  else
    for _, offset in ipairs(members) do
      redis.call('SETBIT', KEYS[k], offset, 1)
    end
  end
  redis.call('EXPIRE', KEYS[k], ARGV[1 + k])
end
return 3

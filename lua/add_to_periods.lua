-- Add members to one HyperLogLog figure in its day's, ISO week's and month's keys at once, and give
-- each key its TTL: one call instead of a PFADD plus an EXPIRE per key.
--
-- KEYS[1..3]  the figure's day, week and month keys (one hash tag)
-- ARGV[1..3]  TTL of the day, week and month key, seconds
-- ARGV[4..]   the members, at least one
-- Returns     the number of keys written (3)
if #KEYS ~= 3 or #ARGV < 4 then
  return redis.error_reply('add_to_periods: expected 3 keys, 3 TTLs and members')
end
local members = {}
for i = 4, #ARGV do
  members[#members + 1] = ARGV[i]
end
for k = 1, 3 do
  redis.call('PFADD', KEYS[k], unpack(members))
  redis.call('EXPIRE', KEYS[k], ARGV[k])
end
return 3

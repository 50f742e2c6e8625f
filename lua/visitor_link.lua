-- Record a signed-in visitor as the user's (docs/visitors.md#signing-in): the link visitor -> user,
-- and, unless the first-visit store already knows the visitor, a first visit on the day of the
-- sign-in without counting a new visitor (the person was counted under their user id), so a later
-- signed-out visit with the same cookie is not a new visitor. A visitor tombstoned at now (erased
-- with a user) gets no first visit.
-- Prelude: lua/tombstones.lua (tombstoned).
--
-- KEYS[1]  the link (string: the user id)
-- KEYS[2]  this shard's tombstones of erased visitor ids (member -> expiry)
-- KEYS[3]  the shard's hash of the current generation
-- KEYS[4]  the shard's hash of the generation before it
-- KEYS[5]  ... of the one before that
-- KEYS[6]  ... of the one before that
-- KEYS[7]  ... of the oldest live generation (store.lifetimes.VISITORS: 5 live at once)
-- ARGV[1]  user id, ARGV[2] the link's TTL, seconds (>= 1)
-- ARGV[3]  the visitor id (16 raw bytes), ARGV[4] the day number of the sign-in
-- ARGV[5]  now, epoch seconds; ARGV[6] TTL of the current generation's hash, seconds (>= 1)
-- Returns  1 when a first visit was recorded, else 0.
if #KEYS ~= 7 or #ARGV ~= 6 then
  return redis.error_reply('visitor_link: expected the link, tombstones and 5 hashes; 6 arguments')
end
local link_ttl, now, kept = tonumber(ARGV[2]), tonumber(ARGV[5]), tonumber(ARGV[6])
if link_ttl == nil or link_ttl < 1 or now == nil or kept == nil or kept < 1 then
  return redis.error_reply('visitor_link: TTLs must be >= 1 and now a number')
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', link_ttl)
local visitor = ARGV[3]
if tombstoned(KEYS[2], visitor, now) then
  return 0
end
for k = 3, 7 do
  if redis.call('HEXISTS', KEYS[k], visitor) == 1 then
    return 0
  end
end
redis.call('HSET', KEYS[3], visitor, ARGV[4])
redis.call('EXPIRE', KEYS[3], kept)
return 1

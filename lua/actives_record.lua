-- People into bitmaps by dense id (docs/key-schema.md): each person, named by the 12-byte digest
-- of their user id, gets a small integer from the map once (HGET, else INCR the counter and HSET),
-- and their bit at that offset is set in each bitmap given: the active-user bitmaps of a day, its
-- ISO week and its month on the write path; none when a caller only wants the dense ids (group
-- members, signups, a backfill). Ids are never reused, so an erased person's old bit never counts
-- for someone else. A person erased and still tombstoned at now (docs/privacy.md) is skipped and
-- gets no id.
-- Prelude: lua/tombstones.lua (tombstoned).
--
-- KEYS[1]  tombstones of erased people (member: digest -> expiry)
-- KEYS[2]  the dense id map (hash: digest -> dense id)
-- KEYS[3]  the last dense id assigned (string counter)
-- KEYS[4 ..]  0 to 3 bitmaps to set the people's bits in
-- ARGV[1]  now, epoch seconds
-- ARGV[2 .. 1 + b]  TTL in seconds (> 0) of each of the b bitmaps
-- ARGV[2 + b ..]  the digests
-- Returns  the dense id of each digest in ARGV order, 0 for a tombstoned one.
local b = #KEYS - 3
if b < 0 or b > 3 or #ARGV < 1 + b then
  return redis.error_reply('actives_record: expected 3 to 6 keys; now, a TTL per bitmap and digests')
end
local now = tonumber(ARGV[1])
if now == nil then
  return redis.error_reply('actives_record: now must be a number')
end
for i = 2, 1 + b do
  if (tonumber(ARGV[i]) or 0) <= 0 then
    return redis.error_reply('actives_record: TTLs must be positive numbers')
  end
end

local tombstones, map, counter = KEYS[1], KEYS[2], KEYS[3]
local erasures = redis.call('EXISTS', tombstones) == 1
local ids, recorded = {}, 0
for i = 2 + b, #ARGV do
  local digest = ARGV[i]
  local id = 0
  if not (erasures and tombstoned(tombstones, digest, now)) then
    local bit = redis.call('HGET', map, digest)
    if bit then
      id = tonumber(bit)
    else
      id = redis.call('INCR', counter)
      bit = string.format('%d', id)
      redis.call('HSET', map, digest, bit)
    end
    -- The bit's offset as text: Redis 7.0 formats a Lua number given to redis.call with %.17g.
    for key = 4, 3 + b do
      redis.call('SETBIT', KEYS[key], bit, '1')
    end
    recorded = recorded + 1
  end
  ids[#ids + 1] = id
end
if recorded > 0 then
  for key = 4, 3 + b do
    redis.call('EXPIRE', KEYS[key], ARGV[key - 2])
  end
end
return ids

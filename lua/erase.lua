-- Erase one user from the keys of one hash tag and tombstone them there, atomically, so a write of
-- the slot lands before the erase (and is erased) or after it (and is skipped). Each key comes with
-- its operation (ARGV[3 + i] for KEYS[1 + i]):
--   del      DEL the key (a per-user key)
--   zrem     ZREM the member
--   hdel     HDEL the member as a field
--   map      HGET the member's dense id (remembered for bit and u16), then HDEL it: the id is never
--            assigned again (the dense id map of {au}, whose member is a person's digest)
--   bit      SETBIT the remembered dense id to 0, only where the bitmap reaches it (a shorter or
--            missing bitmap is left as it is: never grown, never created)
--   u16      BITFIELD SET u16 #id 0 (the remembered dense id), only where the string reaches it
--   viewer   HGET the display name of the user's views hash (remembered for byname), then DEL it
--   aliases  SMEMBERS the former display names (remembered for byname), then DEL the key
--   byname   ZREM "<name> NUL <member>" for each remembered name and for the member itself
--   pending  SREM the same entries (a by-name pending set: not yet merged into the index)
-- The tombstone set drops its expired members, gets this one, and lives as long as its latest.
--
-- KEYS[1]  the tag's tombstones (sorted set: member -> expiry, epoch seconds)
-- KEYS[2..]  the keys to clean, each with its operation in ARGV
-- ARGV[1]  the member: a user id (a 16-byte visitor id in {vis:N}, a 12-byte digest in {au})
-- ARGV[2]  now, epoch seconds
-- ARGV[3]  when the tombstone expires, epoch seconds (> now)
-- ARGV[4..]  one operation per key of KEYS[2..]
-- Returns  how many traces were removed (keys deleted, members removed, bits cleared).
if #KEYS < 1 or #ARGV ~= #KEYS + 2 then
  return redis.error_reply('erase: expected the tombstones and N keys; member, now, expiry and N operations')
end
local member, now, expiry = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if now == nil or expiry == nil or expiry <= now then
  return redis.error_reply('erase: now and expiry must be numbers, expiry after now')
end
for i = 4, #ARGV do
  local op = ARGV[i]
  if op ~= 'del' and op ~= 'zrem' and op ~= 'hdel' and op ~= 'map' and op ~= 'bit' and op ~= 'u16'
      and op ~= 'viewer' and op ~= 'aliases' and op ~= 'byname' and op ~= 'pending' then
    return redis.error_reply('erase: unknown operation ' .. op)
  end
end

local removed, names, id = 0, {member}, nil
for i = 2, #KEYS do
  local key, op = KEYS[i], ARGV[i + 2]
  if op == 'del' then
    removed = removed + redis.call('DEL', key)
  elseif op == 'zrem' then
    removed = removed + redis.call('ZREM', key, member)
  elseif op == 'hdel' then
    removed = removed + redis.call('HDEL', key, member)
  elseif op == 'map' then
    id = tonumber(redis.call('HGET', key, member))
    removed = removed + redis.call('HDEL', key, member)
  elseif op == 'bit' then
    if id and redis.call('STRLEN', key) > math.floor(id / 8) then
      removed = removed + redis.call('SETBIT', key, id, 0)
    end
  elseif op == 'u16' then
    if id and redis.call('STRLEN', key) > id * 2 then
      if redis.call('BITFIELD', key, 'SET', 'u16', '#' .. id, 0)[1] ~= 0 then
        removed = removed + 1
      end
    end
  elseif op == 'viewer' then
    local name = redis.call('HGET', key, 'name')
    if name then
      names[#names + 1] = name
    end
    removed = removed + redis.call('DEL', key)
  elseif op == 'aliases' then
    for _, name in ipairs(redis.call('SMEMBERS', key)) do
      names[#names + 1] = name
    end
    removed = removed + redis.call('DEL', key)
  else -- byname, pending
    local remove = op == 'byname' and 'ZREM' or 'SREM'
    for _, name in ipairs(names) do
      removed = removed + redis.call(remove, key, name .. '\0' .. member)
    end
  end
end

local tombstones = KEYS[1]
redis.call('ZREMRANGEBYSCORE', tombstones, '-inf', now)
redis.call('ZADD', tombstones, 'GT', expiry, member)
local lifetime = math.ceil(expiry - now)
if redis.call('TTL', tombstones) < lifetime then
  redis.call('EXPIRE', tombstones, lifetime)
end
return removed

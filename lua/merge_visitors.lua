-- Merge a legacy first-visit hash (releases before generations, no TTL) into its shard's current
-- generation: each id moves with its first-visit day, keeping the earlier day when the generation
-- already holds the id (it came back before the merge and was counted new again). Bounded: at most
-- ARGV[2] entries a call (those hashes were listpacks); the hash goes once empty.
--
-- KEYS[1]  the legacy hash {vis:N}:seen:<partition> (id -> day number)
-- KEYS[2]  the shard's hash of the current generation {vis:N}:gen:<generation>
-- ARGV[1]  TTL of the generation's hash in seconds (> 0)
-- ARGV[2]  at most this many entries a call (> 0; HSCAN's COUNT)
-- Returns  the entries the legacy hash has left (0: merged and deleted).
if #KEYS ~= 2 or #ARGV ~= 2 then
  return redis.error_reply('merge_visitors: expected the legacy and generation hashes; ttl and step')
end
local ttl, step = tonumber(ARGV[1]), tonumber(ARGV[2])
if ttl == nil or ttl <= 0 or step == nil or step <= 0 then
  return redis.error_reply('merge_visitors: ttl and step must be positive numbers')
end

local legacy, current = KEYS[1], KEYS[2]
local entries = redis.call('HSCAN', legacy, 0, 'COUNT', step)[2]
for i = 1, #entries, 2 do
  local visitor, day = entries[i], entries[i + 1]
  local kept = redis.call('HGET', current, visitor)
  if not kept or tonumber(day) < tonumber(kept) then
    redis.call('HSET', current, visitor, day)
  end
  redis.call('HDEL', legacy, visitor)
end
if #entries > 0 then
  redis.call('EXPIRE', current, ttl)
end
return redis.call('HLEN', legacy)

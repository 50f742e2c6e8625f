-- Repair a key that has no TTL: give it one, or delete it. A key that has a TTL (or is gone) is
-- left alone, so a key re-created with a TTL between the SCAN and this call is never touched.
--
-- KEYS[1]  the key
-- ARGV[1]  TTL in milliseconds to set; 0 deletes the key instead
-- Returns  1 when the key had no TTL and was repaired or deleted, 0 otherwise.
if #KEYS ~= 1 or #ARGV ~= 1 then
  return redis.error_reply('expire_if_persistent: expected 1 key and 1 argument')
end
local ttl = tonumber(ARGV[1])
if ttl == nil or ttl < 0 then
  return redis.error_reply('expire_if_persistent: TTL must be a number >= 0')
end
local key = KEYS[1]
if redis.call('PTTL', key) ~= -1 then
  return 0
end
if ttl == 0 then
  redis.call('DEL', key)
else
  redis.call('PEXPIRE', key, ttl)
end
return 1

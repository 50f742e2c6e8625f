-- Extend a lock's TTL only if we still hold it (compare-and-pexpire).
--
-- KEYS[1]  the lock key
-- ARGV[1]  the holder's token
-- ARGV[2]  the new TTL in milliseconds
-- Returns  1 when the lock was ours and its TTL is reset, 0 when it is no longer ours.
if #KEYS ~= 1 or #ARGV ~= 2 then
  return redis.error_reply('lock_extend: expected 1 key and 2 arguments')
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0

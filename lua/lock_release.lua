-- Release a lock only if we still hold it (compare-and-delete).
--
-- KEYS[1]  the lock key
-- ARGV[1]  the token the holder set with SET key token NX PX ttl
-- Returns  1 when the lock was ours and is now deleted, 0 when it had expired or belongs to
--          another holder (it is left untouched).
if #KEYS ~= 1 or #ARGV ~= 1 then
  return redis.error_reply('lock_release: expected 1 key and 1 argument')
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0

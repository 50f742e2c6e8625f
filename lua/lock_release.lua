-- Release a lock only if we still hold it (compare-and-delete), and announce the release to the
-- waiters blocked on the lock's announcement list (one element; each waiter woken passes it on).
--
-- KEYS[1]  the lock key
-- KEYS[2]  the lock's announcement list
-- ARGV[1]  the token the holder set when it took the lock
-- ARGV[2]  milliseconds the announcement stays for late waiters
-- Returns  1 when the lock was ours and is now released, 0 when it had expired or belongs to
--          another holder (nothing is changed).
if #KEYS ~= 2 or #ARGV ~= 2 then
  return redis.error_reply('lock_release: expected 2 keys and 2 arguments')
end
local lock, signal = KEYS[1], KEYS[2]
if redis.call('GET', lock) ~= ARGV[1] then
  return 0
end
redis.call('DEL', lock, signal)
redis.call('RPUSH', signal, '1')
redis.call('PEXPIRE', signal, ARGV[2])
return 1

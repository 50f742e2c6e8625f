-- Take a lock if it is free (SET NX PX), and clear the release announcements of earlier holders,
-- so a waiter that arrives during this holding waits for this holder's release, not an old one.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the lock's announcement list (waiters BLPOP on it)
-- ARGV[1]  a random token, unique to this holder
-- ARGV[2]  the lock's TTL in milliseconds
-- Returns  1 when the lock is now ours, 0 when another holder has it (nothing is changed).
if #KEYS ~= 2 or #ARGV ~= 2 then
  return redis.error_reply('lock_acquire: expected 2 keys and 2 arguments')
end
local lock, signal = KEYS[1], KEYS[2]
if not redis.call('SET', lock, ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 0
end
redis.call('DEL', signal)
return 1

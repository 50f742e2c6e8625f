-- Take a lock if it is free (SET NX PX), and clear the release announcements of earlier holders,
-- so a waiter that arrives during this holding waits for this holder's release, not an old one.
-- A lock that already holds this token is re-entered as it is (its TTL unchanged): an earlier
-- request of the same holder, whose reply was lost (a timeout, a stalled server), took it.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the lock's announcement list (waiters BLPOP on it)
-- ARGV[1]  a random token, unique to this holder
-- ARGV[2]  the lock's TTL in milliseconds
-- Returns  1 when the lock is ours (taken now, or re-entered), 0 when another holder has it
--          (nothing is changed).
if #KEYS ~= 2 or #ARGV ~= 2 then
  return redis.error_reply('lock_acquire: expected 2 keys and 2 arguments')
end
local lock, signal = KEYS[1], KEYS[2]
if redis.call('SET', lock, ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('DEL', signal)
  return 1
end
if redis.call('GET', lock) == ARGV[1] then
  return 1
end
return 0

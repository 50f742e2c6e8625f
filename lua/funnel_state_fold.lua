-- Move a person's funnel progress as releases before the generations kept it, a string of its own,
-- into the partition's current generation, and delete the string: for ``manage.py
-- activity_upgrade``. A state a generation already holds for the person was written by this release
-- since, from the newer views: it stays, and the string goes. A repeat finds nothing and changes
-- nothing.
--
-- KEYS[1]  the earlier key (string)
-- KEYS[2]  the partition's states of the current generation (hash: person -> state)
-- KEYS[3]  the partition's states of the generation before
-- KEYS[4]  the partition's states of the one before that
-- ARGV[1]  the person ('u:<user>' or 'v:<visitor>')
-- ARGV[2]  the current generation's TTL, seconds (>= 1)
-- Returns  1 when the state was moved, 0 when it was gone or a generation held the person.
if #KEYS ~= 4 or #ARGV ~= 2 then
  return redis.error_reply('funnel_state_fold: expected 4 keys and 2 arguments')
end
local person, ttl = ARGV[1], tonumber(ARGV[2])
if ttl == nil or ttl < 1 then
  return redis.error_reply('funnel_state_fold: the TTL must be >= 1')
end
local state = redis.call('GET', KEYS[1])
if not state then
  return 0
end
redis.call('DEL', KEYS[1])
for k = 2, 4 do
  if redis.call('HEXISTS', KEYS[k], person) == 1 then
    return 0
  end
end
redis.call('HSET', KEYS[2], person, state)
redis.call('EXPIRE', KEYS[2], ARGV[2])
return 1

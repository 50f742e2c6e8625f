-- Take one person out of "pages now" (lua/pages_now_record.lua), for an erase (which tombstones
-- the person in the tag first, so a view of theirs still in flight is skipped).
--
-- KEYS[1]  latest view per person (sorted set: person -> ts)
-- KEYS[2]  latest page per person (hash: person -> path)
-- KEYS[3]  people per page (sorted set: path -> minus its people)
-- ARGV[1]  the person
-- Returns  1 when the person was there, else 0.
if #KEYS ~= 3 or #ARGV ~= 1 then
  return redis.error_reply('pages_now_forget: expected 3 keys and 1 argument')
end
local latest, page, people = KEYS[1], KEYS[2], KEYS[3]
local person = ARGV[1]
local path = redis.call('HGET', page, person)
if not path then
  return 0
end
if tonumber(redis.call('ZINCRBY', people, 1, path)) >= 0 then
  redis.call('ZREM', people, path)
end
redis.call('HDEL', page, person)
redis.call('ZREM', latest, person)
return 1

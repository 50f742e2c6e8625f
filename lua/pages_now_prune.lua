-- Take the people gone offline out of "pages now" (lua/pages_now_record.lua): at most a given
-- number of them per call, oldest first, so a call's work is bounded and a caller that needs every
-- one out calls again while some are left.
--
-- KEYS[1]  latest view per person (sorted set: person -> ts)
-- KEYS[2]  latest page per person (hash: person -> path)
-- KEYS[3]  people per page (sorted set: path -> minus its people)
-- ARGV[1]  the cutoff, epoch seconds: a person whose latest view is older is offline
-- ARGV[2]  people taken out at most (>= 1)
-- Returns  the number of offline people left in KEYS[1] after this call.
if #KEYS ~= 3 or #ARGV ~= 2 then
  return redis.error_reply('pages_now_prune: expected 3 keys and 2 arguments')
end
local cutoff, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
if cutoff == nil or limit == nil or limit < 1 then
  return redis.error_reply('pages_now_prune: the cutoff must be a number and the limit >= 1')
end

local latest, page, people = KEYS[1], KEYS[2], KEYS[3]
local older = '(' .. ARGV[1]
local gone = redis.call('ZRANGE', latest, '-inf', older, 'BYSCORE', 'LIMIT', 0, limit)
for _, person in ipairs(gone) do
  local path = redis.call('HGET', page, person)
  if path and tonumber(redis.call('ZINCRBY', people, 1, path)) >= 0 then
    redis.call('ZREM', people, path)
  end
end
if #gone > 0 then
  redis.call('HDEL', page, unpack(gone))
  redis.call('ZREM', latest, unpack(gone))
end
return redis.call('ZCOUNT', latest, '-inf', older)

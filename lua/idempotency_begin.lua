-- Claim an idempotency record for an attempt, or say what it holds. A new record is claimed; one for
-- another body is a conflict; one holding an answer gives it back; one whose claim's lease lasts is
-- still running; one whose lease has passed (its owner gave up or died) is claimed again: a slot
-- an earlier attempt wrote page views in is not written again (lua/fence.lua).
--
-- KEYS[1]  the record (hash: digest, claim, lease, status, body)
-- ARGV[1]  the body's digest
-- ARGV[2]  the attempt's random token
-- ARGV[3]  now, epoch seconds
-- ARGV[4]  the claim's lease, seconds (> 0)
-- ARGV[5]  the record's TTL, seconds (>= 1), given when it is made
-- Returns  {'claimed'}, {'conflict'}, {'answered', status, body} or {'running', seconds left (string)}.
if #KEYS ~= 1 or #ARGV ~= 5 then
  return redis.error_reply('idempotency_begin: expected 1 key and 5 arguments')
end
local record, digest, token = KEYS[1], ARGV[1], ARGV[2]
local now, lease, ttl = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
if now == nil or lease == nil or lease <= 0 or ttl == nil or ttl < 1 then
  return redis.error_reply('idempotency_begin: now must be a number, the lease positive and the TTL >= 1')
end
local held = redis.call('HMGET', record, 'digest', 'lease', 'status', 'body')
if not held[1] then
  redis.call('HSET', record, 'digest', digest, 'claim', token, 'lease', tostring(now + lease))
  redis.call('EXPIRE', record, ttl)
  return {'claimed'}
end
if held[1] ~= digest then
  return {'conflict'}
end
if held[3] then
  return {'answered', held[3], held[4]}
end
local until_ = tonumber(held[2]) or 0
if until_ > now then
  return {'running', tostring(until_ - now)}
end
redis.call('HSET', record, 'claim', token, 'lease', tostring(now + lease))
return {'claimed'}

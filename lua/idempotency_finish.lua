-- Keep an attempt's answer in its idempotency record, if the attempt still holds the claim and no
-- answer is kept yet; the record then lives its full TTL from now.
--
-- KEYS[1]  the record (hash: digest, claim, lease, status, body)
-- ARGV[1]  the attempt's token
-- ARGV[2]  the answer's status
-- ARGV[3]  the answer's body
-- ARGV[4]  the record's TTL, seconds (>= 1)
-- Returns  {'kept', status, body} (this answer), {'answered', status, body} (one kept before), or
--          nil when another attempt took the claim over.
if #KEYS ~= 1 or #ARGV ~= 4 or tonumber(ARGV[4]) == nil or tonumber(ARGV[4]) < 1 then
  return redis.error_reply('idempotency_finish: expected 1 key and 4 arguments, the TTL >= 1')
end
local record = KEYS[1]
local held = redis.call('HMGET', record, 'claim', 'status', 'body')
if held[2] then
  return {'answered', held[2], held[3]}
end
if held[1] ~= ARGV[1] then
  return nil
end
redis.call('HSET', record, 'status', ARGV[2], 'body', ARGV[3])
redis.call('EXPIRE', record, tonumber(ARGV[4]))
return {'kept', ARGV[2], ARGV[3]}
